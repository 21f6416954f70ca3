"""The tiny preset trains in seconds, its loss falls, and the output directory loads with Auto* classes."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specstream_core.errors import SpecstreamError
from specstream_core.training.pretrain import pretrain
from specstream_core.tasks import EOS, load_split
from specstream_core.tasks.evaluate import evaluate


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    info = pretrain(out, "tiny", minutes=10.0, max_steps=60)
    return out, info


def test_loss_falls(tiny_dir):
    _, info = tiny_dir
    losses = [loss for _, loss in info["losses"]]
    assert info["steps"] == 60
    assert losses[-1] < losses[0] - 0.5


def test_output_loads_and_generates(tiny_dir):
    out, _ = tiny_dir
    assert (out / "model.safetensors").is_file()
    assert not (out / "checkpoint").exists()
    assert json.loads((out / "training_info.json").read_text())["preset"] == "tiny"
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert tok.eos_token == EOS and tok.eos_token_id == model.config.eos_token_id
    prompt = load_split("eval", "sql", n=1)[0]["prompt"]
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    assert ids[0, 0].item() == tok.bos_token_id
    assert tok.decode(ids[0], skip_special_tokens=True) == prompt  # byte-level: lossless round trip
    with torch.inference_mode():
        out_ids = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert out_ids.shape[1] <= ids.shape[1] + 5
    report = evaluate(model, tok, n=1, categories=["sql", "math"], max_new_tokens=4)
    assert set(report["per_category"]) == {"sql", "math"}


def test_resume_requires_checkpoint(tmp_path):
    with pytest.raises(SpecstreamError):
        pretrain(tmp_path, "tiny", resume=True)
    with pytest.raises(SpecstreamError):
        pretrain(tmp_path, "nope")


def test_init_from_continues_a_saved_model(tiny_dir, tmp_path):
    src, first = tiny_dir
    info = pretrain(tmp_path / "more", "tiny", minutes=10.0, max_steps=5, init_from=src, seed=1)
    assert info["previous_run"]["steps"] == first["steps"]
    assert info["losses"][0][1] < first["losses"][0][1] - 0.5  # starts from the trained weights, not from scratch
    assert AutoTokenizer.from_pretrained(tmp_path / "more").get_vocab() == AutoTokenizer.from_pretrained(src).get_vocab()


def test_packing_matches_inference_tokenization(tiny_dir):
    from specstream_core.training.pretrain import pack_documents as pack

    out, _ = tiny_dir
    tok = AutoTokenizer.from_pretrained(out)
    ex = load_split("train", "code", n=1)[0]  # the answer starts with indentation: the risky boundary
    row = pack(tok, [(ex["prompt"], ex["reference"]), ("next",)], seq_len=1)[:, 0].tolist()
    prompt_ids = tok(ex["prompt"])["input_ids"]  # starts with BOS (= EOS), as at inference
    answer_ids = tok(ex["reference"], add_special_tokens=False)["input_ids"]
    assert row[: len(prompt_ids) + len(answer_ids) + 1] == prompt_ids + answer_ids + [tok.eos_token_id]


def test_draft_model_shares_the_tokenizer(tiny_dir, tmp_path):
    """--tokenizer-from + size overrides: a small draft model for assisted generation."""
    out, _ = tiny_dir
    info = pretrain(tmp_path / "draft", "tiny", minutes=10.0, max_steps=3, tokenizer_from=out, layers=1, hidden=128)
    assert info["num_layers"] == 1 and info["hidden_size"] == 128 and info["num_heads"] == 2
    assert info["intermediate_size"] == 512 and info["tokenizer_from"] == str(out)
    assert (tmp_path / "draft" / "tokenizer.json").read_text() == (out / "tokenizer.json").read_text()
    with pytest.raises(SpecstreamError, match="divisible"):
        pretrain(tmp_path / "bad", "tiny", max_steps=1, hidden=100, heads=3)


def test_resume_never_runs_code_from_the_checkpoint(tmp_path):
    """A checkpoint is loaded with weights_only=True: a pickle that calls a function is refused, not run."""
    import pathlib

    from specstream_core.training.pretrain import PRESETS, train_base as train

    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return pathlib.Path.touch, (marker,)

    (tmp_path / "checkpoint").mkdir()
    torch.save({"model": Payload(), "optimizer": {}, "step": 0, "elapsed": 0.0, "tokens": 0, "losses": []},
               tmp_path / "checkpoint" / "state.pt")
    model = torch.nn.Linear(2, 2)
    with pytest.raises(SpecstreamError, match="cannot read checkpoint"):
        train(model, torch.zeros(4, 8, dtype=torch.long), PRESETS["tiny"], tmp_path, minutes=1.0, max_steps=1,
              resume=True)
    assert not marker.exists()


def test_checkpoint_resumes_with_weights_only(tmp_path, capsys):
    """What pretrain saves loads back under weights_only=True (the optimizer, the losses as tuples)."""
    from specstream_core.training.pretrain import PRESETS, train_base as train
    from tiny_models import tiny_model

    data = torch.randint(3, 128, (8, 16), generator=torch.Generator().manual_seed(0))
    preset = PRESETS["tiny"]
    train(tiny_model("llama", seed=0), data, preset, tmp_path, minutes=10.0, max_steps=2, resume=False,
          checkpoint_minutes=0.0, log_every=1)
    saved = torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=True)
    assert saved["step"] == 2 and not (tmp_path / "checkpoint" / "state.pt.tmp").exists()
    stats = train(tiny_model("llama", seed=0), data, preset, tmp_path, minutes=10.0, max_steps=3, resume=True,
                  checkpoint_minutes=0.0, log_every=1)
    assert stats["steps"] == 3 and "resumed at step 2" in capsys.readouterr().out

"""`model.generate(custom_generate=<repo dir>, trust_remote_code=True)` (custom_generate/generate.py) runs
speculative streaming through transformers' own loading path, and equals our CLI's output token for token."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specstream_core import Engine
from specstream_core.cli import main
from tiny_models import save_tiny_model_dir

ROOT = str(Path(__file__).resolve().parents[1])  # holds custom_generate/generate.py


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def model(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir).eval()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def cli_tokens(capsys, *args):
    capsys.readouterr()
    assert main(["generate", "--json", "--raw", "--dtype", "fp32", *args]) == 0  # the caller's fp32 model
    return json.loads(capsys.readouterr().out)["token_ids"]


def test_equals_the_cli_token_for_token(model_dir, model, tokenizer, capsys):
    prompt = "hello world"
    expected = cli_tokens(capsys, "--base", model_dir, "--gamma", "3", "--topk", "3,2,1", "--max-new-tokens", "10",
                          "--prompt", prompt)
    ids = Engine.load(model_dir, gamma=3, chat=False).encode(prompt)  # the CLI's prompt ids (--raw)
    inputs = torch.tensor([ids])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = model.generate(inputs, attention_mask=torch.ones_like(inputs), custom_generate=ROOT,
                         trust_remote_code=True, gamma=3, tree_topk=(3, 2, 1), max_new_tokens=10,
                         return_dict_in_generate=True)
    assert out.specstream_stats[0]["new_tokens"] == 10  # our loop ran, not transformers' own
    out = out.sequences
    assert out[0, :len(ids)].tolist() == ids
    assert out[0, len(ids):].tolist() == expected
    # lossless: plain transformers greedy decoding gives the same tokens
    plain = model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False, max_new_tokens=10)
    assert out.tolist() == plain.tolist()
    # the caller's model comes back as it was: no adapters left in it, same weights
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_trained_streams_from_a_directory_and_a_left_padded_batch(model_dir, model, tokenizer, tmp_path, capsys):
    engine = Engine.load(model_dir, gamma=3, n_stream_layers=2)
    with torch.no_grad():
        for p in engine.streams.trainable_parameters():
            p.normal_(0, 0.05)
    streams_dir = str(tmp_path / "streams")
    engine.streams.save_pretrained(streams_dir)
    prompts = ["abc", "the quick brown fox"]
    expected = [cli_tokens(capsys, "--base", model_dir, "--streams", streams_dir, "--topk", "2,2,1",
                           "--max-new-tokens", "8", "--prompt", p) for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    out = model.generate(**batch, custom_generate=ROOT, trust_remote_code=True, streams=streams_dir,
                         tree_topk=[2, 2, 1], max_new_tokens=8, return_dict_in_generate=True)
    width = batch["input_ids"].shape[1]
    assert [row[width:].tolist() for row in out.sequences] == expected
    assert len(out.specstream_stats) == 2 and all(s["new_tokens"] == 8 for s in out.specstream_stats)


def test_refuses_what_it_cannot_honour(model, tokenizer):
    inputs = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="num_beams"):
        model.generate(inputs, custom_generate=ROOT, trust_remote_code=True, num_beams=2, max_new_tokens=3)
    with pytest.raises(ValueError, match="trust_remote_code|custom generation code"):
        model.generate(inputs, custom_generate=ROOT, trust_remote_code=False, max_new_tokens=3)

"""The layer draft for assisted generation (model/layer_draft.py, training/layer_draft.py): it learns the
base's next token, survives a save/load round trip and a kill, and transformers' assisted generation
with it gives the base's own greedy output."""

import json

import pytest
import torch

from specstream_core import SpecstreamError
from specstream_core.model import layer_draft
from specstream_core.training.data import one_per_row
from specstream_core.training.layer_draft import DraftTrainConfig, agreement, train_draft
from tiny_models import hf_greedy, prompts, tiny_model

VOCAB = list(range(0, 128, 2)) + [1]  # half the ids: the head scores these only


def greedy_pairs(model, n=60, seed=0):
    """(prompt, the base's own greedy answer) pairs: what self-distillation gives."""
    return [(p, hf_greedy(model, p, 12)) for p in prompts(n, seed=seed, max_len=10)]


def quiet(*a):
    pass


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tiny_model("llama", seed=0)
    data = one_per_row(greedy_pairs(base), 32)
    out = tmp_path_factory.mktemp("draft")
    cfg = DraftTrainConfig(n_layers=1, lora_rank=4, steps=60, batch_size=8, seq_len=32, lr=1e-2, warmup=5,
                           checkpoint_every=0)
    fresh = layer_draft.truncated(base, 1, VOCAB)
    before = agreement(fresh, *data)
    summary = train_draft(base, cfg, sorted(VOCAB), data, str(out), eval_data=data, progress=False, log=quiet)
    return base, data, out, before, summary


def test_the_draft_learns_the_bases_next_token(trained):
    base, data, out, before, summary = trained
    losses = [h["loss"] for h in summary["history"]]
    assert losses[-1] < 0.8 * losses[0], losses
    assert summary["eval"]["agreement"] > before + 0.1, (before, summary["eval"])
    saved = json.loads((out / layer_draft.CONFIG_NAME).read_text())
    assert saved["n_layers"] == 1 and saved["vocab"] == sorted(VOCAB)
    # the base is untouched: all its layers, its full head, no adapter
    assert len(base.model.layers) == base.config.num_hidden_layers > 1 and isinstance(base.lm_head, torch.nn.Linear)
    assert not any("lora_" in n for n, _ in base.named_parameters())


def test_a_saved_draft_reloads_to_the_same_model(trained):
    base, data, out, _, summary = trained
    draft = layer_draft.load(str(out), base)
    assert abs(agreement(draft, *data) - summary["eval"]["agreement"]) < 1e-6
    logits = draft(torch.tensor([[3, 5, 7]])).logits
    outside = torch.ones(logits.shape[-1], dtype=torch.bool)
    outside[torch.tensor(VOCAB)] = False
    assert (logits[..., outside] == torch.finfo(logits.dtype).min).all()  # never proposed


def test_assisted_generation_with_the_draft_is_the_bases_greedy_output(trained):
    base, _, out, _, _ = trained
    draft = layer_draft.load(str(out), base)
    for ids in prompts(4, seed=9):
        assert hf_greedy(base, ids, 16, assistant_model=draft) == hf_greedy(base, ids, 16)


def test_resume_continues_bit_identically(tmp_path):
    base = tiny_model("llama", seed=0)
    data = one_per_row(greedy_pairs(base, n=20), 32)
    cfg = DraftTrainConfig(n_layers=1, lora_rank=2, steps=10, batch_size=4, seq_len=32, warmup=20, checkpoint_every=5)
    train_draft(base, cfg, VOCAB, data, str(tmp_path / "straight"), progress=False, log=quiet)
    from dataclasses import replace

    train_draft(base, replace(cfg, steps=5), VOCAB, data, str(tmp_path / "resumed"), progress=False, log=quiet)
    messages = []
    train_draft(base, cfg, VOCAB, data, str(tmp_path / "resumed"), resume=True, progress=False, log=messages.append)
    assert "resumed from step 5" in messages
    a = (tmp_path / "straight" / "lora" / "adapter_model.safetensors").read_bytes()
    b = (tmp_path / "resumed" / "lora" / "adapter_model.safetensors").read_bytes()
    assert a == b


def test_bad_drafts_get_clear_messages(tmp_path):
    base = tiny_model("llama", seed=0)
    n = base.config.num_hidden_layers
    with pytest.raises(SpecstreamError, match=f"1 to {n - 1} layers"):
        layer_draft.truncated(base, n, VOCAB)
    (tmp_path / layer_draft.CONFIG_NAME).write_text("{not json")
    with pytest.raises(SpecstreamError, match="cannot read the draft config"):
        layer_draft.load(str(tmp_path), base)
    layer_draft.save_config(str(tmp_path), 1, 2, [5, 10_000])
    with pytest.raises(SpecstreamError, match="outside this model's vocabulary"):
        layer_draft.load(str(tmp_path), base)

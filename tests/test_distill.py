"""Self-distillation targets: batched, left-padded greedy answers equal one-by-one greedy decoding,
stop at EOS, and a cache file spares regenerating them."""

import json
from types import SimpleNamespace

import pytest
import torch

from specstream_core import distill
from specstream_core.errors import SpecstreamError
from tiny_models import tiny_model


def _tokenizer(eos=None):
    return SimpleNamespace(eos_token_id=eos, pad_token_id=0)


def _prompts():
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, 128, (n,), generator=g).tolist() for n in (5, 11, 8, 3)]


def test_batched_answers_equal_one_by_one_greedy():
    model = tiny_model("llama", seed=1)
    prompts = _prompts()
    got = distill.greedy_answers(model, _tokenizer(), prompts, max_new_tokens=12, batch_size=3, progress=False)
    for ids, answer in zip(prompts, got):
        inp = torch.tensor([ids])
        ref = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False, max_new_tokens=12,
                             pad_token_id=0)[0, len(ids):].tolist()
        assert answer == ref


def test_answers_stop_after_eos():
    model = tiny_model("llama", seed=1)
    prompts = _prompts()
    free = distill.greedy_answers(model, _tokenizer(), prompts, max_new_tokens=12, progress=False)
    eos = free[0][4]  # a token the model emits: treat it as the end marker
    model.generation_config.eos_token_id = eos
    cut = distill.greedy_answers(model, _tokenizer(eos), prompts, max_new_tokens=12, progress=False)
    assert cut[0] == free[0][: free[0].index(eos) + 1]
    for answer in cut:
        assert eos not in answer[:-1]


def test_cache_file_is_reused_and_validated(tmp_path, monkeypatch):
    model = tiny_model("llama", seed=1)
    prompts = _prompts()
    cache = tmp_path / "d.jsonl"
    pairs = [(p, [1, 2]) for p in prompts] + [([], [7, 8])]  # a prompt-less text pair keeps its text
    first = distill.distilled_pairs(model, _tokenizer(), pairs, 6, cache_file=str(cache), progress=False)
    assert len(cache.read_text().splitlines()) == len(prompts)
    assert first[-1] == ([], [7, 8]) and all(a != [1, 2] for _, a in first[:-1])

    def fail(*a, **k):
        raise AssertionError("answers were generated again")

    monkeypatch.setattr(distill, "greedy_answers", fail)
    assert distill.distilled_pairs(model, _tokenizer(), pairs, 6, cache_file=str(cache), progress=False) == first
    cache.write_text(json.dumps({"nope": 1}) + "\n")
    with pytest.raises(SpecstreamError, match="not a self-distillation record"):
        distill.distilled_pairs(model, _tokenizer(), pairs, 6, cache_file=str(cache), progress=False)

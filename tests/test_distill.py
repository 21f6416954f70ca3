"""Self-distillation targets: batched, left-padded greedy answers equal one-by-one greedy decoding,
stop at EOS, and a cache file spares regenerating them."""

import json
from types import SimpleNamespace

import pytest
import torch

from specstream_core.training import distill
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


def _no_generation(*a, **k):
    raise AssertionError("answers were generated again")


def test_cache_is_tied_to_the_model_and_settings(tmp_path, monkeypatch):
    prompts = _prompts()
    pairs = [(p, [1]) for p in prompts]
    cache = tmp_path / "d.jsonl"
    distill.distilled_pairs(tiny_model("llama", seed=1), _tokenizer(), pairs, 6, cache_file=str(cache), progress=False)
    meta = json.loads((tmp_path / "d.jsonl.meta.json").read_text())
    assert meta["max_new_tokens"] == 6 and meta["model"] and meta["tokenizer"]
    monkeypatch.setattr(distill, "greedy_answers", _no_generation)
    for model, tok, max_new, needle in ((tiny_model("llama", seed=2), _tokenizer(), 6, "model"),
                                        (tiny_model("llama", seed=1), _tokenizer(), 8, "max_new_tokens 6 -> 8"),
                                        (tiny_model("llama", seed=1), _tokenizer(eos=2), 6, "tokenizer")):
        with pytest.raises(SpecstreamError, match=f"holds answers of a different {needle}"):
            distill.distilled_pairs(model, tok, pairs, max_new, cache_file=str(cache), progress=False)
    # the same model loaded again (a fresh object, same weights) reuses the answers
    distill.distilled_pairs(tiny_model("llama", seed=1), _tokenizer(), pairs, 6, cache_file=str(cache), progress=False)


def test_a_half_written_last_line_is_ignored_then_cut(tmp_path, monkeypatch, capsys):
    model = tiny_model("llama", seed=1)
    prompts = _prompts()
    cache = tmp_path / "d.jsonl"
    first = distill.distilled_pairs(model, _tokenizer(), [(p, [1]) for p in prompts[:3]], 6, cache_file=str(cache),
                                    progress=False)
    with open(cache, "a") as f:  # killed in the middle of writing the next answer
        f.write('{"prompt_ids": [5, 6, 7], "answer_ids": [1')
    with monkeypatch.context() as m:
        m.setattr(distill, "greedy_answers", _no_generation)
        again = distill.distilled_pairs(model, _tokenizer(), [(p, [1]) for p in prompts[:3]], 6,
                                        cache_file=str(cache), progress=False)
    assert again == first and "half-written line" in capsys.readouterr().err
    everything = distill.distilled_pairs(model, _tokenizer(), [(p, [1]) for p in prompts], 6, cache_file=str(cache),
                                         progress=False)  # appending cuts the half line off first
    rows = [json.loads(line) for line in cache.read_text().splitlines()]  # every line whole again
    assert sorted(r["prompt_ids"] for r in rows) == sorted(prompts)
    assert everything[:3] == first


def test_a_cache_from_an_older_version_is_adopted(tmp_path, monkeypatch, capsys):
    """A cache without the sidecar (e.g. a long run still being written by an older checkout) is kept: it is
    adopted for the model and settings of its first use."""
    model = tiny_model("llama", seed=1)
    prompts = _prompts()
    answers = distill.greedy_answers(model, _tokenizer(), prompts, max_new_tokens=6, progress=False)
    cache = tmp_path / "old.jsonl"
    cache.write_text("".join(json.dumps({"prompt_ids": p, "answer_ids": a}) + "\n" for p, a in zip(prompts, answers)))
    monkeypatch.setattr(distill, "greedy_answers", _no_generation)
    got = distill.distilled_pairs(model, _tokenizer(), [(p, [1]) for p in prompts], 6, cache_file=str(cache),
                                  progress=False)
    assert [a for _, a in got] == answers
    assert "adopting it for model" in capsys.readouterr().err
    assert json.loads((tmp_path / "old.jsonl.meta.json").read_text())["max_new_tokens"] == 6
    with pytest.raises(SpecstreamError, match="different model"):  # from now on it is tied to that model
        distill.distilled_pairs(tiny_model("llama", seed=2), _tokenizer(), [(p, [1]) for p in prompts], 6,
                                cache_file=str(cache), progress=False)


def test_references_replace_distilled_answers_where_a_prompt_has_one(tmp_path):
    """`train --distill --references`: a prompt with a reference trains on it, one without on the base's answer;
    without --distill the flag is refused (nothing would stand in for the missing references)."""
    import argparse

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specstream_core.cli.args import add_training_data_arguments, load_examples, training_pairs
    from tiny_models import save_tiny_model_dir

    base = save_tiny_model_dir(tmp_path / "tiny")
    tokenizer, model = AutoTokenizer.from_pretrained(base), AutoModelForCausalLM.from_pretrained(base)
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": "abc", "reference": "cab"}, {"prompt": "bca", "reference": None},
            {"prompt": "cc", "reference": "a b"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = argparse.ArgumentParser()
    add_training_data_arguments(p)
    flags = ["--data", str(data), "--eval-data", str(data), "--raw", "--distill-max-new-tokens", "4",
             "--distill-cache", str(tmp_path / "c.jsonl")]
    given = load_examples(str(data), tokenizer, 0, "all", chat=False)
    distilled, _ = training_pairs(p.parse_args(flags + ["--distill"]), model, tokenizer)
    mixed, mixed_eval = training_pairs(p.parse_args(flags + ["--distill", "--references"]), model, tokenizer)
    assert given[0][1] == tokenizer("cab", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert mixed == mixed_eval == [given[0], distilled[1], given[2]]
    assert distilled[1][1] != [tokenizer.eos_token_id]  # the prompt without a reference keeps the base's answer
    with pytest.raises(SpecstreamError, match="--references needs --distill"):
        training_pairs(p.parse_args(flags + ["--references"]), model, tokenizer)

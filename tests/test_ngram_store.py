"""The n-gram store (`drafters/ngram_store.py`): what it stores, how it backs off, its file, the drafter
that copies from it where the context has nothing longer, and decoding that stays equal to
transformers' generate while its copies get accepted."""

import os

import numpy as np
import pytest

from specstream_core import DecodeConfig, Engine
from specstream_core.decoding.drafters import StreamLookupDrafter
from specstream_core.decoding.drafters.ngram_store import FILENAME, NgramStore
from specstream_core.decoding.trace import validate
from specstream_core.errors import SpecstreamError
from helpers import NEW, perturbed_streams
from tiny_models import hf_greedy, prompts, tiny_model


def test_the_most_frequent_successor_of_the_longest_stored_tail():
    store = NgramStore.build([[1, 2, 3, 4], [1, 2, 3, 5], [9, 2, 3, 5], [7, 3, 6], [3, 8]], vocab_size=16, max_n=4)
    assert store.bits == 4 and store.max_n == 3  # no 4-gram has a successor here
    assert store.next([1, 2, 3]) == (4, 3)  # 4 once, 5 once: ties go to the smallest id
    assert store.next([9, 2, 3]) == (5, 3)
    assert store.next([0, 2, 3]) == (5, 2)  # "0 2 3" unseen: backs off to "2 3" (4 once, 5 twice)
    assert store.next([0, 3]) == (5, 1)  # "3" -> 4, 5, 5, 6, 8: 5
    assert store.next([10]) is None and store.next([]) is None
    assert store.next([200, 2, 3]) == (5, 2)  # a token outside the stored vocabulary cannot match
    assert store.continuation([9, 2], 3) == ([3, 5], 2)  # "9 2" -> 3; "9 2 3" -> 5; "...3 5" has no successor
    assert store.continuation([10], 3) == ([], 0)


def test_keys_are_exact_for_large_vocabularies():
    vocab = 151_936  # Qwen2's: 18 bits a token, so 3 tokens a key
    store = NgramStore.build([[151_935, 0, 151_935, 7], [5, 0, 151_935, 8], [5, 0, 151_935, 8]], vocab, max_n=4)
    assert store.max_n == 3
    assert store.next([151_935, 0, 151_935]) == (7, 3) and store.next([5, 0, 151_935]) == (8, 3)
    with pytest.raises(SpecstreamError, match="vocabulary"):
        NgramStore.build([[1, vocab]], vocab)


def test_the_file_round_trips_and_a_bad_one_gets_one_clear_line(tmp_path):
    store = NgramStore.build([[1, 2, 3, 4, 1, 2, 5]], vocab_size=16)
    assert NgramStore.load(str(tmp_path)) is None  # no store: none
    store.save(str(tmp_path))
    again = NgramStore.load(str(tmp_path))
    assert again.bits == store.bits and len(again) == len(store)
    for seq in ([1, 2], [4, 1, 2], [3], [9]):
        assert again.next(seq) == store.next(seq)
    again.check_vocab(16)
    with pytest.raises(SpecstreamError, match="another vocabulary"):
        again.check_vocab(1000)  # 10 bits a token: keys would not match
    path = os.path.join(tmp_path, FILENAME)
    for payload in (b"not a zip", b""):
        with open(path, "wb") as f:
            f.write(payload)
        with pytest.raises(SpecstreamError, match="not a specstream n-gram store"):
            NgramStore.load(str(tmp_path))
    np.savez(path, format_version=np.array(1), bits=np.array(4), keys1=np.array([3, 1], dtype=np.uint64),
             next1=np.array([1, 2], dtype=np.int32), count1=np.array([1, 1], dtype=np.int32))
    with pytest.raises(SpecstreamError, match="not a specstream n-gram store"):  # unsorted keys
        NgramStore.load(str(tmp_path))
    np.savez(path, format_version=np.array(7), bits=np.array(4))
    with pytest.raises(SpecstreamError, match="format 7"):
        NgramStore.load(str(tmp_path))


def test_the_drafter_copies_from_the_store_only_where_the_context_has_no_longer_match():
    store = NgramStore.build([[5, 6, 7, 8, 9]], vocab_size=16)
    drafter = StreamLookupDrafter((1,), budget=8, lookup=3, store=store)
    drafter._top = ([[1]], [[0.5]])  # the stream's token after the root
    copied = lambda tree: [tree.tokens[i] for i in sorted(tree.copied)]  # noqa: E731
    assert copied(drafter.propose(6, [2, 5])) == [7, 8, 9]  # no context match: the store's "5 6" -> 7 8 9
    assert copied(drafter.propose(6, [6, 3, 2, 5])) == [7, 8, 9]  # a 1-token context match ("6" -> 3): the store
    assert copied(drafter.propose(6, [5, 6, 4, 5])) == [4, 5, 6]  # "5 6" seen in the context: the context wins
    plain = StreamLookupDrafter((1,), budget=8, lookup=3)
    plain._top = drafter._top
    assert copied(plain.propose(6, [2, 5])) == []


def test_ngrams_settings_are_checked_and_need_a_store():
    with pytest.raises(SpecstreamError, match="ngrams"):
        DecodeConfig(ngrams="yes")
    model = tiny_model("llama", seed=3)
    streams = perturbed_streams(model, seed=9)
    try:
        engine = Engine(model, None, streams)
        with pytest.raises(SpecstreamError, match="no n-gram store"):
            engine.generate([1, 2, 3], DecodeConfig(mode="ss", max_new_tokens=4, tree_topk=(1,), lookup=2, ngrams=True))
    finally:
        streams.detach()


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_store_copies_equal_transformers_generate_and_get_accepted(family):
    """A store built from the model's own greedy answers to other prompts: its copies are accepted, and
    output stays transformers' greedy output token for token."""
    model = tiny_model(family, seed=3)
    streams = perturbed_streams(model, seed=9)
    try:
        train, test = prompts(24, seed=11), prompts(12, seed=7)
        store = NgramStore.build([hf_greedy(model, ids, NEW) for ids in train], model.config.vocab_size)
        engine = Engine(model, None, streams, ngrams=store)
        without, with_store = 0, 0
        for ids in test:
            ref = hf_greedy(model, ids, NEW)
            base = dict(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(1,), lookup=3, node_budget=4)
            off = engine.generate(ids, DecodeConfig(**base, ngrams=False))
            on = engine.generate(ids, DecodeConfig(**base, ngrams=True, trace=True))
            assert on.token_ids == ref and off.token_ids == ref, f"{family}: prompt {ids}"
            assert validate(on.trace)["meta"]["ngrams"] is True  # the trace schema keeps it
            without += off.stats["forward_passes"]
            with_store += on.stats["forward_passes"]
        assert with_store < without, (with_store, without)
    finally:
        streams.detach()


def test_the_ngrams_command_builds_a_store_from_a_distillation_cache(tmp_path, capsys):
    import gzip
    import json

    from specstream_core import cli
    from tiny_models import save_tiny_model_dir

    base = save_tiny_model_dir(tmp_path / "base")
    out = tmp_path / "streams"
    out.mkdir()
    records = [{"prompt_ids": [1, 3, 4], "answer_ids": [5, 6, 7, 8, 5, 6, 9]},
               {"prompt_ids": [1, 4], "answer_ids": [5, 6, 7, 2]}]
    cache = tmp_path / "answers.jsonl.gz"
    with gzip.open(cache, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    assert cli.main(["ngrams", "--answers", str(cache), "--out", str(out), "--base", base, "--raw"]) == 0
    assert "2 answers (0 to eval prompts left out)" in capsys.readouterr().out
    store = NgramStore.load(str(out))
    assert store.next([5, 6]) == (7, 2) and store.next([8, 5, 6]) == (9, 3)
    # --references: a prompt file's reference answers stand in for the cached answers to the same prompts
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "b", "reference": "dddd"}) + "\n"
                       + json.dumps({"prompt": "c", "reference": None}) + "\n")
    with gzip.open(cache, "at") as f:
        f.write(json.dumps({"prompt_ids": [4], "answer_ids": [9, 9, 9, 2]}) + "\n")
    assert cli.main(["ngrams", "--answers", str(cache), "--out", str(out), "--base", base, "--raw",
                     "--references", str(prompts)]) == 0
    assert "3 answers" in capsys.readouterr().out
    store = NgramStore.load(str(out))
    assert store.next([6, 6]) == (6, 2) and store.next([9, 9]) is None and store.next([5, 6]) == (7, 2)
    for argv, message in ((["--answers", str(tmp_path / "none.jsonl"), "--out", str(out)], "no such file"),
                          (["--answers", str(cache), "--out", str(tmp_path / "nowhere")], "not a directory"),
                          (["--answers", str(cache), "--out", str(out), "--max-n", "0"], "--max-n"),
                          (["--answers", str(cache), "--out", str(out), "--references", "nope.jsonl"], "no such file")):
        assert cli.main(["ngrams", *argv, "--base", base]) == 2
        assert message in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n{}\n")
    assert cli.main(["ngrams", "--answers", str(broken), "--out", str(out), "--base", base]) == 2
    assert "not a self-distillation record" in capsys.readouterr().err


def test_the_store_never_sees_the_answers_to_eval_prompts(tmp_path, capsys):
    """A distillation cache holds answers to the chat corpus's eval prompts (for `train`'s evaluation); the store
    is built without them, so τ on the eval split measures prompts the store never saw (--keep-eval keeps them)."""
    import gzip
    import json

    from specstream_core import cli
    from specstream_core.cli.commands.ngrams import eval_prompt_keys
    from specstream_core.model.loading import load_tokenizer
    from tiny_models import save_tiny_model_dir

    base = save_tiny_model_dir(tmp_path / "base")
    out = tmp_path / "streams"
    out.mkdir()
    eval_key = sorted(eval_prompt_keys(load_tokenizer(base), False))[0]  # an eval prompt, encoded as `distill` does
    records = [{"prompt_ids": list(eval_key), "answer_ids": [40, 41, 42, 43, 2]},  # its answer: n-grams of its own
               {"prompt_ids": [1, 3, 4], "answer_ids": [50, 51, 52, 53, 2]}]
    cache = tmp_path / "answers.jsonl.gz"
    with gzip.open(cache, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    argv = ["ngrams", "--answers", str(cache), "--out", str(out), "--base", base, "--raw"]
    assert cli.main(argv) == 0
    assert "1 answers (1 to eval prompts left out)" in capsys.readouterr().out
    store = NgramStore.load(str(out))
    assert store.next([51, 52]) == (53, 2)
    assert all(store.next(gram) is None for gram in ([40, 41], [41, 42], [40], [42]))  # nothing of the eval answer
    assert cli.main(argv + ["--keep-eval"]) == 0
    assert "2 answers (0 to eval prompts left out)" in capsys.readouterr().out
    assert NgramStore.load(str(out)).next([40, 41]) == (42, 2)

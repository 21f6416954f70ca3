"""Greedy speculative streaming equals transformers' own generate, token for token."""

import pytest

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.decoding.drafters import PromptLookupDrafter
from helpers import NEW, N_PROMPTS, perturbed_streams
from tiny_models import hf_greedy, prompts, tiny_model

@pytest.fixture(scope="module", params=["llama", "qwen2", "mistral"])
def family_model(request):
    model = tiny_model(request.param, seed=3)
    refs = [hf_greedy(model, p, NEW) for p in prompts(N_PROMPTS, seed=7)]
    return request.param, model, refs


@pytest.mark.parametrize("streams_kind", ["fresh", "perturbed"])
def test_ss_equals_transformers_generate(family_model, streams_kind):
    family, model, refs = family_model
    streams = (StreamParams.fresh(model, gamma=4, n_stream_layers=2) if streams_kind == "fresh"
               else perturbed_streams(model))
    try:
        engine = Engine(model, None, streams)
        ss_cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(4, 3, 2, 1))
        ar_cfg = DecodeConfig(mode="ar", max_new_tokens=NEW, stop_on_eos=False)
        for ids, ref in zip(prompts(N_PROMPTS, seed=7), refs):
            ss = engine.generate(ids, ss_cfg)
            assert ss.token_ids == ref, f"{family}/{streams_kind}: prompt {ids}"
            assert engine.generate(ids, ar_cfg).token_ids == ref
            assert ss.stats["forward_passes"] <= NEW
    finally:
        streams.detach()


def test_pruning_and_budget_stay_lossless(family_model):
    family, model, refs = family_model
    streams = perturbed_streams(model, seed=5)
    try:
        engine = Engine(model, None, streams)
        for cfg in (DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, prune_threshold=0.05, tree_topk=(4, 4, 2)),
                    DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, node_budget=6, tree_topk=(3, 3, 3, 3))):
            for ids, ref in list(zip(prompts(N_PROMPTS, seed=7), refs))[:8]:
                assert engine.generate(ids, cfg).token_ids == ref
    finally:
        streams.detach()


def test_drafts_get_accepted_when_streams_are_right():
    """A stream drafter that knows the answer: τ must rise well above 1 and output stay exact."""
    model = tiny_model("llama", seed=3)
    ids = prompts(1, seed=11)[0]
    ref = hf_greedy(model, ids, NEW)
    engine = Engine(model, None, None)

    class Oracle(PromptLookupDrafter):  # proposes the true continuation: every draft must be accepted
        def propose(self, root, history):
            from specstream_core.decoding.tree import chain

            done = len(history) + 1 - len(ids)
            return chain(root, ref[done:done + 4])

    result = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False), drafter=Oracle())
    assert result.token_ids == ref
    assert result.stats["mean_accepted"] >= 4.0


def test_branching_tree_paths_are_accepted_and_cached_correctly():
    """True tokens sit second among their siblings, so accepted paths skip rows: the cache must
    gather them into place and the output must stay exact."""
    from specstream_core.decoding.drafters import Drafter
    from specstream_core.decoding.tree import from_stream_topk

    model = tiny_model("mistral", seed=3)
    ids = prompts(1, seed=12)[0]
    ref = hf_greedy(model, ids, NEW)
    engine = Engine(model, None, None)

    class Decoy(Drafter):
        def propose(self, root, history):
            done = len(history) + 1 - len(ids)
            truth = ref[done:done + 3]
            decoys = [[(t + 1) % 128 or 5, t, (t + 2) % 128 or 6] for t in truth]
            return from_stream_topk(root, decoys, [[0.4, 0.3, 0.3]] * len(decoys), budget=64)

    result = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False), drafter=Decoy())
    assert result.token_ids == ref
    assert result.stats["mean_accepted"] >= 3.0


def test_prompt_lookup_drafter_is_lossless():
    model = tiny_model("qwen2", seed=4)
    engine = Engine(model, None, None)
    for ids in prompts(6, seed=2):
        ids = ids + ids  # repeated text gives prompt lookup something to copy
        ref = hf_greedy(model, ids, NEW)
        out = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False),
                              drafter=PromptLookupDrafter())
        assert out.token_ids == ref


@pytest.mark.parametrize("precision", ["nf4", "int8"])
def test_bitsandbytes_ss_equals_ar(precision):
    """bitsandbytes' 4-bit and 8-bit Linears on a CPU: row-invariant (int8 without LLM.int8's outlier columns, which
    depend on the other rows of a call), so a tree pass gives each row what a sequential pass gives it."""
    pytest.importorskip("bitsandbytes")
    from specstream_core.model.loading import quantize_in_memory

    model = quantize_in_memory(tiny_model("llama", seed=3), precision)
    streams = perturbed_streams(model)
    engine = Engine(model, None, streams, precision=precision)
    for ids in prompts(20, seed=9):
        ar = engine.generate(ids, DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False))
        ss = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=16, stop_on_eos=False))
        assert ss.token_ids == ar.token_ids


def test_eos_and_max_new_tokens_match_generate():
    model = tiny_model("llama", seed=3)
    streams = perturbed_streams(model)
    engine = Engine(model, None, streams)
    for ids in prompts(10, seed=13):
        ref = hf_greedy(model, ids, 30)
        eos = ref[5]  # pretend the 6th generated token is EOS
        engine.eos_ids = {eos}
        out = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=30)).token_ids
        assert out == ref[: ref.index(eos) + 1]
        assert engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=7, stop_on_eos=False)).token_ids == ref[:7]


@pytest.mark.parametrize("mode", ["ar", "ss"])
def test_batches_equal_transformers_generate(family_model, mode):
    """The same step function over B > 1 rows (ragged prompts, pruning on): every row equals transformers."""
    family, model, refs = family_model
    streams = perturbed_streams(model, seed=5)
    try:
        engine = Engine(model, None, streams)
        cfg = DecodeConfig(mode=mode, max_new_tokens=NEW, stop_on_eos=False, tree_topk=(4, 3, 2, 1),
                           prune_threshold=0.05)
        ps = prompts(N_PROMPTS, seed=7)[:6]
        got = [r.token_ids for r in engine.generate_batch(ps, cfg)]
        assert got == refs[:6], family
    finally:
        streams.detach()

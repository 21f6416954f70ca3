"""Batched decoding: each row equals its own single-sequence decoding and transformers' greedy generate;
the shared-prompt cache equals the unshared path; bad batches fail with one clear error."""

from dataclasses import replace

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.model.cache import SharedPrefixCache
from specstream_core.errors import SpecstreamError
from helpers import perturbed_streams
from tiny_models import hf_greedy, prompts, tiny_model

NEW = 16
TREE = (4, 2, 1)  # branching trees of different sizes per row: padding and ragged acceptance


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def engine(request):
    model = tiny_model(request.param, seed=3)
    streams = perturbed_streams(model, seed=4)  # seed 4: some drafts accepted on both families
    yield Engine(model, None, streams)
    streams.detach()


def batch_prompts():
    out = prompts(5, seed=7, min_len=3, max_len=24)
    assert len({len(p) for p in out}) >= 4  # different lengths: ragged rows
    return out


@pytest.mark.parametrize("mode", ["ar", "ss"])
def test_batch_equals_alone_and_transformers(engine, mode):
    cfg = DecodeConfig(mode=mode, max_new_tokens=NEW, stop_on_eos=False, tree_topk=TREE)
    ps = batch_prompts()
    batch = engine.generate_batch(ps, cfg)
    for ids, got in zip(ps, batch):  # results come back in input order
        assert got.token_ids == engine.generate(ids, cfg).token_ids
        assert got.token_ids == hf_greedy(engine.model, ids, NEW)
        assert got.stats["new_tokens"] == NEW and got.stats["batch_size"] == len(ps)
    if mode == "ss":  # the perturbed streams' drafts are sometimes accepted, sometimes not
        passes = [got.stats["forward_passes"] for got in batch]
        assert min(passes) < NEW and max(passes) == NEW  # rows accept different numbers of tokens


def test_rows_accept_different_paths(engine):
    """Drafters that know the answer and put it second among decoys, on some steps only: every row
    accepts its own path length, skipping rows inside its tree, and still equals transformers."""
    from specstream_core.decoding.drafters import Drafter
    from specstream_core.decoding.tree import from_stream_topk

    ps = batch_prompts()
    refs = [hf_greedy(engine.model, ids, NEW) for ids in ps]

    class Decoy(Drafter):
        def __init__(self, row):
            self.row = row

        def propose(self, root, history):
            ids, ref = ps[self.row], refs[self.row]
            done = len(history) + 1 - len(ids)
            truth = ref[done:done + 1 + (done + self.row) % 3]  # 1-3 true tokens, a different rhythm per row
            if (done + self.row) % 4 == 0:
                truth = [(t + 7) % 128 or 9 for t in truth]  # nothing right: only the bonus token
            decoys = [[(t + 1) % 128 or 5, t, (t + 2) % 128 or 6] for t in truth]
            return from_stream_topk(root, decoys, [[0.4, 0.3, 0.3]] * len(decoys), budget=64)

    cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False)
    results = engine.generate_batch(ps, cfg, drafter_factory=Decoy)
    assert [r.token_ids for r in results] == refs
    for row, r in enumerate(results):
        assert r.token_ids == engine.generate(ps[row], cfg, drafter=Decoy(row)).token_ids
    assert len({r.stats["forward_passes"] for r in results}) > 1
    assert all(r.stats["mean_accepted"] > 1.5 for r in results)


@pytest.mark.parametrize("mode", ["ar", "ss"])
def test_rows_stop_on_their_own(engine, mode):
    """EOS, stop strings and max_new_tokens end each row separately; finished rows leave the forward."""
    ps = batch_prompts()
    ref0, ref2 = hf_greedy(engine.model, ps[0], 12), hf_greedy(engine.model, ps[2], 12)
    k = next(i for i in range(1, 12) if ref0[i] not in ref0[:i])  # row 0 meets EOS after k + 1 tokens
    saved = engine.eos_ids
    engine.eos_ids = {ref0[k]}
    try:
        cfg = DecodeConfig(mode=mode, max_new_tokens=12, tree_topk=TREE, stop_strings=(f"{ref2[2]} {ref2[3]}",))
        dec = engine.start_batch(ps, cfg)
        sizes = []
        while not dec.done:
            dec.step()
            sizes.append(dec.cache.batch if dec.live else 0)
        results = dec.results()
        for ids, got in zip(ps, results):
            assert got.token_ids == engine.generate(ids, cfg).token_ids
        assert results[0].token_ids == ref0[: k + 1]
        assert len(results[2].token_ids) <= 4
        assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 0
        assert any(0 < n < len(ps) for n in sizes)  # some rows left while others went on
    finally:
        engine.eos_ids = saved


def test_sampling_rows_use_their_own_seed(engine):
    cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=TREE, temperature=1.0, seed=11)
    ps = batch_prompts()[:4]
    for i, (ids, got) in enumerate(zip(ps, engine.generate_batch(ps, cfg))):
        assert got.token_ids == engine.generate(ids, replace(cfg, seed=11 + i)).token_ids


@pytest.mark.parametrize("mode", ["ar", "ss"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_shared_prompt_equals_unshared(engine, mode, temperature):
    ids = prompts(1, seed=9, min_len=20, max_len=24)[0]
    cfg = DecodeConfig(mode=mode, max_new_tokens=NEW, stop_on_eos=False, tree_topk=TREE, temperature=temperature, seed=5)
    shared = engine.start_batch([ids] * 4, cfg)  # identical prompts: shared automatically
    shared_out = shared.run()
    unshared = engine.start_batch([ids] * 4, cfg, share_prefix=False)
    unshared_out = unshared.run()
    assert isinstance(shared.cache, SharedPrefixCache) and not isinstance(unshared.cache, SharedPrefixCache)
    assert shared.cache.prefix.shape[2] == 1 and shared.cache.prefix_len == len(ids)  # the prompt's K/V once
    assert [r.token_ids for r in shared_out] == [r.token_ids for r in unshared_out]
    assert shared.cache.nbytes() < unshared.cache.nbytes()
    if temperature:  # four different samples, the same as engine.generate_n
        assert len({tuple(r.token_ids) for r in shared_out}) > 1
        assert [r.token_ids for r in engine.generate_n(ids, 4, cfg)] == [r.token_ids for r in shared_out]


def test_shared_prefix_attention_matches_sdpa():
    """The registered attention over [prefix | suffix] equals sdpa on the concatenated keys (GQA)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from specstream_core.model import compat

    g = torch.Generator().manual_seed(0)
    B, Hq, Hkv, q, P, S, D = 3, 4, 2, 5, 7, 6, 8
    query = torch.randn(B, Hq, q, D, generator=g)
    pk, pv = torch.randn(Hkv, P, D, generator=g), torch.randn(Hkv, P, D, generator=g)
    sk, sv = torch.randn(B, Hkv, S, D, generator=g), torch.randn(B, Hkv, S, D, generator=g)
    allowed = torch.rand(B, 1, q, P + S, generator=g) > 0.3
    allowed[..., 0] = True
    mask = torch.zeros(B, 1, q, P + S).masked_fill(~allowed, torch.finfo(torch.float32).min)

    class Module:
        layer_idx, num_key_value_groups, is_causal = 0, Hq // Hkv, True

    want, _ = sdpa_attention_forward(Module(), query, torch.cat([pk.expand(B, -1, -1, -1), sk], 2),
                                     torch.cat([pv.expand(B, -1, -1, -1), sv], 2), mask, scaling=D ** -0.5)
    compat._scope.shared_prefix, saved = (lambda layer: (pk, pv)), getattr(compat._scope, "shared_prefix", None)
    try:
        got, _ = compat._shared_prefix_forward(Module(), query, sk, sv, mask, scaling=D ** -0.5)
    finally:
        compat._scope.shared_prefix = saved
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("mode", ["ar", "ss"])
def test_logits_processors_apply_per_row(engine, mode):
    cfg = DecodeConfig(mode=mode, max_new_tokens=NEW, stop_on_eos=False, tree_topk=TREE, no_repeat_ngram_size=2,
                       repetition_penalty=1.3)
    ps = batch_prompts()[:4]
    for ids, got in zip(ps, engine.generate_batch(ps, cfg)):
        assert got.token_ids == hf_greedy(engine.model, ids, NEW, no_repeat_ngram_size=2, repetition_penalty=1.3)


def test_step_reports_what_each_row_emitted(engine):
    ps = batch_prompts()[:4]
    dec = engine.start_batch(ps, DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=TREE))
    streamed = {i: [] for i in range(len(ps))}
    while not dec.done:
        for i, tokens in dec.step().items():
            streamed[i] += tokens
    assert [streamed[i] for i in range(len(ps))] == [r.token_ids for r in dec.results()]


def test_pruning_works_in_batches(engine):
    """Rows prune their own trees at layer N−Ns in one pass (survivor counts differ per row): output
    equals transformers and single decoding, and pruning saves rows."""
    from specstream_core.decoding.trace import validate

    ps = batch_prompts()[:4]
    cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(4, 4, 2), prune_threshold=0.05,
                       trace=True)
    pruned = engine.generate_batch(ps, cfg)
    full = engine.generate_batch(ps, replace(cfg, prune_threshold=0.0))
    for ids, got in zip(ps, pruned):
        assert got.token_ids == hf_greedy(engine.model, ids, NEW)
        assert got.token_ids == engine.generate(ids, cfg).token_ids
        validate(got.trace)
    counts = [sum(n["pruned"] for step in r.trace["steps"] for n in step["nodes"]) for r in pruned]
    assert all(counts), counts  # every row pruned some nodes
    for step in (s for r in pruned for s in r.trace["steps"][1:]):
        kept = [n for n in step["nodes"] if not n["pruned"]]
        assert all(n["parent"] == -1 or not step["nodes"][n["parent"]]["pruned"] for n in kept)  # a tree
        assert all(not step["nodes"][i]["pruned"] for i in step["accepted"])
    assert sum(r.stats["rows_processed"] for r in pruned) < sum(r.stats["rows_processed"] for r in full)


def test_traces_in_batches(engine):
    """Every row of a batch gets its own trace (the same format as single decoding), attention included;
    a B = 1 batch's trace equals single decoding's."""
    from specstream_core.decoding.trace import validate

    ps = batch_prompts()[:3]
    cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=TREE, trace=True,
                       attention_layers=(3,), attention_context=256)
    results = engine.generate_batch(ps, cfg)
    gamma = min(len(TREE), engine.streams.cfg.gamma)
    for ids, got in zip(ps, results):
        trace = validate(got.trace)
        assert trace["prompt"]["token_ids"] == ids
        assert [t for step in trace["steps"] for t in step["emitted"]] == got.token_ids
        assert trace["output"]["token_ids"] == got.token_ids
        assert trace["stats"]["new_tokens"] == NEW
        for step in trace["steps"]:
            heads = step["attention"]["layers"]["3"]
            assert len(heads[0]) == gamma and len(heads[0][0]) == step["attention"]["context_len"] + gamma
            assert all(abs(sum(row) - 1.0) < 1e-3 for row in heads[0])  # each stream row's weights sum to 1
        single = engine.generate(ids, cfg).trace
        assert [s["emitted"] for s in single["steps"]] == [s["emitted"] for s in trace["steps"]]
    one = engine.generate_batch(ps[:1], cfg)[0].trace
    alone = engine.generate(ps[0], cfg).trace
    strip = lambda t: [{k: v for k, v in s.items() if k != "time_ms"} for s in t["steps"]]  # noqa: E731
    assert strip(one) == strip(alone)
    with pytest.raises(SpecstreamError, match="shared prefix"):
        engine.generate_batch([ps[0]] * 2, cfg, share_prefix=True)
    assert all(r.trace is not None for r in engine.generate_batch([ps[0]] * 2, cfg))  # automatic: not shared


def test_bad_batches_fail_clearly(engine):
    cfg = DecodeConfig(mode="ss", max_new_tokens=NEW)
    cases = [
        ([], "non-empty list"),
        ("a prompt", "non-empty list"),
        ([[5, 6, 7], []], "prompt 1: the prompt is empty"),
        ([[5, 6], [7] * 300], "prompt 1: prompt of 300 tokens"),
        ([[5, 6], "text"], "prompt 1: this engine has no tokenizer"),
        ([[5, 6], [5.0]], "prompt 1: a prompt must be a string or a list of token ids"),
    ]
    for prompts_, message in cases:
        with pytest.raises(SpecstreamError, match=message):
            engine.generate_batch(prompts_, cfg)
    with pytest.raises(SpecstreamError, match="share_prefix needs every prompt to be the same"):
        engine.generate_batch([[5, 6], [5, 7]], cfg, share_prefix=True)
    with pytest.raises(SpecstreamError, match="n must be a positive integer"):
        engine.generate_n([5, 6], 0, cfg)


def test_batch_benchmark_runs_and_counts(engine):
    from specstream_core.bench.batch_bench import run_throughput, shared_prefix_benchmark, throughput_markdown

    if engine.model.config.model_type != "llama":
        pytest.skip("the benchmark plumbing is family-independent: one family keeps the file fast")
    ps = batch_prompts()[:4]
    rows = run_throughput(engine, ps, [1, 2], 6, [(2, 1), (1,)], repeats=1, progress=False)
    names = {(r.method, r.batch_size) for r in rows}
    assert names == {("ar-seq", 1)} | {(m, b) for b in (1, 2) for m in ("ar-batch", "ss-batch 2,1", "ss-batch 1", "hf-batch")}
    for r in rows:
        assert r.samples == 4 and r.samples_per_s > 0 and r.wall_s > 0
        if r.method != "hf-batch":
            assert r.identical == 4  # our batched decoding equals our sequential loop
    assert "| ss-batch 2,1 | 2 |" in throughput_markdown(rows)
    shared = shared_prefix_benchmark(engine, ps[0], 3, 6, DecodeConfig(tree_topk=TREE), repeats=1)
    shared = {r.method.split(" (")[0]: r for r in shared}
    assert shared["ar shared prefix"].kv_bytes < shared["ar unshared"].kv_bytes
    assert all(r.new_tokens == 18 for r in shared.values())

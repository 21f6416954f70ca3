"""Stream rows on 4-bit copies of the multi-stream layers (kernels/draft_weights.py): the main rows, so the output, stay
bit for bit what the layers' own weights give; the stream rows (drafts) do change; the kernel's layer steps compute
what the modules compute; and a setting that cannot run says so."""

from __future__ import annotations

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.backends.base import probe
from specstream_core.errors import SpecstreamError
from specstream_core.model import compat, msa
from specstream_core.kernels.steps import direct_layers
from specstream_core.kernels import draft_weights
from specstream_core.kernels.linears import int4_a8, rowinv
from tiny_models import hf_greedy, prompts, tiny_model


def _probe(engine):
    return probe(engine.backend, msa.forward)  # what the backend's bind compares


needs_a8 = pytest.mark.skipif(not (rowinv.available() and int4_a8.available()),
                              reason="the row-invariant kernel with AVX512-VNNI is not available here")


def _engine(weights: str = "auto", precision: str = "fp32", kernel: bool = True) -> Engine:
    model = tiny_model("llama", seed=3, hidden=128, num_attention_heads=4, num_key_value_heads=2)
    if kernel:
        rowinv.install(model, "rowinv", weight_dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=1, draft_vocab=list(range(64)))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in streams.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return Engine(model, None, streams, precision=precision, stream_weights=weights)


def _bound(engine) -> int:
    with torch.inference_mode():
        return sum(direct_layers.step_of(layer) is not None for layer in compat.decoder_layers(engine.model))


@needs_a8
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_copies_change_the_stream_rows_only(precision):
    """_probe's step has 9 stream rows (3 carriers x 3 streams, at least MIN_ROWS): with the copies its main rows are
    bit for bit the same and its stream rows differ; the kernel's whole-layer steps stay bound (bind compares them
    with the modules bit for bit), on every layer."""
    engine = _engine("auto", precision)
    tiles = draft_weights.on_tiles(engine.streams)  # bf16 on AMX tiles: 25 rows cost about one, so auto keeps "same"
    assert engine.stream_weights == ("same" if tiles else "int4-a8")
    if tiles:
        engine = _engine("int4-a8", precision)
    assert _bound(engine) == engine.model.config.num_hidden_layers
    steps = [layer.__dict__[compat.DIRECT_STEP] for layer in compat.decoder_layers(engine.model)]
    assert [bool(s.stack_args[0].contents.draft) for s in steps] == [False, False, True, True]
    with torch.inference_mode():
        cheap = _probe(engine)
        assert engine.set_stream_weights("same") == "same"
        assert _bound(engine) == engine.model.config.num_hidden_layers
        own = _probe(engine)
    assert all(torch.equal(a, b) for a, b in zip(cheap[:2], own[:2]))  # the prompt's and the step's main rows
    assert not torch.equal(cheap[2], own[2])
    assert (cheap[2] - own[2]).abs().max() < 0.5 * own[2].abs().max()  # a copy, not other weights


@needs_a8
def test_few_stream_rows_keep_the_layers_own_weights():
    """Under MIN_ROWS stream rows (one carrier's 3 streams) the copies stay out: the same stream rows either way."""
    engine = _engine("auto")
    model, streams = engine.model, engine.streams
    from specstream_core.model import masks, msa
    from specstream_core.model.cache import KVCache

    def step():
        cache = KVCache.for_model(model, batch=1, capacity=32)
        with torch.inference_mode():
            msa.forward(model, torch.arange(6)[None], torch.arange(6)[None], masks.causal_visibility(6, 1, "cpu"),
                        cache=cache)
            cache.advance(6)
            out = msa.forward(model, torch.tensor([[7]]), torch.tensor([[6]]), masks.causal_visibility(1, 1, "cpu"),
                              streams=streams, carriers=torch.zeros(1, 1, dtype=torch.long), cache=cache)
        return out.main, out.streams

    cheap = step()
    engine.set_stream_weights("same")
    own = step()
    assert 3 < draft_weights.MIN_ROWS
    assert torch.equal(cheap[0], own[0]) and torch.equal(cheap[1], own[1])


@needs_a8
def test_speculative_output_stays_transformers_greedy():
    """Deep chains and a tree (many stream rows, the copies drafting), one sequence and a batch: every output equals
    transformers' greedy generate on the same model."""
    engine = _engine("int4-a8")
    items = prompts(3, seed=4, max_len=20)
    expected = [hf_greedy(engine.model, ids, 12) for ids in items]
    for topk in ((1, 1, 1), (2, 2, 1)):
        cfg = DecodeConfig(mode="ss", max_new_tokens=12, stop_on_eos=False, tree_topk=topk, lookup=0)
        assert [engine.generate(ids, cfg).token_ids for ids in items] == expected
        assert [r.token_ids for r in engine.generate_batch(items, cfg)] == expected


def test_a_setting_that_cannot_run_says_so():
    engine = _engine("auto", kernel=False)  # torch's Linears: no copies
    assert engine.stream_weights == "same"
    with pytest.raises(SpecstreamError, match="unknown stream-row weights"):
        engine.set_stream_weights("int3")
    with pytest.raises(SpecstreamError, match="4-bit stream-row weights need"):
        engine.set_stream_weights("int4-a8")
    assert engine.stream_weights == "same"
    assert all(w.draft is None for w in engine.streams.adapters.values())

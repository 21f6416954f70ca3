"""The row-invariant kernel's attention (rowinv.attend, used by the row-exact attention of decoding steps):
it computes softmax(q k^T) v over exactly the keys each row may see, and a row's result does not depend on
the other rows of the call, the number of threads or how its keys are named."""

import pytest
import torch
from torch.nn import functional as F

from specstream_core import DecodeConfig
from specstream_core.model import compat
from specstream_core.kernels.linears import rowinv
from specstream_core.kernels import builder, library
from specstream_core.kernels.steps import rowinv_steps
from helpers import mismatches, near_tie_engine

needs_kernel = pytest.mark.skipif(not rowinv.available(), reason=f"kernel unavailable: {rowinv.unavailable_reason()}")
NO_LIST = torch.zeros(1, dtype=torch.int64)


def _case(hq, hkv, d, seed=0):
    """Query rows laid out as transformers lays them out ([Hq, n, D] as a transposed view), a cache with room
    to spare, and rows that see a prefix, a list of keys (a tree's ancestors), all keys, or none."""
    g = torch.Generator().manual_seed(seed)
    n, cap = 6, 80
    q = torch.randn(n, hq, d, generator=g).transpose(0, 1)
    k, v = torch.randn(hkv, cap, d, generator=g), torch.randn(hkv, cap, d, generator=g)
    seen = [37, torch.tensor([0, 1, 2, 5, 30, 41]), 64, torch.tensor([3]), 70, torch.arange(37)]
    return q, k, v, seen


def _spec(seen):
    spec, lists, at = [], [], 0
    for s in seen:
        if isinstance(s, int):
            spec += [s, -1]
        else:
            spec += [s.numel(), at]
            lists.append(s)
            at += s.numel()
    return torch.tensor(spec), (torch.cat(lists) if lists else NO_LIST)


def _check(hq, hkv, d):
    q, k, v, seen = _case(hq, hkv, d)
    spec, keys = _spec(seen)
    out = rowinv.attend(q, k, v, spec, keys, d ** -0.5)
    assert out.shape == (len(seen), hq, d)
    for i, s in enumerate(seen):
        idx = torch.arange(s) if isinstance(s, int) else s
        kk = k[:, idx].repeat_interleave(hq // hkv, 0)
        vv = v[:, idx].repeat_interleave(hq // hkv, 0)
        ref = F.scaled_dot_product_attention(q[:, i:i + 1], kk, vv)[:, 0]
        assert torch.allclose(out[i], ref, atol=2e-6, rtol=1e-5), (i, (out[i] - ref).abs().max())
        alone_spec, alone_keys = _spec([s])
        assert torch.equal(rowinv.attend(q[:, i:i + 1], k, v, alone_spec, alone_keys, d ** -0.5)[0], out[i])
    # a prefix named as a list of keys is the same prefix, bit for bit
    spec, keys = _spec([torch.arange(37)])
    assert torch.equal(rowinv.attend(q[:, :1], k, v, spec, keys, d ** -0.5)[0], out[0])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.equal(rowinv.attend(q, k, v, *_spec(seen), d ** -0.5), out)
    finally:
        torch.set_num_threads(threads)


@needs_kernel
# GQA heads grouped over each key (3 and 4 heads of 64, 2 of 64 and of 128), one head at a time (1 head, or shapes
# no group is compiled for), head-size tails
@pytest.mark.parametrize("hq,hkv,d", [(9, 3, 64), (8, 2, 64), (4, 2, 64), (8, 4, 128), (4, 4, 40), (6, 2, 136),
                                      (2, 1, 7)])
def test_attention_is_sdpa_and_each_row_alone(hq, hkv, d):
    _check(hq, hkv, d)


def test_the_avx2_builds_attention_too(monkeypatch, tmp_path):
    monkeypatch.setattr(library, "_why", None)
    monkeypatch.setattr(library, "_lib", None)
    monkeypatch.setattr(builder, "cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setenv("SPECSTREAM_CACHE", str(tmp_path))
    if not rowinv.available():
        pytest.skip(rowinv.unavailable_reason())
    _check(9, 3, 64)
    _check(6, 2, 136)


@needs_kernel
def test_a_row_that_sees_no_key_gets_zeros_and_other_inputs_fall_back():
    q, k, v, _ = _case(4, 2, 16)
    out = rowinv.attend(q[:, :1], k, v, torch.tensor([0, -1]), NO_LIST, 0.25)
    assert torch.equal(out, torch.zeros(1, 4, 16))
    assert rowinv.attend(q.double(), k.double(), v.double(), torch.tensor([3, -1]), NO_LIST, 0.25) is None
    assert rowinv.attend(q[:, :1], k, v, torch.tensor([3, -1]), NO_LIST, 0.25) is not None


@needs_kernel
def test_decoding_steps_attend_through_the_kernel_and_the_check_can_fail(monkeypatch):
    """Speculative and plain decoding steps run their attention on the kernel (the engine-level exactness
    tests in test_rowinv.py go through it); a kernel whose row result depended on the other rows of the
    call (rounded to bf16 beside other rows) would make speculative output differ on near-ties. (With the
    layers' one-call fronts off: they call the same attention from C, checked against this path bit for bit
    in test_direct_layers.py.)"""
    engine = near_tie_engine("fp32")
    for layer in compat.decoder_layers(engine.model):
        step = layer.__dict__.get(compat.DIRECT_STEP)
        if step is not None:
            step.front = None
    attend, calls = rowinv.attend, []
    monkeypatch.setattr(rowinv, "attend", lambda *a: calls.append(a[0].shape[1]) or attend(*a))
    engine.generate([5, 6, 7, 8], DecodeConfig(mode="ss", max_new_tokens=8, stop_on_eos=False, tree_topk=(1, 1)))
    assert calls and max(calls) > 1 and min(calls) >= 1
    monkeypatch.setattr(rowinv, "attend", lambda q, *a: (lambda y: y if q.shape[1] == 1 else y.bfloat16().float())(
        attend(q, *a)))
    assert mismatches(engine, (1, 1, 1)) + mismatches(engine, (2, 2, 1)) > 0


@needs_kernel
def test_the_keys_a_mask_lets_each_row_see():
    """`rowinv_steps.mask_keys` lists what torch's `(mask == 0).nonzero()` lists, row by row (the kernel's attention keys of
    a step, `compat._kernel_keys`): prefixes, trees, a row that sees nothing, a negative zero, a view's row stride."""
    g = torch.Generator().manual_seed(3)
    for q, prefix in ((1, 257), (5, 40), (25, 300), (4, 0)):
        wide = torch.zeros(q, prefix + q + 7)
        local = torch.rand(q, q, generator=g) > 0.5
        wide[:, prefix:prefix + q].masked_fill_(~local, torch.finfo(torch.float32).min)
        wide[0, -1] = -0.0
        wide[-1, :prefix + q] = torch.finfo(torch.float32).min  # sees nothing
        mask = wide[:, :prefix + q]  # a view: rows further apart than their keys
        vis = mask == 0
        counts = vis.sum(-1)
        spec, keys = rowinv_steps.mask_keys(mask)
        assert torch.equal(spec, torch.stack([counts, counts.cumsum(0) - counts], -1).reshape(-1))
        assert torch.equal(keys, vis.nonzero()[:, 1])
    assert rowinv_steps.mask_keys(torch.zeros(2, 3, dtype=torch.float64)) is None  # not fp32: torch's way


@needs_kernel
def test_stream_rows_attend_on_tiles_where_the_linears_are():
    """Stream rows only draft: where the Linears are on AMX tiles and a step has 8 or more stream rows, theirs attend on
    tiles (`rowinv_steps.TiledStreams`, rowinv.c's `attend_tiles`: bf16 operands, fp32 sums), close to the vector
    code's fp32; main rows stay `rowinv.attend`'s bit for bit; a row that sees no key gets zeros; fewer stream rows
    stay on the vector code."""
    from specstream_core.kernels import amx_tiles

    if not amx_tiles.amx(rowinv.library()):
        pytest.skip("no AMX tiles on this CPU")
    g = torch.Generator().manual_seed(4)
    hq, hkv, d, cap, prefix = 4, 2, 64, 80, 37
    main = [torch.arange(prefix + 1 + i) for i in range(3)]  # a chain: each node sees the prefix and the nodes before
    streams = [torch.cat([torch.arange(prefix + 1 + i % 3), prefix + 3 + torch.arange(1 + i // 3)]) for i in range(9)]
    streams[4] = torch.zeros(0, dtype=torch.int64)  # sees nothing
    spec, keys = _spec(main + streams)
    q = torch.randn(len(main) + len(streams), hq, d, generator=g).transpose(0, 1)
    k, v = torch.randn(hkv, cap, d, generator=g), torch.randn(hkv, cap, d, generator=g)
    state = type("Rows", (), {"n_main": len(main)})()
    exact = rowinv.attend(q, k, v, spec, keys, 0.125)
    tiled = rowinv_steps.TiledStreams(state)(q, k, v, spec, keys, 0.125)
    assert torch.equal(tiled[:3], exact[:3])
    assert not torch.equal(tiled[3:], exact[3:])  # another arithmetic
    torch.testing.assert_close(tiled[3:], exact[3:], rtol=0.05, atol=0.02)
    assert torch.equal(tiled[3 + 4], torch.zeros(hq, d))
    state.n_main = len(main) + len(streams) - rowinv_steps.tile_stream_rows() + 1  # 7 stream rows: the vector code
    assert torch.equal(rowinv_steps.TiledStreams(state)(q, k, v, spec, keys, 0.125), exact)

"""int4-a8: 4-bit Linears against 8-bit activations on the kernel's AVX512-VNNI build (kernels/linears/int4_a8.py):
the integer arithmetic it claims, row invariance, and speculative output equal to plain int4-a8 output."""

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.errors import SpecstreamError
from specstream_core.kernels.linears import int4, int4_a8
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.steps import rowinv_steps
from specstream_core.model.loading import LoadConfig
from helpers import mismatches, perturbed_streams
from tiny_models import prompts, tiny_model

pytestmark = pytest.mark.skipif(not int4_a8.available(), reason="int4-a8 needs the kernel's AVX512-VNNI build")


def _layer(n=98, k=128, seed=0):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed))
    return int4.Int4Linear(*int4.quantize_groups(w), a8=True)


def _reference(x, q, scale, low):
    """What the kernel claims to compute, in float64: each row rounded to 8 bits per group of 32
    (round(x * 127 / max |x|), ties to even), the integer products summed exactly, then scaled."""
    m, k = x.shape
    g = x.reshape(m, k // 32, 32)
    amax = g.abs().amax(-1, keepdim=True)
    xq = torch.round(g * torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax)))  # fp32, as the kernel
    dx = (amax / 127.0).double()
    qq = q.double().reshape(q.shape[0], k // 32, 32)
    s = torch.einsum("mgj,ngj->mng", xq.double(), qq)  # exact integers
    return (s * scale.double()[None] * dx.transpose(1, 2) + low.double()[None] * (dx * xq.double().sum(-1, keepdim=True)).transpose(1, 2)).sum(-1)


def test_pack_keeps_the_groups():
    q, scale, low = int4.quantize_groups(torch.randn(98, 128, generator=torch.Generator().manual_seed(3)))
    nibbles, dm = int4_a8.pack(q, scale, low)
    assert nibbles.shape == (7, 4, 4, 64) and dm.shape == (7, 4, 2, 16)  # 98 rows padded to 112
    back = int4_a8.unpack(nibbles, dm, 98)  # scales and low ends in fp16, as Q4_1 keeps them
    assert all(torch.equal(a, b) for a, b in zip(back, (q, scale.half().float(), low.half().float())))


def test_int4_a8_computes_8_bit_rows_against_the_groups_and_is_row_invariant():
    layer = _layer()
    x = torch.randn(13, 128, generator=torch.Generator().manual_seed(1))
    y = layer(x)
    assert y.dtype == torch.float32 and y.shape == (13, 98)
    ref = _reference(x, *layer.groups())
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)
    fp32 = x @ layer.dequantized().T
    err = (y - fp32).abs().max()
    assert 1e-4 < err < 0.02 * fp32.abs().max()  # 8-bit activations: close to fp32, and not fp32
    for m in range(1, 13):  # blocks of 8 rows: a row's result does not depend on the rows beside it
        assert torch.equal(layer(x[:m]), y[:m])
        assert torch.equal(layer(x[m:m + 1]), y[m:m + 1])
        assert torch.equal(layer(x[m:]), y[m:])
    assert torch.equal(layer.rows(torch.tensor([5, 0, 97]))(x), y[:, [5, 0, 97]])


def test_a_prompt_sized_call_sums_each_row_as_a_one_row_call():
    """Calls of 32 rows or more take two tiles of outputs a block (rowinv.c `a8_pairs`), the last tile of an odd
    count alone: every row's result is still its one-row call's, bit for bit."""
    for n in (98, 160):  # 7 tiles of 16 (98 padded to 112) and 10
        layer = _layer(n=n, seed=4)
        x = torch.randn(45, 128, generator=torch.Generator().manual_seed(5))
        y = layer(x)
        assert torch.equal(y, torch.cat([layer(x[i:i + 1]) for i in range(45)]))
        assert torch.equal(layer(x[:32]), y[:32]) and torch.equal(layer(x[7:]), y[7:])


def test_the_8_bit_head_against_8_bit_rows():
    """Signed weights: the activations go in unsigned (+128) and a per-group constant takes the excess off."""
    w = torch.randn(50, 96, generator=torch.Generator().manual_seed(4))
    q, scale = int8_head.quantize_groups(w)
    q[0, :32] = -128  # GGUF's Q8_0 may hold -128
    head = int8_head.Int8Linear(q, scale, a8=True)
    scale = scale.half().float()  # Q8_0's fp16 scales
    assert all(torch.equal(a, b) for a, b in zip(head.groups(), (q, scale)))
    x = torch.randn(11, 96, generator=torch.Generator().manual_seed(5))
    y = head(x)
    m, k = x.shape
    g = x.reshape(m, k // 32, 32)
    amax = g.abs().amax(-1, keepdim=True)
    xq = torch.round(g * (127.0 / amax)).double()
    s = torch.einsum("mgj,ngj->mng", xq, q.double().reshape(50, k // 32, 32))
    ref = (s * scale.double()[None] * (amax / 127.0).double().transpose(1, 2)).sum(-1)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-4)
    for i in range(1, 11):
        assert torch.equal(head(x[:i]), y[:i]) and torch.equal(head(x[i:]), y[i:])
    assert torch.equal(head.rows(torch.tensor([3, 49]))(x), y[:, [3, 49]])


def _a8(model):
    report = int4.quantize_model(model, kernel=True, a8=True)
    assert report["a8"] and report["fused"] > 0
    return model


def test_an_int4_a8_model_decodes_on_its_8_bit_layers():
    """Every decoder Linear and the head take 8-bit rows; plain decoding runs (and is exact: below)."""
    model = _a8(tiny_model("llama", seed=3))
    assert model.model.layers[0].mlp.down_proj.a8 and model.lm_head.a8
    assert model.model.layers[0].self_attn.q_proj.fused[0].linear.a8
    engine = Engine(model, None, None, precision="int4-a8")
    assert engine.exact and engine.row_exact
    out = engine.generate(prompts(1, seed=4)[0], DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False))
    assert len(out.token_ids) == 16


@pytest.fixture(scope="module")
def near_tie_a8():
    """As test_int4's near-tie model: head_dim 64, unscaled random logits, near-ties everywhere."""
    model = _a8(tiny_model("llama", seed=5, logit_scale=1.0, hidden=256, layers=4, num_attention_heads=4,
                           num_key_value_heads=2))
    return Engine(model, None, perturbed_streams(model, gamma=3, draft_vocab=list(range(0, 128, 2))), precision="int4-a8")


def test_int4_a8_speculative_output_is_plain_int4_a8_output(near_tie_a8):
    for topk in ((1, 1, 1), (2, 2, 1)):
        assert mismatches(near_tie_a8, topk) == 0
    assert mismatches(near_tie_a8, (2, 2, 1), batch=True) == 0


def test_batched_decoding_is_each_prompt_alone(near_tie_a8):
    """A batch's prompts of different lengths are prefilled each as its own causal call (compat's
    _batch_prompts): one masked call over the padded batch summed differently, a last-bit difference that
    8-bit rounding turned into different tokens on 2 of these 8 prompts."""
    ar = DecodeConfig(mode="ar", max_new_tokens=32, stop_on_eos=False)
    items = prompts(8, seed=6, max_len=60)
    assert len({len(ids) for ids in items}) > 1
    alone = [near_tie_a8.generate(ids, ar).token_ids for ids in items]
    assert [r.token_ids for r in near_tie_a8.generate_batch(items, ar)] == alone


def test_the_check_can_fail(near_tie_a8, monkeypatch):
    """Round a wide pass's down projections to bf16 (a kernel whose result depends on the rows beside it) and
    near-ties flip."""
    for step in ("layer_back", "layer_step", "layer_stack", "stream_stack"):  # down projections through the patched call
        monkeypatch.setattr(rowinv_steps, step, lambda *a: None)
    linear = int4_a8.linear
    monkeypatch.setattr(int4_a8, "linear", lambda x, *a: (
        lambda y: y if x.reshape(-1, x.shape[-1]).shape[0] == 1 else y.bfloat16().float())(linear(x, *a)))
    assert mismatches(near_tie_a8, (1, 1, 1)) + mismatches(near_tie_a8, (2, 2, 1)) > 0


def test_int4_a8_is_refused_where_it_cannot_run(monkeypatch):
    with pytest.raises(SpecstreamError, match="CPU"):
        LoadConfig("x", precision="int4-a8", device="cuda")
    with pytest.raises(SpecstreamError, match="torch"):
        LoadConfig("x", precision="int4-a8", kernel="torch")
    monkeypatch.setattr(int4_a8, "available", lambda: False)
    with pytest.raises(SpecstreamError, match="VNNI"):
        LoadConfig("x", precision="int4-a8")
    with pytest.raises(SpecstreamError, match="VNNI"):
        int4.Int4Linear(*int4.quantize_groups(torch.randn(16, 32)), a8=True)

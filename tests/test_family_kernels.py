"""The kernel's whole-layer steps on the families beyond Llama's form (kernels/steps/layer_forms.py): Qwen3 (q/k
norms per head before RoPE, the kernel's `qk_norm` step), Phi-3 (fused qkv_proj and gate_up_proj read as they are,
partial RoPE as Phi-4-mini has it) and OLMo 2 (norms after attention and MLP, q/k norms over the whole projection).
Each runs every layer as one kernel call, and decodes exactly: speculative streaming equals transformers' greedy
`generate` in fp32 and plain decoding at every 4-bit precision; the run-time probe that keeps the steps sees a step
that leaves the q/k norms out."""

from __future__ import annotations

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.kernels import library
from specstream_core.kernels.linears import int4, rowinv
from specstream_core.kernels.steps import direct_layers, layer_forms, rowinv_steps
from specstream_core.model import compat
from tiny_models import hf_greedy, prompts, tiny_model

needs_kernel = pytest.mark.skipif(not rowinv.available(), reason=f"kernel unavailable: {rowinv.unavailable_reason()}")
needs_whole = pytest.mark.skipif(rowinv.available() and rowinv_steps.silu_exp() is None,
                                 reason="torch runs another vector width than the kernel's build: no whole-layer calls")
FAMILIES = {"qwen3": {}, "phi3": {"partial_rotary_factor": 0.75}, "olmo2": {}}  # Phi-4-mini rotates 3/4 of a head
PRECISIONS = ("fp32", "int4") + (("int4-a8",) if rowinv.available() and library.library().a8 else ())


def _model(family: str, **kw):
    return tiny_model(family, seed=5, hidden=128, num_attention_heads=4, num_key_value_heads=2, **FAMILIES[family], **kw)


def _engine(model, precision: str) -> Engine:
    if precision == "fp32":
        rowinv.install(model, "rowinv")
    else:
        int4.quantize_model(model, kernel=True, a8=precision == "int4-a8")
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=1)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # drafts that are sometimes right: speculative passes accept and reject
        for p in streams.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return Engine(model, None, streams, precision=precision)


def _decode(engine, items, mode: str, batch: bool = False) -> list[list[int]]:
    cfg = DecodeConfig(mode=mode, max_new_tokens=10, stop_on_eos=False, tree_topk=(2, 2, 1) if mode == "ss" else (1,))
    if batch:
        return [r.token_ids for r in engine.generate_batch(items, cfg)]
    return [engine.generate(ids, cfg).token_ids for ids in items]


@needs_kernel
@needs_whole
@pytest.mark.parametrize("family", list(FAMILIES))
def test_ss_on_the_kernel_equals_transformers_greedy_in_fp32(family):
    model = _model(family)
    items = prompts(3, seed=6, max_len=30)
    reference = [hf_greedy(model, ids, 10) for ids in items]  # before the kernel goes under the model
    engine = _engine(model, "fp32")
    assert layer_forms.kernel_covers(engine.model) == (True, "")  # every layer one kernel call, stream layers too
    assert engine.backend.layer_path() == (True, "")  # what the label asks
    assert _decode(engine, items, "ss") == reference
    assert _decode(engine, items, "ss", batch=True) == reference


@needs_kernel
@needs_whole
@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("precision", PRECISIONS[1:])
def test_ss_equals_ar_at_each_4bit_precision_on_the_kernel(family, precision):
    engine = _engine(_model(family, logit_scale=1.0), precision)  # logits near ties: a row-dependent sum would show
    assert layer_forms.kernel_covers(engine.model)[0]
    items = prompts(3, seed=7, max_len=30)
    plain = _decode(engine, items, "ar")
    assert _decode(engine, items, "ss") == plain
    assert _decode(engine, items, "ss", batch=True) == plain


@needs_kernel
@pytest.mark.parametrize("family,whole", [("qwen3", False), ("olmo2", True)])
@torch.no_grad()
def test_qk_norm_step_is_the_modules_norm_row_by_row(family, whole):
    """layer_steps.c's qk_norm computes q's and k's norms as the library's modules on the kernel compute them, bit for
    bit, whatever the rows of the call (each row alone equals it among others); and what transformers' own forward
    computes up to rounding."""
    model = _model(family)
    attn = compat.decoder_layers(model)[0].self_attn
    H, Hkv, D = 4, 2, attn.head_dim
    torch.manual_seed(0)
    qkv = torch.randn(7, (H + 2 * Hkv) * D) * 3
    q, k = qkv[:, :H * D], qkv[:, H * D:(H + Hkv) * D]
    shape = (lambda t, n: t) if whole else (lambda t, n: t.view(7, n, D))
    own = [attn.q_norm(shape(q, H)).reshape(7, -1), attn.k_norm(shape(k, Hkv)).reshape(7, -1)]  # transformers' forward
    rowinv.adopt(model)  # the norms' kernel forward, as on engines on the kernel
    kernel = [attn.q_norm(shape(q, H)).reshape(7, -1), attn.k_norm(shape(k, Hkv)).reshape(7, -1)]
    eps = attn.q_norm.variance_epsilon
    out = rowinv_steps.qk_norm(qkv.clone(), H, Hkv, D, attn.q_norm.weight, attn.k_norm.weight, eps, whole)
    assert torch.equal(out[:, :H * D], kernel[0]) and torch.equal(out[:, H * D:(H + Hkv) * D], kernel[1])
    assert torch.equal(out[:, (H + Hkv) * D:], qkv[:, (H + Hkv) * D:])  # v untouched
    alone = torch.cat([rowinv_steps.qk_norm(qkv[i:i + 1].clone(), H, Hkv, D, attn.q_norm.weight, attn.k_norm.weight,
                                            eps, whole) for i in range(7)])
    assert torch.equal(alone, out)
    torch.testing.assert_close(out[:, :(H + Hkv) * D], torch.cat(own, dim=1), rtol=1e-5, atol=1e-5)


@needs_kernel
@needs_whole
def test_the_probe_refuses_steps_without_the_qk_norms(monkeypatch):
    """The run-time probe (backends.base.probe, through direct_layers.bind) covers the q/k norm step: kernel layers
    that leave Qwen3's q/k norms out do not reproduce its modules, so the library's modules stay in charge."""
    parts = layer_forms.parts
    monkeypatch.setattr(layer_forms, "parts", lambda layer: parts(layer)._replace(q_norm=None, k_norm=None))
    with pytest.warns(UserWarning, match="did not reproduce"):
        engine = _engine(_model("qwen3"), "fp32")
    assert all(getattr(layer, compat.DIRECT_STEP, None) is None for layer in compat.decoder_layers(engine.model))
    assert not layer_forms.kernel_covers(engine.model)[0]


@needs_kernel
def test_a_form_the_kernel_does_not_compute_says_so():
    """Gemma 3's layers run on the library's modules; what the kernel covers says why."""
    engine = _engine(tiny_model("gemma3_text", seed=5, hidden=128, num_attention_heads=4, num_key_value_heads=2), "fp32")
    covered, why = engine.backend.layer_path()
    assert not covered and "Gemma 3" in why
    assert not direct_layers.run_stack(compat.decoder_layers(engine.model), torch.zeros(1, 1, 128), None, None, None)

"""Direct layer steps (kernels/steps/direct_layers.py): engines on the row-invariant kernel run each decoder layer
as one function over its own modules, and that must change nothing, bit for bit."""

from __future__ import annotations

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.backends.base import probe
from specstream_core.model import compat, msa
from specstream_core.kernels.steps import direct_layers, layer_stacks, rowinv_steps
from specstream_core.kernels.linears import int4, rowinv
from tiny_models import prompts, tiny_model


def _probe(engine):
    return probe(engine.backend, msa.forward)  # what the backend's bind compares


needs_kernel = pytest.mark.skipif(not rowinv.available(), reason=f"kernel unavailable: {rowinv.unavailable_reason()}")


def _engine(family: str, precision: str = "fp32") -> Engine:
    model = tiny_model(family, seed=5, logit_scale=1.0, hidden=128, num_attention_heads=4, num_key_value_heads=2)
    if precision == "int4":
        int4.quantize_model(model, kernel=True)
    else:
        rowinv.install(model, "rowinv", weight_dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=1)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in streams.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return Engine(model, None, streams, precision=precision)


def _bound(engine) -> int:
    return sum(direct_layers.step_of(layer) is not None for layer in compat.decoder_layers(engine.model))


def _decode(engine) -> list:
    items = prompts(4, seed=6, max_len=40)
    out = []
    for mode, topk, lookup in (("ar", (1,), 0), ("ss", (1, 1, 1), 0), ("ss", (2, 2, 1), 0), ("ss", (1,), 3)):
        cfg = DecodeConfig(mode=mode, max_new_tokens=12, stop_on_eos=False, tree_topk=topk, lookup=lookup)
        out.append([engine.generate(ids, cfg).token_ids for ids in items])
        out.append([r.token_ids for r in engine.generate_batch(items, cfg)])
    return out


@needs_kernel
@pytest.mark.parametrize("family,precision,calls", [("llama", "fp32", "stack"), ("qwen2", "fp32", "stack"),
                                                    ("mistral", "fp32", "stack"), ("llama", "bf16", "stack"),
                                                    ("llama", "int4", "stack"), ("llama", "fp32", "layer"),
                                                    ("llama", "int4", "front+back")])
def test_direct_steps_compute_what_the_modules_compute(family, precision, calls, monkeypatch):
    """Bound on every layer (stream layers and their adapters too); a prompt and a speculative step give the
    same tensors, and decodings the same tokens, with the steps and without them. On Llama and Mistral (Qwen2's
    q/k/v have biases, which the kernel's layer does not add) every layer, the stream
    layers with their row adapters too, takes a single sequence's steps in kernel calls: a step's run of layers
    in one (`rowinv_steps.layer_stack`, where the kernel computes torch's SiLU), else a layer in one
    (`layer_step`), else up to the activation and after it (`layer_front`, `layer_back`); over fp32 or bf16
    weights (q, k, v and gate, up one call each) or 4-bit ones (q/k/v and gate/up fused)."""
    whole = rowinv_steps.silu_exp() is not None
    if calls != "front+back" and not whole:
        pytest.skip("torch runs another vector width than the kernel's build here: no whole-layer calls")
    if calls != "stack":
        monkeypatch.setattr(direct_layers, "run_stack", lambda *a: None)
        monkeypatch.setattr(layer_stacks, "run_stream_stack", lambda *a: None)
    engine = _engine(family, precision)
    seen = {"front": [], "back": [], "step": [], "stack": [], "streams": []}  # calls; down projections' adapter or not
    wrap = {"layer_front": lambda f: lambda *a: seen["front"].append(1) or f(*a),
            "layer_back": lambda f: lambda *a: seen["back"].append(a[-1].lora is not None) or f(*a),
            "layer_step": lambda f: lambda *a: seen["step"].append(bool(a[1][0].contents.down_A)) or f(*a),
            "layer_stack": lambda f: lambda *a: seen["stack"].append(1) or f(*a),
            "stream_stack": lambda f: lambda *a: seen["streams"].append(1) or f(*a)}
    for name, w in wrap.items():
        monkeypatch.setattr(rowinv_steps, name, w(getattr(rowinv_steps, name)))
    fronted = family != "qwen2"
    with torch.inference_mode():
        assert _bound(engine) == engine.model.config.num_hidden_layers
        steps = [layer.__dict__[compat.DIRECT_STEP] for layer in compat.decoder_layers(engine.model)]
        assert [s.front is not None for s in steps] == [s.back is not None for s in steps] == [fronted] * 4
        assert [s.whole for s in steps] == [fronted and whole] * 4
        if calls == "front+back":
            for s in steps:
                s.whole = False
        direct = _probe(engine), _decode(engine)
        if calls == "stack":  # plain steps a run of layers a call, speculative steps both runs in one
            assert bool(seen["stack"]) == bool(seen["streams"]) == fronted
        else:  # down projections with and without their adapter
            assert (set(seen["step" if calls == "layer" else "back"]) == {False, True}) == fronted
            assert bool(seen["front"]) == (fronted and calls == "front+back") and not seen["stack"] and not seen["streams"]
        direct_layers.unbind(compat.decoder_layers(engine.model))
        assert _bound(engine) == 0
        library = _probe(engine), _decode(engine)
    assert all(torch.equal(a, b) for a, b in zip(direct[0], library[0]))
    assert direct[1] == library[1]


@needs_kernel
@pytest.mark.parametrize("precision,part", [("fp32", "mlp"), ("fp32", "front"), ("int4", "front"), ("int4", "back")])
def test_a_step_that_differs_is_never_bound(monkeypatch, precision, part):
    """The check at binding can fail: a step off by one rounding (in the Python step, or in the one-call
    layer front or back) leaves the modules in charge, and says so."""
    if part == "front":
        front = rowinv_steps.layer_front
        for call in ("layer_step", "layer_stack", "stream_stack"):  # declined: the front, then the rest
            monkeypatch.setattr(rowinv_steps, call, lambda *a: None)
        monkeypatch.setattr(rowinv_steps, "layer_front", lambda *a: (lambda h2, gu: (h2, gu * (1 + 2 ** -20)))(*front(*a)))
    elif part == "back":
        back, step = rowinv_steps.layer_back, rowinv_steps.layer_step
        monkeypatch.setattr(rowinv_steps, "layer_back", lambda *a: back(*a) * (1 + 2 ** -20))
        monkeypatch.setattr(rowinv_steps, "layer_step", lambda *a: step(*a) * (1 + 2 ** -20))
        monkeypatch.setattr(rowinv_steps, "layer_stack", lambda *a: None)
        monkeypatch.setattr(rowinv_steps, "stream_stack", lambda *a: None)
    else:
        mlp = direct_layers.DirectStep._mlp
        monkeypatch.setattr(direct_layers.DirectStep, "_mlp", lambda self, x: mlp(self, x) * (1 + 2 ** -20))
    with pytest.warns(UserWarning, match="did not reproduce"):
        engine = _engine("llama", precision)
    with torch.no_grad():
        assert _bound(engine) == 0


@needs_kernel
def test_the_modules_run_where_a_step_would_skip_something():
    """Gradients, forward hooks (attention capture), engines off the kernel, adapters attached later."""
    engine = _engine("llama")
    layer = compat.decoder_layers(engine.model)[-1]
    with torch.no_grad():
        assert direct_layers.step_of(layer) is not None
        handle = layer.self_attn.register_forward_hook(lambda *a: None)
        assert direct_layers.step_of(layer) is None
        handle.remove()
    assert direct_layers.step_of(layer) is None  # gradients on
    ids = prompts(1, seed=6)[0]
    cfg = DecodeConfig(mode="ss", max_new_tokens=6, stop_on_eos=False, tree_topk=(2, 1), trace=True,
                       attention_layers=(3,))
    trace = engine.generate(ids, cfg).trace
    assert trace["steps"][1]["attention"]  # captured through the module's hook
    engine.streams.detach()  # the adapters leave: the steps held them
    with torch.no_grad():
        assert _bound(engine) == 0
    model = tiny_model("llama", seed=5)
    rowinv.install(model, "rowinv")
    bare = Engine(model, None, None)
    with torch.no_grad():
        assert _bound(bare) == model.config.num_hidden_layers
        StreamParams.fresh(model, gamma=2, n_stream_layers=1, adapter_rank=4)  # wraps Linears the steps hold
        assert _bound(bare) == 0
        assert _bound(Engine(tiny_model("llama", seed=5), None, None)) == 0  # torch's Linears: nothing bound


@needs_kernel
def test_rope_store_rotates_as_transformers_and_writes_the_cache_slots():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    from tiny_models import tiny_config

    B, q, H, Hkv, D, cap, start = 2, 3, 4, 2, 32, 12, 5
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(B, q, (H + 2 * Hkv) * D, generator=g) * 3
    positions = torch.randint(0, 200, (B, q), generator=g)
    cos, sin = LlamaRotaryEmbedding(tiny_config("llama", hidden=H * D, num_attention_heads=H))(qkv, positions)
    k_buf, v_buf = torch.zeros(B, Hkv, cap, D), torch.zeros(B, Hkv, cap, D)
    got = rowinv_steps.rope_store(qkv, H, Hkv, cos, sin, k_buf, v_buf, start)
    split = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
    qs, ks, vs = (t.reshape(B, q, -1, D).transpose(1, 2) for t in split)
    want_q, want_k = apply_rotary_pos_emb(qs, ks, cos, sin)
    assert torch.equal(got.transpose(1, 2), want_q)
    assert torch.equal(k_buf[:, :, start:start + q], want_k) and torch.equal(v_buf[:, :, start:start + q], vs)
    assert not k_buf[:, :, :start].any() and not v_buf[:, :, start + q:].any()  # nothing else written


@needs_kernel
def test_the_kernels_silu_is_torchs_bit_for_bit():
    """`silu_rows` (the whole-layer step's SiLU) against torch's on rows whose length leaves a tail for its scalar
    loop, from a strided view as a layer's gate columns are, with zeros, subnormals, overflow and infinities."""
    if rowinv_steps.silu_exp() is None:
        pytest.skip("torch runs another vector width than the kernel's build here")
    lib = rowinv_steps._library()
    g = torch.Generator().manual_seed(0)
    for n, scale in ((1536, 1.0), (1000, 30.0), (37, 100.0)):
        gu = torch.randn(5, 2 * n, generator=g) * scale
        gu[0, :12] = torch.tensor([0.0, -0.0, 1e-40, -1e-40, 88.0, -88.0, 89.0, -104.0, 1e-8, float("inf"),
                                   float("-inf"), 20.0])
        y = torch.empty(5, n)
        lib.silu_rows(gu.data_ptr(), 2 * n, 5, n, y.data_ptr(), rowinv_steps.silu_exp())
        want = torch.nn.functional.silu(gu[:, :n])
        assert torch.equal(y.isnan(), want.isnan()) and torch.equal(y.nan_to_num(), want.nan_to_num()), n  # -inf: NaN


@needs_kernel
def test_a_row_adapters_delta_on_the_kernel():
    """`lora_rows` (the stream rows' adapters, in the layer steps and in StreamRowLoRA alike): (x A^T) B^T from bf16
    factors (`StreamRowLoRA.factors`), each row's numbers the same whatever rows share the call, and the modules'
    forward gives what the kernel gives."""
    g = torch.Generator().manual_seed(0)
    for k, n, r in ((64, 96, 8), (576, 1536, 32), (40, 17, 5)):
        a, b = torch.randn(r, k, generator=g), torch.randn(n, r, generator=g)
        at, bt = a.t().contiguous().bfloat16(), b.t().contiguous().bfloat16()
        x = torch.randn(7, k, generator=g)
        delta = rowinv_steps.lora_rows(x, at, bt)
        want = (x.double() @ at.double()) @ bt.double()
        assert torch.allclose(delta.double(), want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
        for i in range(7):  # a row alone, and in every group of 1 to 4
            assert torch.equal(rowinv_steps.lora_rows(x[i:i + 1], at, bt), delta[i:i + 1])
        assert torch.equal(rowinv_steps.lora_rows(x[2:5], at, bt), delta[2:5])
        before = torch.get_num_threads()
        try:
            for threads in (2, 3):  # threads take parts of the outputs (1,536 of them: 3 parts): the same numbers
                torch.set_num_threads(threads)
                assert torch.equal(rowinv_steps.lora_rows(x, at, bt), delta)
        finally:
            torch.set_num_threads(before)
    assert rowinv_steps.lora_rows(torch.randn(2, 8), torch.zeros(8, 300).bfloat16(), torch.zeros(300, 4).bfloat16()) is None
    model = tiny_model("llama", seed=1)
    rowinv.install(model, "rowinv")
    streams = StreamParams.fresh(model, gamma=2, n_stream_layers=2, adapter_rank=8, seed=3)
    wrapper = next(iter(streams.adapters.values()))
    with torch.no_grad():
        wrapper.lora_B.weight.normal_(generator=g)
    x = torch.randn(5, wrapper.lora_A.in_features, generator=g)
    with torch.inference_mode():
        with streams.rows.streams_after(2):
            y = wrapper(x)
        assert torch.equal(y[:2], wrapper.base(x[:2]))
        assert torch.equal(y[2:], wrapper.base(x[2:]) + rowinv_steps.lora_rows(x[2:], *wrapper.factors()))

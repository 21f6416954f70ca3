"""The row-invariant CPU kernel (kernels/linears/rowinv.py): its arithmetic, its row invariance, its fallbacks, and
speculative decoding on it equal to plain decoding bit for bit in fp32 and in bf16 weights."""

import json
import os

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.errors import SpecstreamError
from specstream_core.model import compat, default_model, loading
from specstream_core.kernels.linears import int4, int4_a8, rowinv
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels import amx_tiles, builder, library
from specstream_core.kernels.steps import rowinv_steps
from specstream_core.model.loading import LoadConfig, load_model
from helpers import mismatches, near_tie_engine, randomized
from tiny_models import hf_greedy, prompts, save_tiny_model_dir, tiny_model

needs_kernel = pytest.mark.skipif(not rowinv.available(), reason=f"kernel unavailable: {rowinv.unavailable_reason()}")


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k", [(96, 128), (7, 40), (1, 16), (33, 1000), (33, 1008)])  # tails in both dimensions;
# K = 1008: the blocked layout in spans of columns (384, 384, 240), for a few rows span by span, for 13 block by block
def test_the_kernel_computes_x_w_t_and_each_row_alone(dtype, n, k):
    g = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=g).to(dtype)
    x = torch.randn(13, k, generator=g)
    bias = torch.randn(n, generator=g)
    y = rowinv.linear(x, w, bias)
    assert y.dtype == torch.float32 and y.shape == (13, n)
    assert torch.allclose(y, x @ w.float().T + bias, atol=1e-4 * k ** 0.5, rtol=1e-4)
    for m in range(1, 14):  # a row's result does not depend on how many rows share the call
        assert torch.equal(rowinv.linear(x[:m], w, bias), y[:m])
        assert torch.equal(rowinv.linear(x[m - 1:m], w, bias), y[m - 1:m])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert torch.equal(rowinv.linear(x, w, bias), y)  # threads split outputs, never a sum
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(rowinv.linear(x.reshape(13, 1, k).bfloat16(), w).float(),
                       rowinv.linear(x.bfloat16().float(), w).bfloat16().float().reshape(13, 1, n))
    _blocked_equals_row_major(x, w)
    assert (rowinv.library().rowinv_span(k) < k) == (k > 768)  # the spans above are what this case exercises


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k", [(33, 1008), (260, 128)])  # spans; panels of 16 blocks and a short last one
def test_a_prompt_sized_call_sums_each_row_as_a_one_row_call(dtype, n, k):
    """Calls of 32 rows or more (prompts) run panel by panel (rowinv.c's WIDE_ROWS): the same sums, bit for bit."""
    g = torch.Generator().manual_seed(n)
    w = torch.randn(n, k, generator=g).to(dtype)
    x = torch.randn(70, k, generator=g)
    wb = rowinv.blocked(w)
    y = rowinv.linear(x, wb, None, n)
    assert torch.equal(y, rowinv.linear(x, w))  # the row-major kernel's sums
    for m in (1, 31, 32, 33, 69):
        assert torch.equal(rowinv.linear(x[:m], wb, None, n), y[:m])
        assert torch.equal(rowinv.linear(x[m:m + 1], wb, None, n), y[m:m + 1])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # two threads split the panels (smaller ones where there are few blocks), never a sum
        assert torch.equal(rowinv.linear(x, wb, None, n), y)
    finally:
        torch.set_num_threads(threads)


def _blocked_equals_row_major(x, w):
    """The blocked layout (`rowinv.blocked`, what RowInvariantLinear reads) gives the row-major kernel's sums bit
    for bit, each row alone; it exists where K is a multiple of the build's lanes."""
    n, k = w.shape
    y, wb = rowinv.linear(x, w), rowinv.blocked(w)
    assert (wb is None) == bool(k % rowinv.library().rowinv_lanes())
    if wb is None:
        return
    for m in range(1, x.shape[0] + 1):
        assert torch.equal(rowinv.linear(x[:m], wb, None, n), y[:m])
        assert torch.equal(rowinv.linear(x[m - 1:m], wb, None, n), y[m - 1:m])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # threads split the blocks (within each span), never a sum
        for m in (3, x.shape[0]):
            assert torch.equal(rowinv.linear(x[:m], wb, None, n), y[:m])
    finally:
        torch.set_num_threads(threads)
    module = rowinv.RowInvariantLinear(k, n, bias=False, dtype=w.dtype)
    tiles = amx_tiles.tiled(w, rowinv.library()) is not None  # bf16 on AMX tiles where they run (test_bf16_on_amx_tiles)
    kernel = (lambda x, w: rowinv.linear_tiled(x, amx_tiles.tiled(w, rowinv.library()), None, n)) if tiles else rowinv.linear
    with torch.no_grad():
        module.weight.copy_(w)
        assert torch.equal(module(x), kernel(x, w)) and module._tiled == tiles
        module.weight.mul_(2)  # changed in place: the module's blocked copy follows
        assert torch.equal(module(x), kernel(x, w * 2))


@pytest.mark.skipif(not rowinv.available() or not amx_tiles.amx(rowinv.library()), reason="no AMX tiles here")
def test_bf16_on_amx_tiles_sums_each_row_alone(monkeypatch):
    """bf16 weights on the AMX tile unit (`amx_tiles`): x rounded to bf16 times W in fp32 sums, each row's
    result the same whatever the other rows of its call (1 to 40 rows: one and two row tiles, then another step)
    and however many threads; weights it cannot take (N or K not a multiple of 32, fp32) stay on the vector kernel,
    as do all with SPECSTREAM_AMX=0."""
    g = torch.Generator().manual_seed(7)
    for n, k in ((96, 128), (64, 1536), (1536, 576)):
        w, x = (torch.randn(n, k, generator=g) * 0.05).bfloat16(), torch.randn(40, k, generator=g)
        wt = amx_tiles.tiled(w, rowinv.library())
        y = rowinv.linear_tiled(x, wt, None, n)
        exact = x.bfloat16().double() @ w.double().T
        assert (y.double() - exact).abs().max() < 1e-5 * k ** 0.5
        assert not torch.equal(y, rowinv.linear(x, w))  # not the vector kernel's sums (x kept in fp32 there)
        assert rowinv.linear_tiled(x[:0], wt, None, n).shape == (0, n)  # no rows: nothing to do, no error
        for m in range(1, 41):
            assert torch.equal(rowinv.linear_tiled(x[:m], wt, None, n), y[:m])
            assert torch.equal(rowinv.linear_tiled(x[m - 1:m], wt, None, n), y[m - 1:m])
        threads = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            assert torch.equal(rowinv.linear_tiled(x, wt, None, n), y)
        finally:
            torch.set_num_threads(threads)
    assert amx_tiles.tiled(torch.zeros(48, 64, dtype=torch.bfloat16), rowinv.library()) is None
    assert amx_tiles.tiled(torch.zeros(64, 48, dtype=torch.bfloat16), rowinv.library()) is None
    assert amx_tiles.tiled(torch.zeros(64, 64), rowinv.library()) is None
    monkeypatch.setattr(amx_tiles, "AMX", False)
    assert amx_tiles.tiled(torch.zeros(64, 64, dtype=torch.bfloat16), rowinv.library()) is None


@pytest.mark.skipif(not rowinv.available() or not amx_tiles.amx(rowinv.library()), reason="no AMX tiles here")
def test_bf16_on_tiles_decodes_exactly_with_the_adapters_on_tiles_too():
    """A bf16 model on AMX tiles whose stream-row adapters fit them (rank 32): the adapters' deltas run on tiles in the
    modules and in the kernel's layer steps alike (bind found them equal bit for bit, so the steps stay bound), and
    speculative output is plain output."""
    model = tiny_model("llama", seed=5, logit_scale=1.0, hidden=128, layers=4, num_attention_heads=4,
                       num_key_value_heads=2)
    rowinv.install(model, "rowinv", torch.bfloat16)
    streams = randomized(StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=32, seed=1), 1, 0.1)
    engine = Engine(model, None, streams, precision="bf16")
    assert all(a.tiled_factors() is not None for a in streams.adapters.values())
    assert mismatches(engine, (2, 2, 1)) == 0 and mismatches(engine, (1, 1, 1)) == 0
    steps = [layer.__dict__.get(compat.DIRECT_STEP) for layer in compat.decoder_layers(model)]
    assert all(s is not None and s.whole for s in steps)
    assert all(s.front.adapters[1] & rowinv_steps.LORA_TILES for s in steps[-2:])  # the stream layers' adapters


@pytest.mark.skipif(not rowinv.available(), reason="the kernel cannot run here")
def test_the_l2_prefetch_changes_no_sum(monkeypatch, tmp_path):
    """The vendor tuning (`builder.tuning_flags`: an L2 prefetch ahead of the blocked Linears and of the 4- and
    8-bit weights against 8-bit activations) only moves data: a build with it and one without give the same sums."""
    monkeypatch.setenv("SPECSTREAM_CACHE", str(tmp_path))
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(9, 1024, generator=g), torch.randn(37, 1024, generator=g)
    out = {}
    for ahead in ("0", "16384"):
        monkeypatch.setenv("SPECSTREAM_L2_AHEAD", ahead)
        monkeypatch.setattr(library, "_why", None)
        monkeypatch.setattr(library, "_lib", None)
        assert builder.tuning_flags() == ([] if ahead == "0" else [f"-DL2_AHEAD={ahead}"])
        for dtype in (torch.float32, torch.bfloat16):
            wb = rowinv.blocked(w.to(dtype))
            out[ahead, dtype] = [rowinv.linear(x[:m], wb, None, 37) for m in (1, 5, 9)]
        if int4_a8.available():  # the 4- and 8-bit weights against 8-bit activations prefetch the same way
            q4 = int4.Int4Linear(*int4.quantize_groups(w), a8=True)
            q8 = int8_head.Int8Linear(*int8_head.quantize_groups(w), a8=True)
            out[ahead, "a8"] = [layer(x[:m]) for layer in (q4, q8) for m in (1, 5, 9)]
    assert len(os.listdir(tmp_path / "kernels")) == 2  # two builds
    monkeypatch.setenv("SPECSTREAM_L2_AHEAD", "16k")
    with pytest.warns(UserWarning, match="not a number of bytes"):
        builder.tuning_flags()
    for kind in (torch.float32, torch.bfloat16) + (("a8",) if ("0", "a8") in out else ()):
        assert all(torch.equal(a, b) for a, b in zip(out["0", kind], out["16384", kind]))


@pytest.mark.skipif(not {"avx2", "fma"} <= builder.cpu_flags(), reason="this CPU lacks AVX2 + FMA")
def test_the_avx2_build_is_row_invariant_too(monkeypatch, tmp_path):
    """The build a CPU without AVX-512 gets, built and checked here whatever this CPU has."""
    monkeypatch.setattr(library, "_why", None)
    monkeypatch.setattr(library, "_lib", None)
    monkeypatch.setattr(builder, "cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setenv("SPECSTREAM_CACHE", str(tmp_path))
    assert rowinv.available(), rowinv.unavailable_reason()
    assert rowinv.isa() == "avx2"
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        w, x = torch.randn(37, 203, generator=g).to(dtype), torch.randn(7, 203, generator=g)  # tails everywhere
        y = rowinv.linear(x, w)
        assert torch.allclose(y, x @ w.float().T, atol=1e-3, rtol=1e-4)
        for m in range(1, 8):
            assert torch.equal(rowinv.linear(x[:m], w), y[:m])
            assert torch.equal(rowinv.linear(x[m - 1:m], w), y[m - 1:m])
        for k in (208, 1040):  # a multiple of 8 lanes: blocked (1040: in spans of columns)
            _blocked_equals_row_major(torch.randn(7, k, generator=g), torch.randn(37, k, generator=g).to(dtype))
    assert rowinv.library().rowinv_span(1040) < 1040
    layer = int4.Int4Linear(*int4.quantize_groups(torch.randn(37, 224, generator=g)), kernel=True)
    x = torch.randn(11, 224, generator=g)
    y = rowinv.linear_q4(x, layer.q4, layer.dm, 37)
    assert torch.allclose(y, x @ layer.dequantized().T, atol=1e-4, rtol=1e-5)
    for m in range(1, 11):
        assert torch.equal(rowinv.linear_q4(x[:m], layer.q4, layer.dm, 37), y[:m])
        assert torch.equal(rowinv.linear_q4(x[m:], layer.q4, layer.dm, 37), y[m:])
    head = int8_head.Int8Linear(*int8_head.quantize_groups(torch.randn(37, 224, generator=g)), kernel=True)
    y = rowinv.linear_q8(x, head.q8, head.d, 37)
    assert torch.allclose(y, x @ head.dequantized().T, atol=1e-4, rtol=1e-5)
    for m in range(1, 11):
        assert torch.equal(rowinv.linear_q8(x[:m], head.q8, head.d, 37), y[:m])
        assert torch.equal(rowinv.linear_q8(x[m:], head.q8, head.d, 37), y[m:])


def test_mkl_is_not_row_invariant_so_the_kernel_is_needed():
    """Why the kernel exists: torch's own fp32 Linear gives a row another result beside other rows."""
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(1536, 576, generator=g) * 0.02, torch.randn(9, 576, generator=g)
    one = torch.nn.functional.linear(x[:1], w)
    assert any(not torch.equal(torch.nn.functional.linear(x[:m], w)[:1], one) for m in range(2, 10))


@needs_kernel
def test_linears_fall_back_to_torch_for_gradients_and_inside_torch_linears(monkeypatch):
    layer = torch.nn.Linear(32, 16)
    assert rowinv.make_row_invariant(layer) and isinstance(layer, rowinv.RowInvariantLinear)
    calls = []
    kernel = rowinv.linear
    monkeypatch.setattr(rowinv, "linear", lambda *a: calls.append(1) or kernel(*a))
    x = torch.randn(3, 32, requires_grad=True)
    layer(x).sum().backward()  # training: torch's Linear, gradients flow
    assert not calls and x.grad is not None and layer.weight.grad is not None
    with torch.no_grad():
        layer(x)
        assert len(calls) == 1
        with rowinv.torch_linears():
            layer(x)
        assert len(calls) == 1
    assert torch.allclose(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), atol=1e-6)


def test_a_machine_without_the_kernel_runs_torch_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(library, "_why", None)
    monkeypatch.setattr(library, "_lib", None)
    monkeypatch.setenv("SPECSTREAM_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "/bin/false")
    assert not rowinv.available() and "did not build" in rowinv.unavailable_reason()
    assert not os.listdir(tmp_path / "kernels")  # no half-built library left behind
    model = tiny_model("llama")
    assert rowinv.install(model) == 0 and not rowinv.uses_kernel(model)
    with pytest.raises(SpecstreamError, match="cannot run here"):
        rowinv.install(model, "rowinv")
    monkeypatch.setattr(library, "_why", None)
    monkeypatch.setattr(builder, "cpu_flags", lambda: {"sse2"})
    assert not rowinv.available() and "neither AVX-512 nor AVX2" in rowinv.unavailable_reason()
    with pytest.raises(SpecstreamError, match="unknown kernel"):
        LoadConfig("x", kernel="fast")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("rowinv") / "tiny")


@needs_kernel
def test_loading_puts_the_kernel_under_fp32_and_bf16_models_unless_told_not_to(tiny_dir):
    fp32 = load_model(LoadConfig(tiny_dir, precision="fp32"))
    assert rowinv.uses_kernel(fp32) and isinstance(fp32.lm_head, rowinv.RowInvariantLinear)
    assert isinstance(fp32.model.layers[0].mlp.down_proj, rowinv.RowInvariantLinear)
    bf16 = load_model(LoadConfig(tiny_dir, precision="bf16"))
    assert bf16.model.layers[0].mlp.down_proj.weight.dtype == torch.bfloat16  # half the bytes to read
    assert bf16.model.embed_tokens.weight.dtype == torch.float32  # activations, norms, embedding: fp32
    assert loading.is_exact("bf16", "cpu", "rowinv") and not loading.is_exact("bf16", "cpu", "torch")
    plain = load_model(LoadConfig(tiny_dir, precision="fp32", kernel="torch"))
    assert not rowinv.uses_kernel(plain) and type(plain.lm_head) is torch.nn.Linear
    ids = prompts(1, vocab=120, seed=3)[0]
    with torch.no_grad():
        a, b = fp32(torch.tensor([ids])).logits, plain(torch.tensor([ids])).logits
    assert torch.allclose(a, b, atol=1e-4)


def test_the_default_precision_is_the_checkpoints_own_on_other_bases(tiny_dir):
    """On a base not converted from a GGUF file: the checkpoint's dtype, as transformers loads it (an fp32
    checkpoint runs fp32; tests/test_precision_defaults.py covers bf16 and fp16 checkpoints)."""
    assert loading.DEFAULT_PRECISION == "auto"
    assert loading.resolve_precision("auto", base=tiny_dir) == "fp32" == LoadConfig(tiny_dir).precision
    assert loading.resolve_precision("auto", "cpu", "torch", base=tiny_dir) == "fp32"
    assert loading.resolve_precision("auto", "cuda", base=tiny_dir) == "fp32"
    assert [loading.resolve_precision(p) for p in ("fp32", "bf16", "int4")] == ["fp32", "bf16", "int4"]
    engine = Engine.load(tiny_dir, gamma=2)
    assert engine.precision == "fp32" and engine.exact


def test_the_default_precision_is_int4_on_a_gguf_converted_base(tmp_path):
    """A base converted from a GGUF file that is still there unchanged (the default model) decodes in 4 bits,
    its file's own groups, on the kernel: against 8-bit activations where its build has VNNI (int4-a8), else
    as the fp32 model's weights (int4); without the kernel it stays fp32."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    base = tmp_path / "converted"
    base.mkdir()
    marker = {"source": str(gguf), "gguf_digest": default_model.file_digest(str(gguf))}
    (base / default_model.MARKER).write_text(json.dumps(marker))
    on_file = ("int4-a8" if int4_a8.available() else "int4") if rowinv.available() else "fp32"
    assert loading.resolve_precision("auto", base=str(base)) == on_file
    assert loading.resolve_precision("auto", "cpu", "torch", base=str(base)) == "fp32"
    assert loading.resolve_precision("bf16", base=str(base)) == "bf16"
    gguf.write_bytes(b"GGUF" + bytes(65))  # the file changed since: not its groups any more
    assert loading.resolve_precision("auto", base=str(base)) == "fp32"  # the checkpoint's own (none: fp32)


@needs_kernel
def test_bf16_decoding_equals_transformers_generate_on_the_same_weights():
    """The default precision's claim: with the Linears' weights in bf16 and every sum in fp32, plain and
    speculative decoding give the tokens transformers' own generate gives on those weights (run through
    torch, the weights widened to fp32)."""
    model = tiny_model("llama", seed=3)  # decisive logits: rounding never decides a token
    rowinv.install(model, "rowinv", torch.bfloat16)
    assert model.model.layers[0].mlp.down_proj.weight.dtype == torch.bfloat16
    with rowinv.torch_linears():
        reference = [hf_greedy(model, ids, 16) for ids in prompts(6, seed=4)]
    streams = randomized(StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=2), 2, 0.5)
    engine = Engine(model, None, streams, precision="bf16")
    try:
        for mode, topk in (("ar", (1,)), ("ss", (1,)), ("ss", (2, 2, 1))):
            cfg = DecodeConfig(mode=mode, max_new_tokens=16, stop_on_eos=False, tree_topk=topk)
            assert [engine.generate(ids, cfg).token_ids for ids in prompts(6, seed=4)] == reference, (mode, topk)
    finally:
        streams.detach()


@needs_kernel
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_speculative_output_is_plain_output_bit_for_bit(precision):
    engine = near_tie_engine(precision)
    assert engine.exact and engine.row_exact
    for topk, lookup in (((1, 1, 1), 0), ((2, 2, 1), 0), ((1,), 4)):
        assert mismatches(engine, topk, lookup=lookup) == 0
    assert mismatches(engine, (2, 2, 1), batch=True) == 0


@needs_kernel
def test_the_check_can_fail(monkeypatch):
    """A Linear whose result depends on the number of rows in its call (here: rounded to bf16 beside other
    rows, as oneDNN's bf16 path does differently) makes speculative output differ on these near-ties."""
    engine = near_tie_engine("fp32")
    kernel = rowinv.linear
    monkeypatch.setattr(rowinv, "linear", lambda x, w, b=None, n=None: (
        lambda y: y if x.reshape(-1, x.shape[-1]).shape[0] == 1 else y.bfloat16().float())(kernel(x, w, b, n)))
    assert mismatches(engine, (1, 1, 1)) + mismatches(engine, (2, 2, 1)) > 0


@needs_kernel
def test_plain_decoding_on_the_kernel_equals_transformers_generate_as_it_ships():
    model = tiny_model("llama", seed=3)  # decisive logits: rounding never decides a token
    reference = [hf_greedy(model, ids, 16) for ids in prompts(6, seed=4)]
    rowinv.install(model, "rowinv")
    engine = Engine(model, None, None)
    cfg = DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False)
    assert [engine.generate(ids, cfg).token_ids for ids in prompts(6, seed=4)] == reference


def test_a_decoding_step_in_another_thread_leaves_this_threads_attention_alone():
    """The lab serves visitors from threads: one visitor's pass inside `row_exact_attention` must not change
    what transformers' generate computes in another thread on a model with the row-exact attention."""
    import threading

    from specstream_core.model import compat

    model = tiny_model("llama", seed=3)
    ids = prompts(2, seed=6)
    reference = [hf_greedy(model, p, 12) for p in ids]
    compat.use_row_exact_attention(model)
    inside, release = threading.Event(), threading.Event()

    def visitor():
        with compat.row_exact_attention(None, per_row=True):
            inside.set()
            release.wait(60)

    t = threading.Thread(target=visitor)
    t.start()
    try:
        assert inside.wait(60)
        assert [hf_greedy(model, p, 12) for p in ids] == reference
    finally:
        release.set()
        t.join()


@needs_kernel
def test_stream_adapters_run_on_the_kernel_too():
    """The streams' LoRA adapters of a kernel engine go through the kernel (MKL's small-matrix calls cost
    ~40 µs each here, 56 a pass); on torch's Linears they stay torch's."""
    engine = near_tie_engine("fp32")
    adapters = list(engine.streams.adapters.values())
    assert adapters and all(isinstance(a.lora_A, rowinv.RowInvariantLinear)
                            and isinstance(a.lora_B, rowinv.RowInvariantLinear) for a in adapters)
    model = tiny_model("llama", seed=5)
    streams = StreamParams.fresh(model, gamma=2, n_stream_layers=1, adapter_rank=4)
    Engine(model, None, streams)
    assert all(type(a.lora_A) is torch.nn.Linear for a in streams.adapters.values())

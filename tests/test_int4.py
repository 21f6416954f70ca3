"""4-bit CPU decoding (kernels/linears/int4.py), on the row-invariant kernel and through torch's int4 kernel: their
arithmetic, their row invariance, a GGUF file's own Q4_1 groups, and int4 decoding against transformers'
generate on the same int4 model."""

import copy

import numpy as np
import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.errors import SpecstreamError
from specstream_core.kernels.linears import int4, rowinv
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.steps import rowinv_steps
from specstream_core.model.loading import LoadConfig
from helpers import mismatches, perturbed_streams, write_tiny_gguf
from tiny_models import hf_greedy, prompts, tiny_model

pytestmark = pytest.mark.skipif(not int4.available(), reason="neither int4 kernel runs here")
# the two paths: the row-invariant kernel (fp32 activations) and torch's int4 kernel (bf16 activations)
PATHS = [pytest.param(True, id="kernel", marks=pytest.mark.skipif(not rowinv.available(), reason="no kernel here")),
         pytest.param(False, id="torch", marks=pytest.mark.skipif(not int4.torch_available(), reason="old torch"))]


def _layer(n=96, k=128, seed=0, kernel=None):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    return w, int4.Int4Linear(*int4.quantize_groups(w), kernel=kernel)


@pytest.mark.parametrize("kernel", PATHS)
def test_int4_linear_computes_with_its_groups_and_is_row_invariant(kernel):
    w, layer = _layer(n=98, kernel=kernel)  # 98 outputs: padded to the kernels' blocks (4 and 16)
    x = torch.randn(13, 128, generator=torch.Generator().manual_seed(1))
    y = layer(x)
    assert y.dtype == torch.float32 and y.shape == (13, 98)
    if kernel:  # the fp32 kernel's Linear on the dequantized weights, bit for bit
        assert torch.equal(y, rowinv.linear(x, layer.dequantized()))
        assert torch.allclose(y, x @ layer.dequantized().T, atol=1e-4, rtol=1e-5)
    else:
        assert torch.allclose(y, x.bfloat16().float() @ layer.dequantized().T, atol=0.15, rtol=0.02)  # bf16
    assert (layer.dequantized() - w).abs().max() < 0.5 * (w.max() - w.min()) / 15 + 0.05  # within half a step
    for m in range(1, 13):  # a row's result does not depend on how many rows share the pass (blocks of 4 / 8)
        assert torch.equal(layer(x[:m]), y[:m])
        assert torch.equal(layer(x[m:m + 1]), y[m:m + 1])
        assert torch.equal(layer(x[m:]), y[m:])


def test_the_torch_path_runs_inside_torch_linears_and_rounds_differently():
    """transformers' baseline (`rowinv.torch_linears`) runs torch's int4 kernel on the same groups."""
    if not (rowinv.available() and int4.torch_available()):
        pytest.skip("needs both int4 paths")
    _, layer = _layer()
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ours = layer(x)
        with rowinv.torch_linears():
            theirs = layer(x)
    assert torch.allclose(ours, theirs, atol=0.15, rtol=0.02) and not torch.equal(ours, theirs)


@pytest.mark.parametrize("kernel", PATHS)
def test_fused_members_give_their_own_layers_output_in_one_kernel_call(monkeypatch, kernel):
    torch.manual_seed(0)
    parts = [int4.quantize_groups(torch.randn(n, 64)) for n in (48, 16, 16)]
    fused = int4.FusedInt4([(*p, None) for p in parts], kernel=kernel)
    members = [int4.Int4Part(fused, i) for i in range(3)]
    x = torch.randn(2, 3, 64)
    calls = []
    forward = int4.Int4Linear.forward
    monkeypatch.setattr(int4.Int4Linear, "forward", lambda self, a: calls.append(1) or forward(self, a))
    outs = [m(x) for m in members]
    assert len(calls) == 1
    for (q, s, low), out, m in zip(parts, outs, members):
        alone = int4.Int4Linear(q, s, low, kernel=kernel)(x)
        assert out.shape == alone.shape and torch.allclose(out, alone, atol=1e-5, rtol=1e-3)
        assert torch.allclose(m.dequantized(), int4.dequantize(q, s, low), atol=1e-6)
    calls.clear()
    members[2](x)
    assert not calls  # still the same input: sliced from the stored call
    x.mul_(2)  # the same tensor changed in place: computed again
    members[1](x)
    assert len(calls) == 1


@pytest.mark.parametrize("kernel", PATHS)
def test_int4_rows_is_the_head_cut_to_a_vocabulary(kernel):
    _, layer = _layer(n=170, kernel=kernel)  # 170 and 5 rows: not multiples of the kernels' 4 or 16
    x = torch.randn(3, 128)
    for idx in (torch.tensor([5, 0, 169, 64, 7]), torch.randperm(170)[:32]):
        assert torch.allclose(layer.rows(idx)(x), layer(x)[:, idx], atol=1e-6)


def _q4_1_blocks(q, d, m):
    """Q4_1 bytes as llama.cpp writes them: per 32 values fp16 d, fp16 m, then nibble pairs (j, j + 16)."""
    n, k = q.shape
    qb = q.reshape(n, k // 32, 32).astype(np.uint8)
    nibbles = qb[..., :16] | (qb[..., 16:] << 4)
    head = np.stack([d.astype(np.float16), m.astype(np.float16)], axis=-1).view(np.uint8).reshape(n, k // 32, 4)
    return np.concatenate([head, nibbles], axis=-1).reshape(n, k // 32 * 20)


def test_q4_1_blocks_become_the_kernels_groups():
    rng = np.random.default_rng(0)
    q = rng.integers(0, 16, (6, 64))
    d = rng.random((6, 2)).astype(np.float16)
    m = -rng.random((6, 2)).astype(np.float16)
    got_q, scale, low = int4.from_q4_1(_q4_1_blocks(q, d, m), 6, 64)
    assert np.array_equal(got_q.numpy(), q)
    assert np.array_equal(low.numpy(), m.astype(np.float32))  # the file's own low ends, exactly
    want = (d.astype(np.float32).repeat(32, 1) * q + m.astype(np.float32).repeat(32, 1)).astype(np.float32)
    assert torch.allclose(int4.dequantize(got_q, scale, low), torch.from_numpy(want), atol=1e-6)
    layer = int4.Int4Linear(got_q, scale, low)  # the bytes the kernel reads are the file's nibbles
    nibbles = layer.q4.transpose(1, 2).reshape(-1, 32)[:6]  # stored block by block, the 4 rows interleaved
    assert np.array_equal(nibbles.numpy(), _q4_1_blocks(q, d, m).reshape(6, 2, 20)[..., 4:].reshape(6, 32))


def test_a_gguf_files_own_q4_1_groups_are_used(tmp_path):
    pytest.importorskip("gguf")
    model = tiny_model("llama", seed=2, hidden=64, layers=2)
    write_tiny_gguf(model, str(tmp_path / "tiny.gguf"))  # the model now holds the file's weights
    groups = int4.gguf_groups(str(tmp_path / "tiny.gguf"), model)
    assert len(groups) == 7 * 2 + 1  # every decoder Linear (q and k rows put back in the model's order), the head
    head = model.lm_head.weight.detach().clone()
    fp32 = copy.deepcopy(model)  # the fp32 model of the file's weights, on the kernel where it runs
    if rowinv.available():
        rowinv.install(fp32)
    ids = torch.tensor([prompts(1, seed=9)[0]])
    report = int4.quantize_model(model, groups)
    kernel = rowinv.available()  # without it the head is 4-bit (torch's int4 kernel is row-invariant)
    assert report == {"layers": 7 * 2 + 1, "from_file": 14 + kernel, "fused": 2 * 2,  # q/k/v, gate/up per layer
                      "kernel": kernel, "head": "q8" if kernel else "int4", "head_from_file": kernel, "a8": False}
    if kernel:
        assert torch.equal(model.lm_head.dequantized(), head)  # the file's 8-bit groups: its fp32 weights exactly
        with torch.inference_mode():  # the fp32 weights and the fp32 kernel's sums: the fp32 model's logits
            assert torch.equal(model(ids).logits, fp32(ids).logits)
    q_proj = model.model.layers[1].self_attn.q_proj
    assert isinstance(q_proj, int4.Int4Part)


def _int4(model, kernel: bool):
    int4.quantize_model(model, kernel=kernel)
    return model


@pytest.fixture(scope="module", params=PATHS)
def int4_llama(request):
    return _int4(tiny_model("llama", seed=3), request.param), request.param


def test_int4_plain_decoding_equals_transformers_generate_on_the_int4_model(int4_llama, monkeypatch):
    """Token for token, transformers' generate running the same int4 Linears with its own sdpa attention. On
    the kernel our decoding steps attend through it (fp32 throughout); through torch (bf16 activations)
    they keep sdpa's own arithmetic, where a last-bit difference would often flip a token."""
    model, kernel = int4_llama
    if not kernel:
        monkeypatch.setattr(rowinv, "attend", lambda *a: pytest.fail("torch-path int4 attended through the kernel"))
    assert isinstance(model.lm_head, int8_head.Int8Linear if kernel else int4.Int4Linear)  # torch's: row-invariant
    assert model.lm_head.kernel == kernel
    engine = Engine(model, None, None, precision="int4")
    assert engine.row_exact and engine.exact and (engine.backend.name == "rowinv") == kernel
    cfg = DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False)
    for ids in prompts(6, seed=4):
        assert engine.generate(ids, cfg).token_ids == hf_greedy(model, ids, 16)


@pytest.mark.parametrize("head", ["fp32", "int4"])
def test_the_other_heads_decode_as_transformers_does(head):
    """quantize_model(head=...): the head at its own fp32 weights, or 4-bit like the layers."""
    model = tiny_model("llama", seed=3)
    weight = model.lm_head.weight.detach().clone()
    report = int4.quantize_model(model, head=head)
    assert report["head"] == head and not report["head_from_file"]
    if head == "fp32":
        assert type(model.lm_head) is not int4.Int4Linear and torch.equal(model.lm_head.weight, weight)
    else:
        assert isinstance(model.lm_head, int4.Int4Linear)
    assert isinstance(model.model.layers[0].mlp.down_proj, int4.Int4Linear)
    engine = Engine(model, None, None, precision="int4")
    cfg = DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False)
    for ids in prompts(4, seed=4):
        assert engine.generate(ids, cfg).token_ids == hf_greedy(model, ids, 16)


@pytest.fixture(scope="module", params=PATHS)
def near_tie_int4(request):
    """An int4 model with head_dim 64 (as real models) and unscaled random logits: near-ties everywhere,
    so any rounding difference between a speculative and a plain pass flips tokens (without row-exact
    attention 2 of these 20 prompt runs differ; checked by `test_the_check_can_fail`)."""
    model = _int4(tiny_model("llama", seed=5, logit_scale=1.0, hidden=256, layers=4, num_attention_heads=4,
                             num_key_value_heads=2), request.param)
    return model, perturbed_streams(model, gamma=3, draft_vocab=list(range(0, 128, 2)))


def test_int4_speculative_output_is_plain_int4_output(near_tie_int4):
    """Row-invariant Linears + row-exact attention: every main row of a speculative pass computes what a
    one-row plain pass computes, bit for bit, so even near-ties resolve the same way."""
    model, streams = near_tie_int4
    engine = Engine(model, None, streams, precision="int4")
    assert engine.exact and engine.row_exact
    for topk in ((1, 1, 1), (2, 2, 1)):
        assert mismatches(engine, topk) == 0
    assert mismatches(engine, (2, 2, 1), batch=True) == 0


def test_the_check_can_fail(near_tie_int4, monkeypatch):
    """Break what makes it exact and the near-ties flip: on the kernel, Linears whose result depends on the
    rows beside them (rounded to bf16 in a wide call); through torch, plain sdpa over all rows."""
    model, streams = near_tie_int4
    engine = Engine(model, None, streams, precision="int4")
    for step in ("layer_front", "layer_back", "layer_step", "layer_stack", "stream_stack"):  # Linears through the patched call
        monkeypatch.setattr(rowinv_steps, step, lambda *a: None)
    if model.lm_head.kernel:
        q4 = rowinv.linear_q4
        monkeypatch.setattr(rowinv, "linear_q4", lambda x, *a: (
            lambda y: y if x.reshape(-1, x.shape[-1]).shape[0] == 1 else y.bfloat16().float())(q4(x, *a)))
    else:
        monkeypatch.setattr(engine.backend, "row_exact", False)  # sdpa over all rows
    assert mismatches(engine, (1, 1, 1)) + mismatches(engine, (2, 2, 1)) > 0


def test_int4_is_refused_on_cuda_and_for_odd_sizes():
    with pytest.raises(SpecstreamError, match="CPU"):
        LoadConfig("x", precision="int4", device="cuda")
    with pytest.raises(SpecstreamError, match="multiples of 32"):
        int4.quantize_groups(torch.randn(4, 48))


def test_a_gguf_base_whose_groups_do_not_all_match_says_so(monkeypatch):
    """int4 is chosen by default on a GGUF-converted base because it is the fp32 model there; where some
    Linears are not the file's own groups (quantized again), loading says so instead of claiming it."""
    from specstream_core.model import default_model, loading

    model = tiny_model("llama", seed=3)
    monkeypatch.setattr(default_model, "gguf_source", lambda base: "/somewhere/model.gguf")
    monkeypatch.setattr(int4, "file_groups", lambda path, m: {})
    with pytest.warns(UserWarning, match=r"only 0 of \d+ Linears are model.gguf's own groups"):
        report = loading.to_int4(model, "converted", kernel=rowinv.available())
    assert report["from_file"] == 0

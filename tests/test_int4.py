"""4-bit CPU decoding (model/int4.py): the kernel's arithmetic, its row invariance, a GGUF file's own
Q4_1 groups, and int4 decoding against transformers' generate on the same int4 model."""

import numpy as np
import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.errors import SpecstreamError
from specstream_core.model import int4
from specstream_core.model.loading import LoadConfig
from tiny_models import hf_greedy, prompts, tiny_model

pytestmark = pytest.mark.skipif(not int4.available(), reason="this torch has no CPU int4 kernel")


def _layer(n=96, k=128, seed=0, keep_rows=False):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    return w, int4.Int4Linear(*int4.quantize_groups(w), keep_rows=keep_rows)


def test_int4_linear_computes_with_its_groups_and_is_row_invariant():
    w, layer = _layer()
    x = torch.randn(9, 128, generator=torch.Generator().manual_seed(1))
    y = layer(x)
    assert y.dtype == torch.float32 and y.shape == (9, 96)
    ref = x.bfloat16().float() @ layer.dequantized().T
    assert torch.allclose(y, ref, atol=0.15, rtol=0.02)  # bf16 products and sums
    assert (layer.dequantized() - w).abs().max() < 0.5 * (w.max() - w.min()) / 15 + 0.05  # within half a step
    for m in range(1, 9):  # a row's result does not depend on how many rows share the pass
        assert torch.equal(layer(x[:m]), y[:m])
        assert torch.equal(layer(x[m:m + 1]), y[m:m + 1])


def test_fused_members_give_their_own_layers_output_in_one_kernel_call(monkeypatch):
    torch.manual_seed(0)
    parts = [int4.quantize_groups(torch.randn(n, 64)) for n in (48, 16, 16)]
    fused = int4.FusedInt4([(*p, None) for p in parts])
    members = [int4.Int4Part(fused, i) for i in range(3)]
    x = torch.randn(2, 3, 64)
    calls = []
    kernel = torch.ops.aten._weight_int4pack_mm_for_cpu
    monkeypatch.setattr(int4.torch.ops.aten, "_weight_int4pack_mm_for_cpu", lambda *a: calls.append(1) or kernel(*a))
    outs = [m(x) for m in members]
    assert len(calls) == 1
    for (q, s, z), out, m in zip(parts, outs, members):
        alone = int4.Int4Linear(q, s, z)(x)
        assert out.shape == alone.shape and torch.allclose(out, alone, atol=1e-5, rtol=1e-3)
        assert torch.allclose(m.dequantized(), int4.dequantize(q, s, z), atol=0.02)
    calls.clear()
    members[2](x)
    assert not calls  # still the same input: sliced from the stored call
    x.mul_(2)  # the same tensor changed in place: computed again
    members[1](x)
    assert len(calls) == 1


def test_int4_rows_is_the_head_cut_to_a_vocabulary():
    _, layer = _layer(n=168, keep_rows=True)  # 168 and 5 rows: not multiples of the kernel's 16
    x = torch.randn(3, 128)
    for idx in (torch.tensor([5, 0, 167, 64, 7]), torch.randperm(168)[:32]):
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
    got_q, scale, zero = int4.from_q4_1(_q4_1_blocks(q, d, m), 6, 64)
    assert np.array_equal(got_q.numpy(), q)
    want = (d.astype(np.float32).repeat(32, 1) * q + m.astype(np.float32).repeat(32, 1)).astype(np.float32)
    assert torch.allclose(int4.dequantize(got_q, scale, zero), torch.from_numpy(want), atol=1e-6)


def _llama_cpp_permute(w, n_head):
    """llama.cpp's convert script stores q/k rows in this order (transformers' GGUF reader undoes it)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_a_gguf_files_own_q4_1_groups_are_used(tmp_path):
    gguf = pytest.importorskip("gguf")
    from gguf import quants

    model = tiny_model("llama", seed=2, hidden=64, layers=2)
    cfg = model.config
    writer = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), "llama")
    names = {v: k for k, v in int4._GGUF_NAMES.items()}
    with torch.no_grad():
        for li, layer in enumerate(model.model.layers):
            for name, linear in layer.named_modules():
                if not isinstance(linear, torch.nn.Linear):
                    continue
                kind = names[name]
                raw = quants.quantize(linear.weight.numpy(), gguf.GGMLQuantizationType.Q4_1)
                # the model's weights become the file's (dequantized), as after transformers' GGUF load
                linear.weight.copy_(torch.from_numpy(quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_1)))
                if kind in ("attn_q", "attn_k"):
                    heads = cfg.num_attention_heads if kind == "attn_q" else cfg.num_key_value_heads
                    raw = _llama_cpp_permute(raw, heads)
                writer.add_tensor(f"blk.{li}.{kind}.weight", raw, raw_shape=raw.shape,
                                  raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    groups = int4.gguf_groups(str(tmp_path / "tiny.gguf"), model)
    assert len(groups) == 7 * 2  # every decoder Linear, q and k rows put back in the model's order
    report = int4.quantize_model(model, groups)
    assert report == {"layers": 7 * 2 + 1, "from_file": 14, "fused": 2 * 2}  # q/k/v and gate/up per layer
    q_proj = model.model.layers[1].self_attn.q_proj
    assert isinstance(q_proj, int4.Int4Part)


@pytest.fixture(scope="module")
def int4_llama(tmp_path_factory):
    from specstream_core.model.loading import quantize_in_memory

    return quantize_in_memory(tiny_model("llama", seed=3), "int4")


def test_int4_plain_decoding_equals_transformers_generate_on_the_int4_model(int4_llama, monkeypatch):
    """Token for token, and with transformers' own attention arithmetic: the row-invariant kernel's attention
    (a different summation order) is not used in int4, whose Linears round activations to bf16."""
    from specstream_core.model import rowinv

    monkeypatch.setattr(rowinv, "attend", lambda *a: pytest.fail("int4 decoding attended through the kernel"))
    assert isinstance(int4_llama.lm_head, int4.Int4Linear)
    engine = Engine(int4_llama, None, None, precision="int4")
    cfg = DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False)
    for ids in prompts(6, seed=4):
        assert engine.generate(ids, cfg).token_ids == hf_greedy(int4_llama, ids, 16)


def _perturbed(model, draft_vocab=None):
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=1, draft_vocab=draft_vocab)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in streams.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return streams


@pytest.fixture(scope="module")
def near_tie_int4():
    """An int4 model with head_dim 64 (as real models) and unscaled random logits: near-ties everywhere,
    so any rounding difference between a speculative and a plain pass flips tokens (without row-exact
    attention 2 of these 20 prompt runs differ; checked by `test_the_check_can_fail`)."""
    from specstream_core.model.loading import quantize_in_memory

    model = quantize_in_memory(tiny_model("llama", seed=5, logit_scale=1.0, hidden=256, layers=4,
                                          num_attention_heads=4, num_key_value_heads=2), "int4")
    return model, _perturbed(model, draft_vocab=list(range(0, 128, 2)))


def _mismatches(engine, topk, batch=False):
    ss = DecodeConfig(mode="ss", max_new_tokens=32, stop_on_eos=False, tree_topk=topk)
    ar = DecodeConfig(mode="ar", max_new_tokens=32, stop_on_eos=False)
    items = prompts(8, seed=6, max_len=60)
    plain = [engine.generate(ids, ar).token_ids for ids in items]
    spec = ([r.token_ids for r in engine.generate_batch(items, ss)] if batch
            else [engine.generate(ids, ss).token_ids for ids in items])
    return sum(a != b for a, b in zip(plain, spec))


def test_int4_speculative_output_is_plain_int4_output(near_tie_int4):
    """Row-invariant Linears + row-exact attention: every main row of a speculative pass computes what a
    one-row plain pass computes, bit for bit, so even near-ties resolve the same way."""
    model, streams = near_tie_int4
    engine = Engine(model, None, streams, precision="int4")
    assert engine.exact and engine.row_exact
    for topk in ((1, 1, 1), (2, 2, 1)):
        assert _mismatches(engine, topk) == 0
    assert _mismatches(engine, (2, 2, 1), batch=True) == 0


def test_the_check_can_fail(near_tie_int4, monkeypatch):
    model, streams = near_tie_int4
    engine = Engine(model, None, streams, precision="int4")
    monkeypatch.setattr(Engine, "row_exact", property(lambda self: False))  # plain sdpa over all rows
    assert _mismatches(engine, (1, 1, 1)) + _mismatches(engine, (2, 2, 1)) > 0


def test_int4_is_refused_on_cuda_and_for_odd_sizes():
    with pytest.raises(SpecstreamError, match="CPU"):
        LoadConfig("x", precision="int4", device="cuda")
    with pytest.raises(SpecstreamError, match="multiples of 32"):
        int4.quantize_groups(torch.randn(4, 48))

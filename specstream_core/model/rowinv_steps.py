"""The row-invariant kernel's fused steps (rowinv.c), for direct layer steps (`direct_layers`): a layer's RoPE
and cache write in one call (`rope_store`), and a single sequence's decoding step through a Llama-form layer
on fp32, bf16 or 4-bit Linears up to its MLP's activation in one call (`layer_front`). Each computes what the modules'
own calls compute, bit for bit (tests/test_direct_layers.py)."""

from __future__ import annotations

import ctypes

import torch

from specstream_core.model import rowinv


def pointers(tensors: list[torch.Tensor]):
    """The tensors' data addresses as a C array (`const float *const *`), for weights that stay in place."""
    return (ctypes.c_void_p * len(tensors))(*(t.data_ptr() for t in tensors))


def rope_store(qkv: torch.Tensor, heads: int, kv_heads: int, cos: torch.Tensor, sin: torch.Tensor,
               k_buf: torch.Tensor, v_buf: torch.Tensor, start: int) -> torch.Tensor:
    """A step's fused q/k/v rows (qkv [B, q, (heads + 2 kv_heads) D], fp32, contiguous) rotated as
    transformers' apply_rotary_pos_emb rotates them (cos, sin [B, q, D], bit for bit), k and v written into
    the cache buffers k_buf, v_buf [B, kv_heads, capacity, D] at slots start .. start + q. Returns the rotated
    queries [B, q, heads, D]."""
    lib = rowinv.library()
    B, q, width = qkv.shape
    d = width // (heads + 2 * kv_heads)
    out = torch.empty(B, q, heads, d)
    lib.rope_store(qkv.data_ptr(), B, q, heads, kv_heads, d, cos.data_ptr(), sin.data_ptr(), out.data_ptr(),
                   k_buf.data_ptr(), v_buf.data_ptr(), k_buf.shape[2], start)
    return out


# the kinds of Linear the layer front takes (rowinv.c's LIN_F32, LIN_BF16, LIN_Q4; LIN_F32B, LIN_BF16B: `rowinv.blocked`;
# LIN_Q4A8: 4-bit against 8-bit activations, `model/int4_a8.py`)
LIN_F32, LIN_BF16, LIN_Q4, LIN_F32B, LIN_BF16B, LIN_Q4A8 = 0, 1, 2, 3, 4, 5


class FrontLinears:
    """A layer's Linears as `layer_front` takes them, made once (the weights stay in place): the parts that write
    q/k/v's columns (one fused call, or q, k, v), o, and the parts that write gate/up's (one, or gate, up); each
    part (kind, weight, scales or None, outputs)."""

    def __init__(self, qkv: list[tuple], o: tuple, gate_up: list[tuple]):
        parts = [*qkv, o, *gate_up]
        self.tensors = [t for p in parts for t in p[1:3] if t is not None]  # kept alive while addresses are used
        self.counts = (len(qkv), len(gate_up))
        self.kind = (ctypes.c_int * len(parts))(*(p[0] for p in parts))
        self.weight = (ctypes.c_void_p * len(parts))(*(p[1].data_ptr() for p in parts))
        self.scales = (ctypes.c_void_p * len(parts))(*(p[2].data_ptr() if p[2] is not None else None for p in parts))
        self.n = (ctypes.c_int64 * len(parts))(*(p[3] for p in parts))
        self.n_qkv = sum(p[3] for p in qkv)
        self.n_gate_up = sum(p[3] for p in gate_up)


def layer_front(h: torch.Tensor, norms: tuple[torch.Tensor, torch.Tensor], eps: float, linears: FrontLinears,
                heads: int, kv_heads: int, pe, cache_slots, attention: tuple[torch.Tensor, torch.Tensor], scaling: float,
                adapters=None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One sequence's decoding step through a Llama-form layer up to its MLP's activation, in one kernel call
    (rowinv.c's layer_front: rmsnorm, the q/k/v call(s), `rope_store`, `attend`, o, the residual add, rmsnorm,
    the gate/up call(s), each as the modules call them). h [1, q, d] fp32 contiguous; norms: the two norms'
    fp32 weights; linears: `FrontLinears` (fp32, bf16 or 4-bit); pe: (cos, sin) [1, q, D]; cache_slots:
    `KVCache.slots`; attention: (spec, keys) as `attend` takes them; adapters: None, or (`pointers` of the
    stream-row adapters' A and B weights of q, k, v, o, gate, up; their rank; the first stream row): rows from
    there on get each adapter's delta as StreamRowLoRA adds it. Returns (h2 = h + attention output, gate/up
    output), or None where the kernel declined."""
    lib = rowinv.library()
    _, q, d = h.shape
    head_dim = linears.n_qkv // (heads + 2 * kv_heads)
    k_buf, v_buf, start, _ = cache_slots
    h2, gu = torch.empty(1, q, d), torch.empty(1, q, linears.n_gate_up)
    (cos, sin), (spec, keys) = pe, attention
    failed = lib.layer_front(h.data_ptr(), q, d, norms[0].data_ptr(), norms[1].data_ptr(), eps, *linears.counts,
                             linears.kind, linears.weight, linears.scales, linears.n, heads, kv_heads, head_dim,
                             cos.data_ptr(), sin.data_ptr(), k_buf.data_ptr(), v_buf.data_ptr(), k_buf.shape[2], start,
                             spec.data_ptr(), keys.data_ptr(), scaling, h2.data_ptr(), gu.data_ptr(),
                             *(adapters if adapters is not None else (None, 0, q)), torch.get_num_threads())
    return None if failed else (h2, gu)

"""The row-invariant kernel's fused steps (csrc/layer_steps.c, csrc/rowwise.c), for direct layer steps
(`direct_layers`): a layer's RoPE and cache write in one call (`rope_store`), and a single sequence's decoding step
through a Llama-form layer on fp32, bf16 or 4-bit Linears up to its MLP's activation in one call (`layer_front`), and
the rest after the activation in another (`layer_back`), a whole layer (`layer_step`) and runs of layers (`layer_stack`,
`stream_stack`). Each computes what the modules' own calls compute, bit for bit (tests/test_direct_layers.py). The
calls take their layers and steps as the structures of `kernels/library.py`, filled here."""

from __future__ import annotations

import ctypes
import os
from typing import NamedTuple

import torch

from specstream_core.kernels import library
from specstream_core.kernels.library import library as _library
from specstream_core.kernels.linears import rowinv


def pointers(tensors: list[torch.Tensor]):
    """The tensors' data addresses as a C array (`const float *const *`), for weights that stay in place."""
    return (ctypes.c_void_p * len(tensors))(*(t.data_ptr() for t in tensors))


def rope_store(qkv: torch.Tensor, heads: int, kv_heads: int, cos: torch.Tensor, sin: torch.Tensor,
               k_buf: torch.Tensor, v_buf: torch.Tensor, start: int) -> torch.Tensor:
    """A step's fused q/k/v rows (qkv [B, q, (heads + 2 kv_heads) D], fp32, contiguous) rotated as
    transformers' apply_rotary_pos_emb rotates them (cos, sin [B, q, D], bit for bit), k and v written into
    the cache buffers k_buf, v_buf [B, kv_heads, capacity, D] at slots start .. start + q. Returns the rotated
    queries [B, q, heads, D]."""
    lib = _library()
    B, q, width = qkv.shape
    d = width // (heads + 2 * kv_heads)
    out = torch.empty(B, q, heads, d)
    lib.rope_store(qkv.data_ptr(), B, q, heads, kv_heads, d, cos.data_ptr(), sin.data_ptr(), out.data_ptr(),
                   k_buf.data_ptr(), v_buf.data_ptr(), k_buf.shape[2], start)
    return out


# the kinds of Linear the layer front takes (rowinv.h's LIN_F32, LIN_BF16, LIN_Q4; LIN_F32B, LIN_BF16B: `rowinv.blocked`;
# LIN_Q4A8: 4-bit against 8-bit activations, `kernels/linears/int4_a8.py`; LIN_BF16X: bf16 on AMX tiles, `amx_tiles.tiled`)
LIN_F32, LIN_BF16, LIN_Q4, LIN_F32B, LIN_BF16B, LIN_Q4A8, LIN_BF16X = 0, 1, 2, 3, 4, 5, 6
LORA_TILES = 1 << 32  # set in an adapter rank: its A and B are bf16 AMX tiles (rowinv.h; layer_steps.c's lora_add)


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


class LayerForm(NamedTuple):
    """A layer's form where it is not Llama's (layer_args' last fields): q/k RMSNorms before RoPE (fp32 weights, their
    eps; `whole`: over the whole projection, OLMo 2, else over each head, Qwen3), `post`: the layer's two norms after
    the attention and after the MLP, before each residual add (OLMo 2), instead of before them, and `fused_adapters`:
    the stream-row adapters' layout."""
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    qk_eps: float = 0.0
    whole: bool = False
    post: bool = False
    fused_adapters: bool = False  # the row adapters are of q/k/v, o and gate/up as one Linear each (Phi-3's)

    def fields(self) -> tuple:
        """layer_args' q_norm, k_norm, qk_eps, qk_whole, post_norms, lora_fused"""
        return (None if self.q_norm is None else self.q_norm.data_ptr(),
                None if self.k_norm is None else self.k_norm.data_ptr(), self.qk_eps, int(self.whole), int(self.post),
                int(self.fused_adapters))


LLAMA_FORM = LayerForm()


def qk_norm(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, q_w: torch.Tensor, k_w: torch.Tensor | None,
            eps: float, whole: bool = False) -> torch.Tensor:
    """q's and k's columns of fused q/k/v rows (qkv [..., (heads + 2 kv_heads) head_dim] fp32) through their RMSNorms,
    in place (layer_steps.c's qk_norm, which the layer steps run before RoPE): each head's values with q_w, k_w
    [head_dim] (Qwen3), or, `whole`, all of a row's q (k) values with q_w [heads head_dim] (OLMo 2). Each row alone, as
    `rowinv.rmsnorm` computes it. Returns qkv."""
    if not qkv.is_contiguous():
        raise ValueError("qk_norm takes contiguous rows")
    ld = qkv.shape[-1]
    _library().qk_norm(qkv.data_ptr(), qkv.numel() // ld, ld, heads, kv_heads, head_dim, q_w.data_ptr(),
                       None if k_w is None else k_w.data_ptr(), eps, int(whole))
    return qkv


def layer_front(h: torch.Tensor, norms: tuple[torch.Tensor, torch.Tensor], eps: float, linears: FrontLinears,
                heads: int, kv_heads: int, pe, cache_slots, attention: tuple[torch.Tensor, torch.Tensor], scaling: float,
                adapters=None, form: LayerForm = LLAMA_FORM) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One sequence's decoding step through a Llama-form layer up to its MLP's activation, in one kernel call
    (layer_steps.c's layer_front: rmsnorm, the q/k/v call(s), `rope_store`, `attend`, o, the residual add, rmsnorm,
    the gate/up call(s), each as the modules call them). h [1, q, d] fp32 contiguous; norms: the two norms'
    fp32 weights; linears: `FrontLinears` (fp32, bf16 or 4-bit); pe: (cos, sin) [1, q, D]; cache_slots:
    `KVCache.slots`; attention: (spec, keys) as `attend` takes them; adapters: None, or (`pointers` of the
    stream-row adapters' A and B weights of q, k, v, o, gate, up; their rank; the first stream row): rows from
    there on get each adapter's delta as StreamRowLoRA adds it; form: `LayerForm` (a layer whose norms come after
    attention, `post`, takes `layer_step` only). Returns (h2 = h + attention output, gate/up output), or None where the
    kernel declined."""
    lib = _library()
    _, q, d = h.shape
    head_dim = linears.n_qkv // (heads + 2 * kv_heads)
    k_buf, v_buf, start, _ = cache_slots
    h2, gu = torch.empty(1, q, d), torch.empty(1, q, linears.n_gate_up)
    lora, rank, n_main = adapters if adapters is not None else (None, 0, q)
    layer = library.LayerArgs(norms[0].data_ptr(), norms[1].data_ptr(), eps, *linears.counts, *_addresses(linears),
                              None if lora is None else ctypes.addressof(lora), rank, 0, None, None, None, None, None,
                              *form.fields())
    step = _step(q, d, heads, kv_heads, head_dim, pe, k_buf.shape[2], start, attention, scaling, n_main, None)
    failed = lib.layer_front(layer, step, h.data_ptr(), k_buf.data_ptr(), v_buf.data_ptr(), h2.data_ptr(), gu.data_ptr())
    return None if failed else (h2, gu)


def _addresses(linears: FrontLinears) -> tuple:
    """The addresses of a `FrontLinears`' arrays of kinds, weights, scales and outputs (layer_args' kind, w, dm, n)."""
    addr = ctypes.addressof
    return addr(linears.kind), addr(linears.weight), addr(linears.scales), addr(linears.n)


def _step(q: int, d: int, heads: int, kv_heads: int, head_dim: int, pe, cap: int, start: int, attention,
          scaling: float, n_main: int, expv: int | None) -> library.StepArgs:
    """What every layer of a step shares, as the kernel's step_args."""
    (cos, sin), (spec, keys) = pe, attention
    return library.StepArgs(q, d, heads, kv_heads, head_dim, cos.data_ptr(), sin.data_ptr(), cap, start, spec.data_ptr(),
                            keys.data_ptr(), scaling, n_main, expv, torch.get_num_threads(), cos.shape[-1])


def draft_linears(front: list[tuple], down: tuple, min_rows: int) -> library.DraftArgs:
    """A layer's draft Linears for its stream rows (`kernels/draft_weights.py`) as the kernel's draft_args: the front's
    parts in `FrontLinears`' order (q, k, v, o, gate, up; or Phi-3's q/k/v, o, gate/up), then down, each (kind, weight,
    scales or None, outputs)."""
    if len(front) not in (6, 3):
        raise ValueError("draft Linears take q, k, v, o, gate and up (or q/k/v, o, gate/up) one call each")
    nq = 3 if len(front) == 6 else 1
    arrays = FrontLinears(front[:nq], front[nq], front[nq + 1:])
    draft = library.DraftArgs(*_addresses(arrays)[:3], down[0], down[1].data_ptr(),
                              None if down[2] is None else down[2].data_ptr(), min_rows)
    draft.keep = (arrays, down)  # the arrays and tensors it points into
    return draft


class BackLinear(NamedTuple):
    """A layer's down projection as `layer_back` takes it: (kind, weight, scales or None, outputs) as in
    `FrontLinears`, and its stream-row adapter (A and B weights, rank, row state) or None."""
    part: tuple
    lora: tuple | None


_exp: list = []  # [address of torch's vector exp for silu_rows, or None], found once


def tile_stream_rows() -> int:
    """Stream rows a step needs for their attention to go on tiles (layer_steps.c's TILE_STREAM_ROWS, which its layer
    steps decide by)."""
    lib = _library()
    return lib.attend_tiles_rows() if lib is not None else 0


def mask_keys(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """What `attend` takes of the keys each query row may see, from an additive float mask [q, keys] (0: may see):
    (spec, keys) with every row's keys listed, as torch's `(mask == 0).nonzero()` lists them, in one kernel call
    instead of ~9 torch ops; None where the kernel cannot take the mask (not fp32 on the CPU)."""
    lib = _library()
    if lib is None or mask.dtype is not torch.float32 or not mask.is_cpu or mask.dim() != 2 or mask.stride(1) != 1:
        return None
    q, keys = mask.shape
    spec, listed = torch.empty(2 * q, dtype=torch.int64), torch.empty(max(q * keys, 1), dtype=torch.int64)
    total = lib.mask_keys(mask.data_ptr(), mask.stride(0), q, keys, spec.data_ptr(), listed.data_ptr())
    return spec, listed[:total]


def kernel_norm(module: torch.nn.Module) -> tuple[torch.Tensor, float] | None:
    """(weight, eps) where `module` is a norm whose forward on fp32 CPU rows is this kernel's `rmsnorm` now (a
    caller may apply it inside a kernel call of its own: the same numbers), else None."""
    w = getattr(module, "weight", None)
    if (not isinstance(module, rowinv.RowInvariantNorm) or w is None or w.dtype is not torch.float32 or not w.is_cpu
            or not w.is_contiguous() or not rowinv.enabled() or (torch.is_grad_enabled() and w.requires_grad)):
        return None
    return w, float(module.variance_epsilon)


class TiledStreams:
    """The kernel's attention (`rowinv.attend`'s call) for an engine whose Linears are on AMX tiles: main rows as
    `rowinv.attend` computes them, stream rows (from the row state's first stream row on) on tiles, as the layer steps
    compute them where a layer's Linears are (csrc/amx.c's `attend_tiles`: bf16 operands, fp32 sums), where a step has
    `tile_stream_rows()` or more. Stream rows only draft, so this changes drafts, never output; main rows are computed
    alone, whatever the stream rows are (pass-cost's bf16 γ = 4 pass ~0.4 ms cheaper, τ unchanged: BENCHMARKS)."""

    def __init__(self, rows):
        self.rows = rows  # the stream parameters' RowState (its n_main: the first stream row of the pass)
        self.min_rows = tile_stream_rows()

    def __call__(self, query, key, value, spec, keys, scaling):
        n = query.shape[1]
        first = n if self.rows is None or self.rows.n_main is None else min(self.rows.n_main, n)
        if n - first < self.min_rows:
            return rowinv.attend(query, key, value, spec, keys, scaling)
        main = rowinv.attend(query[:, :first], key, value, spec[:2 * first], keys, scaling) if first else None
        if first and main is None:
            return None
        streams = self._streams(query[:, first:], key, value, spec[2 * first:], keys, scaling)
        if streams is None:
            return None
        return streams if main is None else torch.cat([main, streams])

    @staticmethod
    def _streams(query, key, value, spec, keys, scaling):
        lib = _library()
        hq, n, d = query.shape
        if (lib is None or query.dtype is not torch.float32 or key.stride() != value.stride() or key.stride(1) != d
                or key.stride(2) != 1 or query.stride(2) != 1):
            return rowinv.attend(query, key, value, spec, keys, scaling)
        out = torch.empty(n, hq, d)
        failed = lib.attend_tiles(query.data_ptr(), query.stride(1), query.stride(0), key.data_ptr(), value.data_ptr(),
                                  key.stride(0), n, hq, key.shape[0], d, spec.data_ptr(), keys.data_ptr(),
                                  float(scaling), out.data_ptr(), torch.get_num_threads())
        if failed in (library.Status.BAD_SHAPE, library.Status.NO_FEATURE):  # not on tiles: the vector code
            return rowinv.attend(query, key, value, spec, keys, scaling)
        return None if failed else out


def is_kernel_attention(fn) -> bool:
    """Whether `fn` is an attention the kernel's layer steps compute as its own (`rowinv.attend`, `TiledStreams`)."""
    return fn is rowinv.attend or isinstance(fn, TiledStreams)


def lora_rows(x: torch.Tensor, at: torch.Tensor, bt: torch.Tensor) -> torch.Tensor | None:
    """A row adapter's delta (x A^T) B^T for fp32 rows x [..., K], from At = A^T [K, r] and Bt = B^T [r, N] (bf16,
    contiguous: `StreamRowLoRA.factors`), as the layer steps add it (layer_steps.c's `lora_rows`); None where the kernel
    declines (rank over 256)."""
    lib = _library()
    k, (r, n) = x.shape[-1], bt.shape
    rows = x.reshape(-1, k)
    if not rows.is_contiguous():
        rows = rows.contiguous()
    out = torch.empty(*x.shape[:-1], n)
    failed = lib.lora_rows(rows.data_ptr(), rows.shape[0], k, at.data_ptr(), bt.data_ptr(), r, n, out.data_ptr(),
                           torch.get_num_threads())
    return None if failed else out


def silu_exp() -> int | None:
    """The address of the vector exp torch's CPU SiLU calls (Sleef's, exported by libtorch_cpu), for the kernel's
    `silu_rows` to compute torch's SiLU bit for bit: where torch runs the vector width of the kernel's build
    (AVX-512: 16 lanes, AVX2: 8); else None (the module's own SiLU then runs)."""
    if not _exp:
        lib = _library()
        lanes = lib.lanes if lib is not None else 0
        name = {("AVX512", 16): "Sleef_expf16_u10", ("AVX2", 8): "Sleef_expf8_u10"}.get(
            (torch.backends.cpu.get_cpu_capability(), lanes))
        try:
            lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
            _exp.append(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value if name else None)
        except (OSError, AttributeError):
            _exp.append(None)
    return _exp[0]


def layer_back(h2: torch.Tensor, act: torch.Tensor, gu: torch.Tensor, up_at: int, down: BackLinear) -> torch.Tensor | None:
    """h2 + down(act * up) for one sequence's decoding step, in one kernel call (layer_steps.c's layer_back: the
    product, the down call, its stream-row adapter's delta on the stream rows, the residual add, each as the
    modules compute it). h2 [1, q, d] (`layer_front`'s), act [1, q, I] (the activation of gate's columns),
    gu: `layer_front`'s gate/up output, whose up columns start at up_at. Returns the layer's output, or None
    where the kernel declined."""
    lib = _library()
    _, q, d = h2.shape
    kind, w, dm, n = down.part
    if not act.is_contiguous():
        act = act.contiguous()
    a_w = b_w = None
    rank, n_main = 0, q
    if down.lora is not None:
        a, b, rank, state = down.lora
        a_w, b_w = a.data_ptr(), b.data_ptr()
        n_main = stream_row(state, q)
    out = torch.empty(1, q, n)
    failed = lib.layer_back(h2.data_ptr(), act.data_ptr(), gu.data_ptr() + up_at * gu.element_size(), gu.shape[-1], q,
                            act.shape[-1], d, kind, w.data_ptr(), None if dm is None else dm.data_ptr(), a_w, b_w, rank,
                            n_main, out.data_ptr(), torch.get_num_threads())
    return None if failed else out


def stream_row(state, q: int) -> int:
    """The first stream row of a step of q rows, by the stream-row adapters' row state (`StreamRowLoRA`): rows from
    there on get the adapters' deltas; q where there are none."""
    return q if state.n_main is None else min(state.n_main, q)


def stack_layer(norms, eps: float, linears: FrontLinears, adapters, down: BackLinear,
                draft: library.DraftArgs | None = None, form: LayerForm = LLAMA_FORM):
    """What a whole layer's step takes of one layer that stays the same from step to step, as the kernel's layer_args:
    a C array holding a pointer to it (what `layer_stack` takes; the structure stays alive with it, the tensors and
    arrays it points into with the layer's step). adapters: `layer_front`'s (pointers, rank, row state) or None; draft:
    the stream rows' draft Linears (`draft_linears`), or None; form: the layer's `LayerForm`."""
    kind, w, dm, _ = down.part
    a_w, b_w = (down.lora[0].data_ptr(), down.lora[1].data_ptr()) if down.lora is not None else (None, None)
    layer = library.LayerArgs(norms[0].data_ptr(), norms[1].data_ptr(), eps, *linears.counts, *_addresses(linears),
                              None if adapters is None else ctypes.addressof(adapters[0]),
                              0 if adapters is None else adapters[1], kind, w.data_ptr(),
                              None if dm is None else dm.data_ptr(), a_w, b_w,
                              None if draft is None else ctypes.addressof(draft), *form.fields())
    layer.keep = (draft, form)
    return (ctypes.POINTER(library.LayerArgs) * 1)(ctypes.pointer(layer))


def layer_stack(layers, h: torch.Tensor, caches: list, heads: int, kv_heads: int, head_dim: int, pe, start: int,
                attention: tuple[torch.Tensor, torch.Tensor], scaling: float, n_main: int,
                pointers: tuple | None = None) -> torch.Tensor | None:
    """One sequence's decoding step through consecutive whole Llama-form layers whose MLP activation is SiLU, in one
    kernel call (layer_steps.c's layer_stack: on each layer in turn `layer_front`, torch's SiLU (`silu_exp`) and
    `layer_back`). layers: a C array of pointers to their `stack_layer`s; caches: each layer's (keys buffer, values
    buffer) of `KVCache.slots`, all written at slot `start`; pe, attention, scaling as `layer_front` takes them;
    n_main: the first stream row (`stream_row`, for layers with row adapters); pointers: None, or the caches'
    addresses as C arrays (keys', values'), made once by the caller. Returns the last layer's output, or None where
    the kernel declined."""
    return _stack(layers, h, caches, heads, kv_heads, head_dim, pe, start, attention, scaling, n_main, pointers)


def layer_step(h: torch.Tensor, layer, heads: int, kv_heads: int, head_dim: int, pe, cache_slots,
               attention: tuple[torch.Tensor, torch.Tensor], scaling: float, n_main: int) -> torch.Tensor | None:
    """One sequence's decoding step through one whole layer (`stack_layer`'s array): layer_stack's call on it
    alone; cache_slots: `KVCache.slots`."""
    return _stack(layer, h, [cache_slots[:2]], heads, kv_heads, head_dim, pe, cache_slots[2], attention, scaling,
                  n_main)


def _stack(layers, h, caches, heads, kv_heads, head_dim, pe, start, attention, scaling, n_main, pointers=None):
    _, q, d = h.shape
    run = _run(layers, caches, pointers, _step(q, d, heads, kv_heads, head_dim, pe, caches[0][0].shape[2], start,
                                               attention, scaling, n_main, silu_exp()))
    out = torch.empty(1, q, d)
    failed = _library().layer_stack(run, h.data_ptr(), out.data_ptr())
    return None if failed else out


def _run(layers, caches: list, pointers: tuple | None, step: library.StepArgs) -> library.LayerRun:
    """A run of layers as the kernel's layer_run: the step, the C array of the layers' `stack_layer` pointers, the
    caches' addresses (`pointer_arrays`, or the caller's own)."""
    k_caches, v_caches = pointers if pointers is not None else pointer_arrays(caches)
    run = library.LayerRun(step, len(caches), ctypes.addressof(layers), ctypes.addressof(k_caches),
                           ctypes.addressof(v_caches))
    run.keep = (layers, k_caches, v_caches)  # the arrays it points into
    return run


def pointer_arrays(caches: list) -> tuple:
    """The (keys, values) buffers' addresses as C arrays (keys', values')."""
    return ((ctypes.c_void_p * len(caches))(*(k.data_ptr() for k, _ in caches)),
            (ctypes.c_void_p * len(caches))(*(v.data_ptr() for _, v in caches)))


def stream_stack(lower, upper, h: torch.Tensor, heads: int, kv_heads: int, head_dim: int, pe, top_pe,
                 carriers: torch.Tensor, embeddings: torch.Tensor, scaling: float, out: torch.Tensor,
                 norm: tuple | None = None) -> torch.Tensor | None:
    """A speculative step's two runs of layers in one kernel call (layer_steps.c's stream_stack): `lower` on the main rows
    h [1, n, d] (RoPE tables pe), the stream rows born from its output (row n + c·γ + j = output[carriers[c]] +
    embeddings[j]), `upper` on all rows (top_pe) into out [1, n + s·γ, d]. lower, upper: `layer_stacks._StackCall`s
    (layers, caches, pointers, start, attention, n_main), both writing the cache at the same slot; norm: None, or the
    model's final RMSNorm (fp32 weight, eps), applied to out in place as `rowinv.rmsnorm` computes it. Returns the lower
    run's output [1, n, d] (the rows the streams were born from), or None where the kernel declined."""
    _, n, d = h.shape
    q = out.shape[1]
    mid = torch.empty(1, n, d)
    emb = embeddings.contiguous()
    carriers = carriers.contiguous()
    gamma = emb.shape[0]
    if carriers.numel() * gamma != q - n:
        raise ValueError(f"{carriers.numel()} carriers of {gamma} streams do not make {q - n} stream rows")
    cap, expv = lower.caches[0][0].shape[2], silu_exp()
    runs = [_run(call.layers, call.caches, call.pointers,
                 _step(rows, d, heads, kv_heads, head_dim, tables, cap, lower.start, call.attention, scaling,
                       call.n_main, expv))
            for call, rows, tables in ((lower, n, pe), (upper, q, top_pe))]
    failed = _library().stream_stack(*runs, h.data_ptr(), carriers.data_ptr(), carriers.numel(), gamma, emb.data_ptr(),
                                     None if norm is None else norm[0].data_ptr(), 0.0 if norm is None else norm[1],
                                     mid.data_ptr(), out.data_ptr())
    return None if failed else mid

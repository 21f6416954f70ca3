"""Direct layer steps: a decoder layer's inference step without the module dispatch around it.

A Llama-family decoder layer runs ~15 modules a step (two norms, the attention and its four
projections, the MLP and its three, the activation) through `nn.Module.__call__`, transformers'
keyword-argument decorators and its attention lookup. On the row-invariant kernel a one-row step of
SmolLM2-135M spends ~3 ms of its ~11 in that Python alone (`pass-cost`'s "rest"; a prototype that
skipped it: 11.2 → 7.7 ms a pass).

A `DirectStep` calls the same modules' `forward` methods, transformers' own `apply_rotary_pos_emb` and
the attention function the library would pick (`ALL_ATTENTION_FUNCTIONS` under the layer's
`_attn_implementation`), in the order of transformers' `LlamaDecoderLayer.forward`, and nothing else:
the same tensors come out. q/k/v and gate/up that are members of one fused int4 call
(`int4.FusedInt4`) are one call; RoPE and the cache write after it are one kernel call
(`rowinv_steps.rope_store`); and a single sequence's decoding step through a layer on the kernel's Linears
(fp32, bf16 or 4-bit), stream-row adapters included, is one kernel call up to its MLP's activation
(`rowinv_steps.layer_front`), the activation staying the module's own, and the down projection (its
stream-row adapter included) and the residual one more call (`rowinv_steps.layer_back`). Where the kernel
computes torch's SiLU bit for bit (`rowinv_steps.silu_exp`), the whole layer is one call (`layer_step`) and a
step's run of such layers one call too (`run_stack`, `rowinv_steps.layer_stack`).
On SmolLM2 in int4 a plain pass takes 8.9 ms this way against 14.6 ms through the modules (`pass-cost`, one thread).
It is no copy of the modeling code to maintain: `bind` checks each model once, by running a prompt and a decoding
step both ways and comparing the results bit for bit, and leaves the library's own modules in charge wherever they
differ (another transformers version, another architecture) or wherever a step needs what only the modules do:
- gradients (training), forward hooks (attention capture), a layer not bound;
- anything but the engines on the row-invariant kernel (`Engine.row_exact`), which alone bind.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
from torch import nn

from specstream_core.model import compat
from specstream_core.kernels import draft_weights
from specstream_core.kernels.steps import layer_forms, layer_stacks, rowinv_steps
from specstream_core.kernels.linears import rowinv

LAYERS = tuple(layer_forms.FORMS)  # Llama's form and the families' forms the kernel's whole-layer steps compute
_ATTR = compat.DIRECT_STEP


def _fused_parts(mods: list[nn.Module]):
    """The one fused int4 call (`int4.FusedInt4`) whose parts (`int4.Int4Part`) the modules are, in order, or None."""
    groups = [getattr(m, "fused", None) for m in mods]
    if any(type(m).__name__ != "Int4Part" or not g for m, g in zip(mods, groups)):
        return None
    fused = groups[0][0]
    if any(g[0] is not fused for g in groups) or [(m.start, m.end) for m in mods] != fused.slices:
        return None
    return fused


class _Front(NamedTuple):
    """What `rowinv_steps.layer_front` takes of one layer (`DirectStep._front_weights`)."""
    norms: tuple[torch.Tensor, torch.Tensor]  # the two norms' fp32 weights (before, or `form.post` after, attention and MLP)
    eps: float
    linears: rowinv_steps.FrontLinears  # q/k/v (fused or three), o, gate/up (fused or two)
    adapters: tuple | None  # `lora_weights`
    slices: list  # gate's and up's columns of the gate/up output
    drafts: list | None  # the kernel parts of q, k, v, o, gate and up's stream-row copies (`draft_weights.kernel_drafts`)
    form: rowinv_steps.LayerForm  # q/k norms, norms after attention and MLP (`layer_forms`)


def _kernel_part(module: nn.Module) -> tuple | None:
    """A Linear as `layer_front` takes it, (kind, weight, scales or None, outputs), when its own forward is one
    call of the kernel it names (no bias, a contiguous fp32 or bf16 weight, or 4-bit on the kernel); else None."""
    if module.__class__.__name__ == "Int4Linear":
        if module.bias is None and module.kernel:
            return (rowinv_steps.LIN_Q4A8 if module.a8 else rowinv_steps.LIN_Q4), module.q4, module.dm, module.out_features
        return None
    if not isinstance(module, rowinv.RowInvariantLinear) or module.bias is not None:
        return None
    w = module.weight
    if w.dtype not in (torch.float32, torch.bfloat16) or not w.is_contiguous() or not w.is_cpu:
        return None
    wb, f32 = module.blocked_weight(), w.dtype is torch.float32
    if module._tiled:  # bf16 on AMX tiles (`amx_tiles.tiled`)
        return rowinv_steps.LIN_BF16X, wb, None, w.shape[0]
    if wb is not None:  # what the module's own forward reads (`RowInvariantLinear.blocked_weight`), as of binding
        return (rowinv_steps.LIN_F32B if f32 else rowinv_steps.LIN_BF16B), wb, None, w.shape[0]
    return (rowinv_steps.LIN_F32 if f32 else rowinv_steps.LIN_BF16), w, None, w.shape[0]


def _parts(modules: list[nn.Module], fused) -> list[tuple] | None:
    """The call(s) that compute `modules`' outputs side by side: their fused int4 call, or one call each."""
    if fused is not None:
        part = _kernel_part(fused.linear)
        return None if part is None else [part]
    parts = [_kernel_part(m) for m in modules]
    return None if any(p is None for p in parts) else parts


class DirectStep:
    """One decoder layer's inference step: `step(h, mask, pe, cache)` equals `compat.run_layer` on it."""

    def __init__(self, layer: nn.Module):
        attn, parts = layer.self_attn, layer_forms.parts(layer)
        self.layer, self.attn, self.parts = layer, attn, parts
        self.llama = parts.llama  # Llama's form: where the kernel's steps cannot take a step, this step's modules do
        self.norm1, self.norm2 = parts.norms[0].forward, parts.norms[1].forward
        self.head_dim, self.layer_idx, self.scaling = attn.head_dim, attn.layer_idx, attn.scaling
        rope = layer_forms.kernel_rope(attn)  # the library's own, where it is Llama's rotation
        self.qkv = _fused_parts(parts.qkv)
        self.projections = tuple(m.forward for m in parts.qkv)
        self.o_proj = parts.o.forward
        self.gate_up = _fused_parts(parts.gate_up)
        self.down, self.act = parts.down.forward, parts.act
        self.gate, self.up = (m.forward for m in parts.gate_up) if len(parts.gate_up) == 2 else (None, None)
        self.functions = layer_forms.attention_functions(attn)
        self.heads, self.kv_heads = attn.config.num_attention_heads, attn.config.num_key_value_heads
        self.widths = [self.head_dim * n for n in (self.heads, self.kv_heads, self.kv_heads)]
        self.rope = rope
        kernel_rope = rowinv.available() and rope is not None  # what rope_store computes
        # q/k/v (one int4 call, or q's, k's and v's side by side) whose rows RoPE and the cache write can take in one
        # kernel call
        self.stores = (kernel_rope and self.llama and layer_forms.is_llama_rope(rope)
                       and (self._stacked(self.qkv) if self.qkv is not None
                            else [getattr(getattr(m, "base", m), "out_features", None) for m in parts.qkv] == self.widths))
        self.front = self._front_weights(parts) if kernel_rope else None
        self.back = self._back_weights(parts.down) if self.front is not None else None
        fused = self.qkv is not None or self.gate_up is not None  # int4's fused calls: one part, several copies
        draft = (draft_weights.kernel_drafts(self.front.drafts, parts.down, _kernel_part, len(self.front.linears.n),
                                             fused)
                 if self.back is not None else None)
        # the whole step one kernel call: SiLU as torch computes it (`rowinv_steps.silu_exp`), the down projection's
        # adapter (if any) of the front's rank and rows
        self.whole = (self.back is not None and _is_silu(parts.act) and rowinv_steps.silu_exp() is not None
                      and (self.back.lora is None) == (self.front.adapters is None)
                      and (self.back.lora is None or (self.back.lora[2] == self.front.adapters[1]
                                                      and self.back.lora[3] is self.front.adapters[2])))
        # draft Linears run in whole steps only; so do the other families' forms (layer_back has no post-norm)
        if draft is False or ((draft is not None or not self.llama) and not self.whole):
            self.front = self.back = None
            self.whole = False
        self.stack_args = (rowinv_steps.stack_layer(self.front.norms, self.front.eps, self.front.linears,
                                                    self.front.adapters, self.back, draft, self.front.form)
                           if self.whole else None)
        self.stack_memo: tuple | None = None  # (the steps of a run that starts here, `layer_stacks` made of them)
        self.impl_memo: tuple | None = None  # (the configs of a run that starts here, the attention implementation named)

    def _stacked(self, qkv) -> bool:
        """A fused q/k/v call whose rows are q's, k's and v's heads in order (what the kernel steps read)."""
        return qkv is not None and [b - a for a, b in qkv.slices] == self.widths

    def _front_weights(self, parts: layer_forms.LayerParts) -> "_Front | None":
        """What `rowinv_steps.layer_front` takes of this layer, where it can take the layer: q/k/v, o and
        gate/up without biases on the kernel (fp32 or bf16 weights, or 4-bit; q/k/v and gate/up one fused int4
        call each or one call per Linear, with q's, k's and v's heads in order), row-invariant norms with fp32
        weights and one epsilon, and either no stream-row adapters or all of q/k/v/o/gate/up's on the kernel
        (`lora_weights`; q/k/v and gate/up one Linear each, as Phi-3's: none); q/k norms (where the form has them) also
        row-invariant with fp32 weights; else None."""
        wrapped = [*parts.qkv, parts.o, *parts.gate_up]
        nq = len(parts.qkv)
        bases = [getattr(m, "base", m) if type(m).__name__ == "StreamRowLoRA" else m for m in wrapped]
        qkv_fused, gate_up_fused = _fused_parts(bases[:nq]), _fused_parts(bases[nq + 1:])
        qkv, o, gate_up = _parts(bases[:nq], qkv_fused), _kernel_part(bases[nq]), _parts(bases[nq + 1:], gate_up_fused)
        norms = parts.norms
        qk = [n for n in (parts.q_norm, parts.k_norm) if n is not None]
        if (qkv is None or o is None or gate_up is None or self.head_dim > 512
                or (qkv_fused is not None and not self._stacked(qkv_fused))
                or (qkv_fused is None and [p[3] for p in qkv] not in (self.widths, [sum(self.widths)]))
                or (gate_up_fused is None and len(gate_up) == 2 and gate_up[0][3] != gate_up[1][3])
                or (len(gate_up) == 1 and gate_up[0][3] % 2)
                or not all(_kernel_norm_weight(n) for n in (*norms, *qk))
                or norms[0].variance_epsilon != norms[1].variance_epsilon
                or len({n.variance_epsilon for n in qk}) > 1):
            return None
        adapters = lora_weights([m for m in wrapped if m is not getattr(m, "base", m)], len(wrapped))
        if adapters is False:
            return None
        width = gate_up[0][3] // (2 if len(gate_up) == 1 else 1) if gate_up_fused is None else None
        slices = gate_up_fused.slices if gate_up_fused is not None else [(0, width), (width, 2 * width)]
        drafts = [getattr(m, "draft", None) for m in wrapped]
        form = rowinv_steps.LayerForm(*(n.weight if n is not None else None for n in (parts.q_norm, parts.k_norm)),
                                      float(qk[0].variance_epsilon) if qk else 0.0, parts.whole, parts.post,
                                      len(wrapped) == 3)
        return _Front((norms[0].weight, norms[1].weight), float(norms[0].variance_epsilon),
                      rowinv_steps.FrontLinears(qkv, o, gate_up), adapters, slices,
                      None if all(d is None for d in drafts) else [_kernel_part(d) if d is not None else None for d in drafts],
                      form)

    @staticmethod
    def _back_weights(down: nn.Module) -> "rowinv_steps.BackLinear | None":
        """What `rowinv_steps.layer_back` takes of the down projection, where it can: no bias, on the kernel, and its
        stream-row adapter (if any) on the kernel (`lora_weights`); else None."""
        base = down.base if type(down).__name__ == "StreamRowLoRA" else down
        part = _kernel_part(base)
        if part is None:
            return None
        if base is down:
            return rowinv_steps.BackLinear(part, None)
        factors = lora_weights([down], 1, pointers=False)
        return None if factors is False else rowinv_steps.BackLinear(part, (*factors[0], factors[1], down.state))

    def usable(self) -> bool:
        """The modules would add nothing: no gradients, no hooks (attention capture adds one)."""
        return not (torch.is_grad_enabled() or self.attn._forward_hooks or self.layer._forward_hooks
                    or self.layer._forward_pre_hooks)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.qkv is None:
            return tuple(p(x) for p in self.projections)
        y = self.qkv.output(x)
        return tuple(y[..., a:b] for a, b in self.qkv.slices)

    def _slots(self, x: torch.Tensor, pe, cache):
        """Where this step's k and v go in the cache (`KVCache.slots`), when the kernel steps can take it: fp32
        CPU rows, fp32 RoPE tables for every row, a cache whose sequences share a length, the kernel on."""
        cos, sin = pe
        slots = getattr(cache, "slots", None)
        if (slots is None or not x.is_cpu or x.dtype is not torch.float32 or cos.dtype is not torch.float32
                or cos.shape[:2] != x.shape[:2] or not (cos.is_contiguous() and sin.is_contiguous())
                or not rowinv.enabled()):
            return None
        return slots(self.layer_idx, x.shape[1])

    def _store(self, x: torch.Tensor, pe, cache):
        """q, k, v as the attention takes them, after one kernel call that rotates q and k and writes k and v
        into the cache (`rowinv_steps.rope_store`); None where the kernel cannot take this step."""
        where = self._slots(x, pe, cache)
        if where is None:
            return None
        k_buf, v_buf, start, end = where
        qkv = self.qkv.output(x) if self.qkv is not None else torch.cat(self._project(x), dim=-1)
        q = rowinv_steps.rope_store(qkv.contiguous(), self.heads, self.kv_heads, *pe, k_buf, v_buf, start)
        return q.transpose(1, 2), k_buf[:, :, :end], v_buf[:, :, :end]

    def kernel_step(self, h: torch.Tensor, mask, pe, cache):
        """(this layer's cache slots, the kernel attention's (spec, keys)) where one sequence's decoding step can go
        through the kernel's layer calls (its attention the kernel's: `compat.kernel_step_keys`); else None."""
        B, q, _ = h.shape
        where = self._slots(h, pe, cache) if B == 1 and h.is_contiguous() else None
        kernel = compat.kernel_step_keys(self.attn, mask, 1, q, where[3]) if where is not None else None
        return None if kernel is None or not rowinv_steps.is_kernel_attention(kernel[0]) else (where, kernel[1][0])

    def _front(self, h: torch.Tensor, mask, pe, cache):
        """(h + attention, the gate/up output) of one sequence's decoding step through `rowinv_steps.layer_front`,
        or (the layer's output, None) through `rowinv_steps.layer_step` where the layer is `whole`, where
        `kernel_step` can take the step; else None."""
        step = self.kernel_step(h, mask, pe, cache)
        if step is None:
            return None
        (where, attention), f, q = step, self.front, h.shape[1]
        n_main = q if f.adapters is None else rowinv_steps.stream_row(f.adapters[2], q)  # stream rows get the deltas
        if self.whole:  # the layer's output, no gate/up to finish
            out = rowinv_steps.layer_step(h, self.stack_args, self.heads, self.kv_heads, self.head_dim, pe, where,
                                          attention, self.scaling, n_main)
            if out is not None:
                return out, None
        if not self.llama:  # the other forms: whole layers only
            return None
        adapters = None if f.adapters is None else (f.adapters[0], f.adapters[1], n_main)
        return rowinv_steps.layer_front(h, f.norms, f.eps, f.linears, self.heads, self.kv_heads, pe, where, attention,
                                        self.scaling, adapters)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up is None:
            return self.down(self.act(self.gate(x)) * self.up(x))
        y = self.gate_up.output(x)
        (a, b), (c, d) = self.gate_up.slices
        return self.down(self.act(y[..., a:b]) * y[..., c:d])

    def __call__(self, h: torch.Tensor, mask, pe, cache) -> torch.Tensor | None:
        """The layer's output, or None where its attention is one the library finds otherwise (eager)."""
        attend = self.functions.get(self.attn.config._attn_implementation)
        if attend is None:
            return None
        # transformers' LlamaDecoderLayer.forward → LlamaAttention.forward → LlamaMLP.forward, step by step
        fronted = self._front(h, mask, pe, cache) if self.front is not None else None
        if fronted is not None:  # up to the MLP's activation in one kernel call; the rest as the modules do it
            h, y = fronted
            if y is None:  # the whole layer (`layer_step`)
                return h
            (a, b), (c, d) = self.front.slices
            act = self.act(y[..., a:b])
            out = rowinv_steps.layer_back(h, act, y, c, self.back) if self.back is not None else None
            return out if out is not None else h + self.down(act * y[..., c:d])
        if not self.llama:  # the step is not one the kernel takes: the library's modules compute it
            return None
        x = self.norm1(h)
        stored = self._store(x, pe, cache) if self.stores else None
        if stored is not None:
            q, k, v = stored
        else:
            shape = (*x.shape[:-1], -1, self.head_dim)
            q, k, v = (t.view(shape).transpose(1, 2) for t in self._project(x))
            q, k = self.rope(q, k, *pe)
            if cache is not None:
                k, v = cache.update(k, v, self.layer_idx)
        out, _ = attend(self.attn, q, k, v, mask, dropout=0.0, scaling=self.scaling, position_ids=None, use_cache=False)
        h = h + self.o_proj(out.reshape(*x.shape[:-1], -1).contiguous())
        return h + self._mlp(self.norm2(h))


def run_stack(layers, h: torch.Tensor, mask, pe, cache) -> torch.Tensor | None:
    """Consecutive layers' decoding step in one kernel call (`rowinv_steps.layer_stack`), where each has a whole-layer
    direct step that may run now (`DirectStep.whole`, `usable`, one attention implementation), their adapters share
    one row state and the step is one the first layer's `_front` would take; else None (the caller runs them one by
    one). The same kernel calls as the steps one by one, so the same numbers, less ~10 µs of Python a layer."""
    ready = layer_stacks.stack_ready(layers)
    call = layer_stacks.stack_call(ready, h, mask, pe, cache) if ready is not None else None
    if call is None:
        return None
    first = ready[0]
    return rowinv_steps.layer_stack(call.layers, h, call.caches, first.heads, first.kv_heads, first.head_dim, pe,
                                    call.start, call.attention, first.scaling, call.n_main, call.pointers)


def _kernel_norm_weight(norm: nn.Module) -> bool:
    """A norm the kernel computes as the module does (`rowinv.RowInvariantNorm`), with a contiguous fp32 weight."""
    return isinstance(norm, rowinv.RowInvariantNorm) and norm.weight.dtype is torch.float32 and norm.weight.is_contiguous()


def _is_silu(act) -> bool:
    """An activation module that is torch's SiLU (nn.SiLU, or transformers' SiLUActivation, which calls it)."""
    return isinstance(act, nn.SiLU) or (type(act).__name__ == "SiLUActivation" and type(act).__module__.startswith("transformers"))


def lora_weights(adapters: list[nn.Module], count: int, pointers: bool = True):
    """The stream-row adapters (`StreamRowLoRA`) of q, k, v, o, gate and up (or down) as `layer_front` takes them: (their
    A and B weights in order, A^T and B^T in bf16 (`factors`) or all AMX tiles (`tiled_factors`): addresses, or tensors where not `pointers`; the
    rank, LORA_TILES set for tiles; their row state), or None where the layer has none, or False where not all there,
    on the kernel, of one rank and row state."""
    if not adapters:
        return None
    weights = [w for m in adapters for w in (m.lora_A, m.lora_B)]
    rank = adapters[0].lora_A.out_features
    if (len(adapters) != count or any(m.state is not adapters[0].state or m.lora_A.out_features != rank
                                      for m in adapters)
            or not all(isinstance(w, rowinv.RowInvariantLinear) and w.bias is None and w.weight.dtype is torch.float32
                       and w.weight.is_contiguous() for w in weights)):
        return False
    tiles = [m.tiled_factors() for m in adapters]
    if any(t is not None for t in tiles) and any(t is None for t in tiles):  # some on tiles: no one call does it
        return False
    tensors = [t for pair in (tiles if tiles[0] is not None else [m.factors() for m in adapters]) for t in pair]
    rank |= rowinv_steps.LORA_TILES if tiles[0] is not None else 0
    return (rowinv_steps.pointers(tensors) if pointers else tensors), rank, adapters[0].state


def step_of(layer: nn.Module) -> DirectStep | None:
    """The layer's bound direct step, when it may run now."""
    step = getattr(layer, _ATTR, None)
    return step if step is not None and step.usable() else None


def unbind(layers) -> None:
    for layer in layers:
        layer.__dict__.pop(_ATTR, None)


def bind(layers, check, reference: list | None = None) -> bool:
    """Give every decoder layer (a model's, all of Llama's form) a direct step, if `check()` finds the outputs
    unchanged by them: check() -> the outputs of a fixed computation, called once with the direct steps and once
    without, and the two must be equal bit for bit. reference: those outputs as the library's modules gave them
    elsewhere (an engine image's layers have no modules to run: `decoding.engine_image`), compared with in place of
    the second call. Returns whether the steps stay bound."""
    if not layers or any(type(layer).__name__ not in LAYERS or layer.self_attn.config._attn_implementation
                         not in layer_forms.attention_functions(layer.self_attn) for layer in layers):
        return False
    try:  # a layer of another family's form keeps a step only where it is a whole kernel layer (else it adds nothing)
        made = [(layer, DirectStep(layer)) for layer in layers]
        layers, steps = [m[0] for m in made if m[1].llama or m[1].whole], [m[1] for m in made if m[1].llama or m[1].whole]
        for layer, step in zip(layers, steps):
            layer.__dict__[_ATTR] = step
        direct = check()
        unbind(layers)
        library = check() if reference is None else reference
        same = len(direct) == len(library) and all(torch.equal(a, b) for a, b in zip(direct, library))
    except (AttributeError, TypeError, RuntimeError, ValueError) as exc:  # another layout: the modules run
        unbind(layers)
        warnings.warn(f"direct layer steps are off for this model ({type(exc).__name__}: {exc})", stacklevel=2)
        return False
    if same:
        for layer, step in zip(layers, steps):
            layer.__dict__[_ATTR] = step
    else:
        warnings.warn("direct layer steps are off for this model: they did not reproduce its layers bit for bit",
                      stacklevel=2)
    return same and bool(steps)

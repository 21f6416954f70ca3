"""Runs of consecutive decoder layers as one kernel call: what stays the same from step to step for a run of bound
direct steps (`direct_layers.DirectStep`), made once (the C array of their `rowinv_steps.stack_layer`s, their caches'
addresses), what a step adds (its cache slot, the keys each row sees, the first stream row), and a speculative step's
two runs with the stream rows' birth between them in one call (`run_stream_stack`, `rowinv_steps.stream_stack`).
`direct_layers.run_stack` makes a plain step's run one call (`rowinv_steps.layer_stack`)."""

from __future__ import annotations

import ctypes
import weakref
from typing import NamedTuple

import torch

from specstream_core.model import compat
from specstream_core.kernels import library
from specstream_core.kernels.steps import rowinv_steps


def stack_ready(layers) -> tuple | None:
    """(the first step, the C array of the steps' `stack_layer`s, their adapters' row state or None) where the layers
    can run as one `layer_stack` call now (each a whole-layer direct step that may run, one attention implementation
    the kernel's steps serve, one row state); else None. What stays the same from step to step is kept."""
    steps = tuple(getattr(layer, compat.DIRECT_STEP, None) for layer in layers)
    if len(steps) < 2 or any(s is None or not s.whole or s.front is None or not s.usable() for s in steps):
        return None
    first = steps[0]
    if first.stack_memo is None or first.stack_memo[0] != steps:  # what stays the same for this run of steps, once
        first.stack_memo = (steps, _stacked_run(steps))
    run = first.stack_memo[1]
    if run is None or first.functions.get(_one_implementation(first, steps)) is None:
        return None
    return first, *run


class _StackCall(NamedTuple):
    layers: object  # the C array of `library.LayerArgs` pointers (`rowinv_steps.stack_layer`)
    caches: list  # each layer's (keys buffer, values buffer)
    pointers: tuple | None  # (their keys buffers' addresses, their values buffers' addresses) as C arrays, or None
    start: int  # the first cache slot this step writes
    attention: tuple  # (spec, keys) as the kernel's attention takes them
    n_main: int  # the first stream row


_POINTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # cache -> {(first layer, count): (buffer, ...)}


def _cache_pointers(cache, steps: tuple) -> tuple[list, tuple]:
    """(each step's layer's (keys, values) buffers, their addresses as C arrays), made once per cache and run of
    layers (a cache's buffers stay where they are; a new buffer makes them again)."""
    memo = _POINTERS.setdefault(cache, {})
    run = (steps[0].layer_idx, len(steps))
    kept = memo.get(run)
    if kept is None or kept[0] is not cache.buffer:
        caches = [(cache.keys[s.layer_idx], cache.values[s.layer_idx]) for s in steps]
        kept = memo[run] = (cache.buffer, caches, rowinv_steps.pointer_arrays(caches))
    return kept[1], kept[2]


def stack_call(ready: tuple, h: torch.Tensor, mask, pe, cache) -> _StackCall | None:
    """What a `layer_stack` call of `stack_ready`'s run takes for this step of rows h [1, q, d] (only its shape,
    dtype and device are read), or None where the step is not one the kernel's attention serves."""
    first, array, state = ready
    step = first.kernel_step(h, mask, pe, cache)
    if step is None:
        return None
    (where, attention), q = step, h.shape[1]
    n_main = q if state is None else rowinv_steps.stream_row(state, q)
    steps = first.stack_memo[0]
    if isinstance(getattr(cache, "buffer", None), torch.Tensor):  # a KVCache: its buffers' addresses, kept
        caches, pointers = _cache_pointers(cache, steps)
    else:
        caches, pointers = [cache.slots(s.layer_idx, q)[:2] for s in steps], None
    return _StackCall(array, caches, pointers, where[2], attention, n_main)


def stream_stack_ready(lower, upper) -> tuple | None:
    """(`stack_ready` of the lower layers, of the upper ones) where a speculative step's two runs of layers can go
    through the kernel as one call (`run_stream_stack`), else None."""
    low = stack_ready(lower)
    up = stack_ready(upper) if low is not None else None
    return None if up is None else (low, up)


def run_stream_stack(ready: tuple, h: torch.Tensor, mask, pe, top_mask, top_pe, cache, carriers: torch.Tensor,
                     embeddings: torch.Tensor, norm: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A speculative step's layers in one kernel call (`rowinv_steps.stream_stack`): the lower layers on the main rows
    h [1, n, d] (mask, pe), the stream rows born from their output as `msa._with_stream_rows` makes them (carriers [s]
    main-row indices, embeddings [γ, d]), the upper layers on all n + s·γ rows (top_mask, top_pe); ready:
    `stream_stack_ready` of the two runs; norm: None, or the final norm's (weight, eps) as `rowinv_steps.kernel_norm`
    gives them, applied to the output. Returns (the main rows entering the upper layers [1, n, d], the upper layers' output
    [1, n + s·γ, d]), or None where a run's step is not one the kernel serves (the caller then runs the pieces itself).
    The same kernel calls as `run_stack` on each run, so the same numbers, without the Python between them."""
    if h.shape[0] != 1 or embeddings.dtype is not torch.float32 or carriers.dtype is not torch.int64:
        return None
    low, up = ready
    n, d = h.shape[1], h.shape[2]
    out = torch.empty(1, n + carriers.numel() * embeddings.shape[0], d)
    first = low[0]
    call_low = stack_call(low, h, mask, pe, cache)
    call_up = stack_call(up, out, top_mask, top_pe, cache) if call_low is not None else None
    if call_up is None or call_up.start != call_low.start:
        return None
    mid = rowinv_steps.stream_stack(call_low, call_up, h, first.heads, first.kv_heads, first.head_dim, pe, top_pe,
                                    carriers, embeddings, first.scaling, out, norm)
    return None if mid is None else (mid, out)


def _stacked_run(steps: tuple) -> tuple | None:
    """(the C array of whole steps' `stack_layer`s, their stream-row adapters' row state or None), or None where the
    adapters of the steps have more than one row state."""
    states = {id(s.front.adapters[2]): s.front.adapters[2] for s in steps if s.front.adapters is not None}
    if len(states) > 1:
        return None
    array = (ctypes.POINTER(library.LayerArgs) * len(steps))(*(s.stack_args[0] for s in steps))
    return array, next(iter(states.values()), None)


def _one_implementation(first, steps: tuple) -> str | None:
    """The attention implementation all `steps` name, or None where they differ. Reading it is slow on transformers'
    configs (~2 µs, each layer has its own copy), so the answer is kept with the config objects it was read from:
    implementations change by giving a layer another config (`compat.set_attention_implementation`)."""
    configs = tuple(s.attn.config for s in steps)
    memo = first.impl_memo
    if memo is not None and len(memo[0]) == len(configs) and all(a is b for a, b in zip(memo[0], configs)):
        return memo[1]
    impls = {c._attn_implementation for c in configs}
    first.impl_memo = (configs, next(iter(impls)) if len(impls) == 1 else None)
    return first.impl_memo[1]

"""The attention implementations the engine registers with transformers' `AttentionInterface`, and the
per-thread scope the decoding contexts set for them (part of the transformers glue: `compat` re-exports them).

- shared-prefix attention: n continuations of one prompt, its K/V stored once (`SharedPrefixCache`);
- row-exact attention: each main row of a pass computed as a one-row pass would compute it.
"""

from __future__ import annotations

import copy
import threading
from contextlib import contextmanager
from typing import Callable, NamedTuple

import torch
from torch import nn


def set_attention_implementation(layer: nn.Module, impl: str) -> None:
    """Give one layer's attention its own config copy with another backend (eager returns weights)."""
    attn = layer.self_attn
    cfg = copy.copy(attn.config)
    cfg._attn_implementation = impl
    attn.config = cfg


# ---- shared-prefix attention (n continuations of one prompt, its K/V stored once) ----------------
SHARED_PREFIX_ATTENTION = "specstream_shared_prefix"
_scope = threading.local()  # per thread (the lab serves visitors from threads): what the contexts below set
_scope.shared_prefix = None  # set by `shared_prefix_attention`: layer_idx -> (keys, values) [H_kv, P, D]


def _shared_prefix_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Exact attention over [shared prefix | per-row suffix]: scores of both concatenated, one softmax.

    query [B, Hq, q, D]; key/value: each row's suffix [B, H_kv, S, D] (what the cache returned); the
    prefix [H_kv, P, D] is shared by all rows and never expanded: every row's queries meet it in one
    GEMM. attention_mask: additive [B, 1, q, P + S]. Returns [B, q, Hq, D] like transformers' sdpa.
    """
    shared_prefix = getattr(_scope, "shared_prefix", None)
    if shared_prefix is None:  # not inside a shared-prefix decoding: plain sdpa
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    pk, pv = shared_prefix(module.layer_idx)  # [H_kv, P, D]
    B, Hq, q, D = query.shape
    kv_heads, P = pk.shape[0], pk.shape[1]
    S = key.shape[2]
    g = Hq // kv_heads  # query heads per key/value head (head h uses kv head h // g, as repeat_kv)
    scaling = scaling if scaling is not None else D ** -0.5
    qg = query.reshape(B, kv_heads, g * q, D)
    # prefix scores: all rows' queries against the one prefix, [H_kv, B*g*q, D] @ [H_kv, D, P]
    q_rows = qg.transpose(0, 1).reshape(kv_heads, B * g * q, D)
    s_prefix = torch.matmul(q_rows, pk.transpose(-1, -2)).reshape(kv_heads, B, g * q, P).transpose(0, 1)
    s_suffix = torch.matmul(qg, key.transpose(-1, -2))  # [B, H_kv, g*q, S]
    scores = torch.cat([s_prefix, s_suffix], dim=-1).reshape(B, kv_heads, g, q, P + S) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, None, :, : P + S]  # [B, 1, 1, q, P+S]
    probs = scores.softmax(dim=-1, dtype=torch.float32).to(query.dtype).reshape(B, kv_heads, g * q, P + S)
    p_rows = probs[..., :P].transpose(0, 1).reshape(kv_heads, B * g * q, P)
    out = torch.matmul(p_rows, pv).reshape(kv_heads, B, g * q, D).transpose(0, 1)  # [B, H_kv, g*q, D]
    out = out + torch.matmul(probs[..., P:], value)
    return out.reshape(B, Hq, q, D).transpose(1, 2).contiguous(), None


def register_shared_prefix_attention() -> str:
    """Register the shared-prefix attention with transformers' `AttentionInterface` (idempotent)."""
    from transformers import AttentionInterface

    if SHARED_PREFIX_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(SHARED_PREFIX_ATTENTION, _shared_prefix_forward)
    return SHARED_PREFIX_ATTENTION


@contextmanager
def shared_prefix_attention(layers, prefix_kv):
    """Every decoder layer (`layers`) attends over [prefix_kv(layer) | what the cache returns] while inside.

    prefix_kv: layer_idx -> (keys, values) [H_kv, P, D] (`SharedPrefixCache.prefix_kv`). The layers'
    attention configs are swapped for copies naming the registered backend and restored on exit.
    """
    name = register_shared_prefix_attention()
    saved = [(layer, layer.self_attn.config) for layer in layers]
    for layer, _ in saved:
        set_attention_implementation(layer, name)
    previous, _scope.shared_prefix = getattr(_scope, "shared_prefix", None), prefix_kv
    try:
        yield
    finally:
        _scope.shared_prefix = previous
        for layer, cfg in saved:
            layer.self_attn.config = cfg


# ---- row-exact attention (a main row's result does not depend on the other rows of its pass) -----
ROW_EXACT_ATTENTION = "specstream_row_exact"


class _RowExact(NamedTuple):
    """What `row_exact_attention` sets for the layers inside it."""
    state: object  # the stream parameters' RowState (which rows are main rows), or None
    per_row: bool  # a decoding step: each main row its own call
    memo: dict  # kind -> [(mask, what was computed of it)]: shared by the layers of one pass (`_memo`)
    causal_prompt: bool  # a prefill of one prompt on an empty cache
    kernel: Callable | None  # the row-invariant kernel's attention (rowinv.attend) for decoding steps, or None
    kernel_keys: Callable | None  # what lists a mask's keys for it (rowinv_steps.mask_keys), or None: torch's ops
    kernel_prefill: bool = False  # a prefill's rows go through `kernel` too, where it takes them


MEMO_MASKS = 4  # masks a memo keeps per kind: a pass has one, or one per distinct window (`compat.PerLayer`)


def _memo(kind: str, mask: torch.Tensor | None):
    """What was computed of `mask` (this very tensor) for `kind` inside the current `row_exact_attention`, or None:
    the layers of one pass share their mask (two or more where layers differ in window, alternating)."""
    if mask is None:
        return None
    return next((value for m, value in _scope.row_exact.memo.get(kind, ()) if m is mask), None)


def _remember(kind: str, mask: torch.Tensor | None, value):
    """Keep `value` as what was computed of `mask` for `kind` (the tensor itself held: its identity is the key)."""
    if mask is not None:
        kept = _scope.row_exact.memo.setdefault(kind, [])
        kept.append((mask, value))
        del kept[:-MEMO_MASKS]
    return value


def _sdpa(module, query, key, value, mask, scaling, dropout, **kwargs) -> torch.Tensor:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)[0]


def _visible_keys(mask: torch.Tensor | None, B: int, n: int, keys: int) -> list[list]:
    """Per row b and main row i: the number of keys when it sees a prefix, else the index of those it
    sees. Computed once per mask (the layers of one pass share their mask)."""
    seen = _memo("seen", mask)
    if seen is not None:
        return seen
    out = []
    for b in range(B):
        row = []
        for i in range(n):
            if mask is None:
                row.append(keys)
                continue
            seen = (mask[b, 0, i] == 0).nonzero()[:, 0]
            row.append(seen.numel() if not seen.numel() or int(seen[-1]) == seen.numel() - 1 else seen)
        out.append(row)
    return _remember("seen", mask, out)


def _kernel_keys(mask: torch.Tensor | None, B: int, q: int, keys: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per row b, what the kernel's attention takes (rowinv.attend): spec (count, offset) per query row and
    the keys each row sees, one list after another, in index order. Built once per mask, with no loop
    over rows (the layers of one pass share their mask)."""
    listed = _memo("kernel_keys", mask)
    if listed is not None:
        return listed
    out = []
    for b in range(B):
        if mask is None:  # every row sees every key: a prefix
            out.append((torch.tensor([keys, -1] * q, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)))
            continue
        lister = _scope.row_exact.kernel_keys
        listed = lister(mask[b, 0, :q, :keys]) if lister is not None else None
        if listed is not None:
            out.append(listed)
            continue
        vis = mask[b, 0, :q, :keys] == 0
        counts = vis.sum(-1)
        spec = torch.stack([counts, counts.cumsum(0) - counts], -1).reshape(-1)
        out.append((spec.contiguous(), vis.nonzero()[:, 1].contiguous()))
    return _remember("kernel_keys", mask, out)


def _kernel_rows(attend: Callable, query, key, value, mask, scaling) -> torch.Tensor | None:
    """All rows of a decoding step (main rows and stream rows) through the row-invariant kernel's attention
    ([B, q, Hq, D]), or None where it cannot take them (not fp32 on the CPU, no kernel): then one sdpa
    call per main row and one masked call for the stream rows."""
    if query.dtype != torch.float32 or query.device.type != "cpu":
        return None
    B, _, q, _ = query.shape
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    outs = []
    for b, (spec, keys) in enumerate(_kernel_keys(mask, B, q, key.shape[2])):
        out = attend(query[b], key[b], value[b], spec, keys, scale)
        if out is None:
            return None
        outs.append(out)
    return torch.stack(outs) if len(outs) > 1 else outs[0][None]


def _causal(mask: torch.Tensor | None, n: int) -> bool:
    """Whether a one-prompt prefill's n main rows each see exactly the keys up to their own (no attention window cuts
    in): then one causal call computes them as transformers computes a prompt. Checked once per mask (the layers of
    one pass share it; layers with another window have another)."""
    if mask is None:
        return True
    known = _memo("causal", mask)
    if known is not None:
        return known
    causal = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    seen = mask[:, 0, :n] == 0  # [B, n, keys]
    result = bool(torch.equal(seen[:, :, :n], causal.expand_as(seen[:, :, :n])) and not seen[:, :, n:].any())
    return _remember("causal", mask, result)


def _batch_prompts(module, query, key, value, mask, scaling, dropout) -> torch.Tensor:
    """A prefill of several prompts, padded on the right (`prefill.pad_steps`): each row's prompt as its own
    causal call over its own keys, as a prompt alone is computed (`causal_prompt`), so a batch's K/V and
    tokens are bit for bit those of each prompt decoded alone; the rows after it (padding, outputs never kept)
    through a masked call. query [B, H, n, D], mask [B, 1, n, keys] additive; returns [B, n, H, D]."""
    n = query.shape[2]
    sees = mask[:, 0, :, :n] == 0
    causal = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    alone = (sees == causal).all(-1) & (mask[:, 0, :, n:] != 0).all(-1)  # [B, n]: row i sees keys 0..i only
    rows = []
    for b, m in enumerate(alone.long().cumprod(-1).sum(-1).tolist()):
        parts = [_sdpa(module, query[b:b + 1, :, :m], key[b:b + 1, :, :m], value[b:b + 1, :, :m], None, scaling,
                       dropout)] if m else []
        if m < n:
            parts.append(_sdpa(module, query[b:b + 1, :, m:], key[b:b + 1], value[b:b + 1], mask[b:b + 1, :, m:],
                               scaling, dropout))
        rows.append(torch.cat(parts, dim=1) if len(parts) > 1 else parts[0])
    return torch.cat(rows)


def kernel_step_keys(module: nn.Module, mask: torch.Tensor | None, B: int, q: int, keys: int):
    """(the kernel's attention, [(spec, keys)] per row) where this attention module's call in the current
    decoding step would go through the row-invariant kernel (`_row_exact_forward`), else None: a caller that
    runs the kernel's attention itself then computes what the module would."""
    scope: _RowExact | None = getattr(_scope, "row_exact", None)
    if (scope is None or not (scope.per_row or scope.kernel_prefill) or scope.kernel is None
            or module.config._attn_implementation != ROW_EXACT_ATTENTION):
        return None
    return scope.kernel, _kernel_keys(mask, B, q, keys)


def _row_exact_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention in which each row of a decoding step is computed over exactly the keys it may see, by
    itself: so a main row computes what a plain one-row pass over the same cache computes, bit for bit,
    and with row-invariant Linears (rowinv, int4) a speculative pass scores its main rows exactly as plain
    decoding would. Where the row-invariant kernel runs, all rows of a step are one call of its attention
    (rowinv.attend: each row summed alone, in a fixed order); elsewhere each main row is a one-row sdpa call
    (a slice of the cache when it sees a prefix, as in a chain) and the stream rows (index >= the row
    state's n_main) one masked call. A prefill's main rows are one sdpa call, the same in plain and
    speculative decoding. query [B, Hq, q, D]; returns [B, q, Hq, D] like transformers' sdpa."""
    scope: _RowExact | None = getattr(_scope, "row_exact", None)  # set by `row_exact_attention`
    if scope is None:  # outside a decoding step (transformers' own generate): plain sdpa
        return _sdpa(module, query, key, value, attention_mask, scaling, dropout, **kwargs), None
    state, per_row = scope.state, scope.per_row
    B, _, q, _ = query.shape
    n = state.n_main if state is not None and state.n_main is not None else q
    mask = attention_mask
    parts = []
    if not per_row and scope.kernel_prefill and scope.kernel is not None and kwargs.get("s_aux") is None:
        kernel = _kernel_rows(scope.kernel, query, key, value, mask, scaling)  # each row alone, as in a step
        if kernel is not None:
            return kernel, None
    if not per_row and scope.causal_prompt and _causal(mask, n):  # one prompt, empty cache: causal
        parts.append(_sdpa(module, query[:, :, :n], key[:, :, :n], value[:, :, :n], None, scaling, dropout))
    elif not per_row and B > 1 and mask is not None and kwargs.get("s_aux") is None:
        parts.append(_batch_prompts(module, query[:, :, :n], key, value, mask[:, :, :n], scaling, dropout))
    elif not per_row:
        parts.append(_sdpa(module, query[:, :, :n], key, value, None if mask is None else mask[:, :, :n],
                           scaling, dropout, **kwargs))
    else:
        use = scope.kernel is not None and kwargs.get("s_aux") is None
        kernel = _kernel_rows(scope.kernel, query, key, value, mask, scaling) if use else None
        if kernel is not None:  # every row, stream rows too, in one call
            return kernel, None
        seen = _visible_keys(mask, B, n, key.shape[2])
        rows = []
        for b in range(B):
            outs = []
            for i, s in enumerate(seen[b]):
                if isinstance(s, int):  # its prefix: a view of the cache, as in a plain pass
                    k, v = key[b:b + 1, :, :s], value[b:b + 1, :, :s]
                else:
                    k, v = key[b:b + 1].index_select(2, s), value[b:b + 1].index_select(2, s)
                # without a mask, as transformers' sdpa computes a one-row step (its generate agrees)
                outs.append(_sdpa(module, query[b:b + 1, :, i:i + 1], k, v, None, scaling, dropout))
            rows.append(torch.cat(outs, dim=1) if len(outs) > 1 else outs[0])
        parts.append(torch.cat(rows, dim=0) if B > 1 else rows[0])
    if n < q:  # stream rows: their own call
        parts.append(_sdpa(module, query[:, :, n:], key, value, None if mask is None else mask[:, :, n:],
                           scaling, dropout, **kwargs))
    return (torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]), None


def use_row_exact_attention(layers) -> None:
    """Name the row-exact attention in every decoder layer (`layers`), once (int4 engines): outside
    `row_exact_attention` it is plain sdpa, so transformers' own generate on the model is unchanged."""
    if not all("attention_functions" in layer.self_attn.__dict__ for layer in layers):  # an engine image's name theirs
        from transformers import AttentionInterface

        if ROW_EXACT_ATTENTION not in AttentionInterface._global_mapping:
            AttentionInterface.register(ROW_EXACT_ATTENTION, _row_exact_forward)
    for layer in layers:
        if layer.self_attn.config._attn_implementation != ROW_EXACT_ATTENTION:
            set_attention_implementation(layer, ROW_EXACT_ATTENTION)


@contextmanager
def row_exact_attention(row_state, per_row: bool, causal_prompt: bool = False, kernel: Callable | None = None,
                        kernel_keys: Callable | None = None, kernel_prefill: bool = False):
    """Inside, layers that use the row-exact attention (`use_row_exact_attention`) compute main rows one by
    one (per_row: a decoding step) or as one block (a prefill). row_state: the stream parameters' RowState
    (which rows are main rows), or None. causal_prompt: the block is one prompt on an empty cache (its main
    rows see exactly the keys before them), computed as transformers computes a prompt. kernel: the
    row-invariant kernel's attention (`rowinv.attend`; `CpuKernel.attention` in backends/) for decoding steps, or
    None for sdpa's one-row calls (int4 engines: their plain decoding stays transformers' own, bit for bit);
    kernel_keys: what lists the keys a mask [q, keys] lets its rows see as the kernel's attention takes them
    (`rowinv_steps.mask_keys`), or None (torch's ops). kernel_prefill: a prefill's rows, too, each through `kernel`
    over exactly the keys its mask lets it see (where the kernel takes them: fp32 on the CPU), so that a prompt's K/V
    is the same prefilled alone or in a batch, and its layers can run as the kernel's layer steps."""
    previous = getattr(_scope, "row_exact", None)
    _scope.row_exact = _RowExact(row_state, per_row, {}, causal_prompt, kernel, kernel_keys, kernel_prefill)
    try:
        yield
    finally:
        _scope.row_exact = previous

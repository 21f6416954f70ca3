"""The multi-stream attention forward pass, driving the base model's own modules.

One function serves both shapes:
- training: every position carries γ streams, no cache (`forward(..., cache=None)`);
- decoding: tree nodes after a cached prefix, the surviving nodes carry streams, and an optional
  `select` callback prunes nodes at the stream-birth layer N−Ns before the (1+γ)-wide layers run.

Returns final-normed hidden states; callers apply the shared LM head only to the rows whose logits
they need (verification rows, the accepted node's streams, the loss rows).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch

from specstream_core import backends
from specstream_core.model import compat, masks
from specstream_core.model.streams import StreamParams


@dataclass
class ForwardOutput:
    main: torch.Tensor  # [B, m, d] final-normed main rows (after pruning: survivors only)
    streams: torch.Tensor | None  # [B, s, γ, d] final-normed stream rows, per carrier
    keep: torch.Tensor | None  # [B, m] survivors' indices per row, padded (None: all kept)
    rows_bottom: int  # rows per sequence in layers below N−Ns
    rows_top: int  # rows per sequence in the multi-stream layers
    attention: dict = field(default_factory=dict)  # layer -> weights [B, H, q, keys] when captured
    birth: torch.Tensor | None = None  # [B, n, d] main rows entering layer N−Ns (before pruning)
    kept: list[int] | None = None  # survivors per row: keep[b, :kept[b]] are real, the rest padding


def forward(model, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor, *,
            streams: StreamParams | None = None, carriers: torch.Tensor | None = None, cache=None,
            select: Callable[[torch.Tensor], torch.Tensor] | None = None,
            capture_layers: tuple[int, ...] = (), window: int | None = None,
            frozen_bottom: bool = False, num_streams: int | None = None,
            birth_hidden: torch.Tensor | None = None) -> ForwardOutput:
    """ids, positions: [B, n]; visible: [B, n, n] main-row visibility inside this step.

    carriers: [B, s] main rows that carry streams (indices before pruning), or None for a plain pass.
    select(h_birth [B, n, d]) -> (keep [B, m], kept) main rows each row keeps, applied at layer N−Ns:
    keep[b, :kept[b]] ascending survivors, the rest padding (any index; it then sees only itself and
    its stream rows, and nothing real sees it). With `select`, every surviving main row carries streams.
    frozen_bottom: run layers below N−Ns without autograd (lossless training: nothing there trains).
    num_streams: run only streams 1..k (k <= γ) — a draft tree k deep needs no more, and stream j sees
    only streams 1..j, so the streams that run are unchanged.
    birth_hidden: [B, n, d] main rows entering layer N−Ns, computed earlier (`bottom_hidden`); the
    embedding and the layers below are then skipped (lossless training reuses them: they are frozen).
    """
    layers = list(compat.decoder_layers(model))  # a list: slicing a ModuleList builds a new module (~65 µs)
    steps = backends.bound(model)  # its layer steps, where its engine's backend has them
    prefix = cache.lengths if cache is not None else [0] * ids.shape[0]
    use_streams = streams is not None and carriers is not None
    birth = streams.cfg.birth_layer if use_streams else len(layers)

    if (use_streams and select is None and birth_hidden is None and not capture_layers and cache is not None
            and ids.shape[0] == 1 and not torch.is_grad_enabled()):
        out = _one_call(model, steps, layers, birth, ids, positions, visible, prefix, cache, window, streams, carriers,
                        min(num_streams or streams.cfg.gamma, streams.cfg.gamma))
        if out is not None:
            return out
    with _capture(layers, capture_layers) as attention:
        if birth_hidden is not None and use_streams:
            h = birth_hidden
        else:
            h = _bottom(model, layers[:birth], ids, positions, visible, prefix, cache, window,
                        grad=torch.is_grad_enabled() and not frozen_bottom, steps=steps)
        rows_bottom = h.shape[1]
        keep, kept = None, None
        if not use_streams:
            return ForwardOutput(compat.final_norm(model, h), None, None, rows_bottom, rows_bottom, attention)
        h_birth = h

        # 1. prune inside the pass: survivors only enter the (1+γ)-wide layers
        if select is not None:
            keep, kept = select(h)
            h, positions, visible = _gather_survivors(h, positions, visible, keep, kept)
            carriers = torch.arange(keep.shape[1], device=h.device).expand(keep.shape[0], -1)
        # 2. streams are born: S_j = M + P_j, laid out after the main rows
        gamma = min(num_streams or streams.cfg.gamma, streams.cfg.gamma)
        B, n, d = h.shape
        s = carriers.shape[1]
        h = _with_stream_rows(h, carriers, streams.embeddings[:gamma])  # [B, n + s*γ, d]
        mask, pe = _stream_tables(model, h, positions, visible, carriers, gamma, prefix, window)
        # 3. the multi-stream layers (row adapters act on rows >= n only)
        with streams.rows.streams_after(n):
            h = run_layers(layers[birth:], h, mask, pe, cache, steps)
        h = compat.final_norm(model, h)
        return ForwardOutput(h[:, :n], h[:, n:].reshape(B, s, gamma, d), keep, rows_bottom, h.shape[1], attention,
                             h_birth, kept)


def _one_call(model, steps, layers, birth: int, ids, positions, visible, prefix, cache, window, streams: StreamParams,
              carriers: torch.Tensor, gamma: int) -> ForwardOutput | None:
    """A decoding step of one sequence whose layers can all run as the backend's layer steps (`steps`): both runs of
    layers and the stream rows' birth between them in one call (`run_stream_stack`; on the CPU kernel, its
    whole-layer steps), everything each run needs made before it. The same numbers as the step below; None where the
    backend cannot take the step."""
    ready = steps.stream_stack_ready(layers[:birth], layers[birth:])
    if ready is None or isinstance(window, tuple):  # layers with different windows: one by one
        return None
    h = compat.embed(model, ids)
    mask = masks.additive_mask(prefix, visible, positions, h.dtype, window)
    pe = compat.rotary(model, h, positions)
    if isinstance(pe, compat.PerLayer):  # RoPE per layer type: one by one
        return None
    top_mask, top_pe = _stream_tables(model, h, positions, visible, carriers, gamma, prefix, window)
    n, final = h.shape[1], compat.final_norm_module(model)
    norm = steps.kernel_norm(final)  # the final norm inside the call where the backend can apply it
    with streams.rows.streams_after(n):
        ran = steps.run_stream_stack(ready, h, mask, pe, top_mask, top_pe, cache, carriers[0],
                                     streams.embeddings[:gamma].to(h.dtype), norm)
    if ran is None:
        return None
    h_birth, h = ran
    if norm is None:
        h = final(h)
    s = carriers.shape[1]
    return ForwardOutput(h[:, :n], h[:, n:].reshape(1, s, gamma, h.shape[-1]), None, n, h.shape[1], {}, h_birth, None)


def _stream_tables(model, h: torch.Tensor, positions, visible, carriers, gamma: int, prefix, window):
    """(additive mask, RoPE tables) of the multi-stream layers' rows: the main rows, then each carrier's γ stream rows
    (`masks.stream_layout`)."""
    q_pos, local = masks.stream_layout(positions, visible, carriers, gamma)
    return masks.additive_mask(prefix, local, q_pos, h.dtype, window), compat.rotary(model, h, q_pos)


def _with_stream_rows(h: torch.Tensor, carriers: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """[B, n, d] main rows -> [B, n + s*γ, d]: after them, stream j of each carrier c, S_j = h[c] + P_j."""
    B, n, d = h.shape
    s, gamma = carriers.shape[1], embeddings.shape[0]
    if torch.is_grad_enabled():
        born = torch.gather(h, 1, carriers[:, :, None].expand(B, s, d))  # [B, s, d]
        return torch.cat([h, (born[:, :, None, :] + embeddings.to(h.dtype)).reshape(B, s * gamma, d)], dim=1)
    out = torch.empty(B, n + s * gamma, d, dtype=h.dtype, device=h.device)  # a decoding step: fewer ops
    out[:, :n] = h
    born = h[:, carriers[0]] if B == 1 else torch.gather(h, 1, carriers[:, :, None].expand(B, s, d))  # [B, s, d]
    torch.add(born[:, :, None, :], embeddings.to(h.dtype), out=out[:, n:].view(B, s, gamma, d))
    return out


def _bottom(model, layers, ids, positions, visible, prefix, cache, window, grad: bool, steps) -> torch.Tensor:
    h = compat.embed(model, ids)  # [B, n, d]
    mask = masks.additive_mask(prefix, visible, positions, h.dtype, window)
    pe = compat.rotary(model, h, positions)
    with torch.set_grad_enabled(grad):
        return run_layers(layers, h, mask, pe, cache, steps)


def run_layers(layers, h: torch.Tensor, mask, pe, cache, steps) -> torch.Tensor:
    """The layers one after another (`compat.run_layer`), or all in one call where the backend's layer steps
    (`steps`: `backends.bound`) can take this step together (`run_stack`: the same numbers)."""
    per_layer = isinstance(mask, compat.PerLayer) or isinstance(pe, compat.PerLayer)  # layers that differ: one by one
    out = None if per_layer else steps.run_stack(layers, h, mask, pe, cache)
    if out is not None:
        return out
    for layer in layers:
        h = compat.run_layer(layer, h, mask, pe, cache)
    return h


@torch.no_grad()
def bottom_hidden(model, ids: torch.Tensor, n_bottom: int) -> torch.Tensor:
    """[B, T] ids -> [B, T, d] main rows entering layer `n_bottom`, causal, no cache (training data).

    Each sequence runs alone, so the result does not depend on what else is in a batch (a resumed
    training run then sees bit-identical features)."""
    layers = list(compat.decoder_layers(model))[:n_bottom]
    rows = []
    for seq in ids:
        x = seq[None]
        T = x.shape[1]
        pos = torch.arange(T, device=x.device)[None]
        rows.append(_bottom(model, layers, x, pos, masks.causal_visibility(T, 1, x.device), [0], None,
                            compat.sliding_window(model.config), False,
                            backends.bound(model)))
    return torch.cat(rows)


def prune_hidden(model, streams: StreamParams, h_birth: torch.Tensor) -> torch.Tensor:
    """Early-exit hidden for the pruning head: layer-(N−Ns) state → low-rank map → final norm."""
    return compat.final_norm(model, streams.prune(h_birth))


def _gather_survivors(h, positions, visible, keep: torch.Tensor, kept: list[int]):
    """Main rows, positions [B, m] and visibility [B, m, m] of each row's survivors (keep: [B, m]).
    Padding slots (past kept[b]) see only themselves; nothing sees them."""
    B, m = keep.shape
    d, n = h.shape[-1], visible.shape[-1]
    h = torch.gather(h, 1, keep[:, :, None].expand(B, m, d))  # [B, m, d]
    positions = torch.gather(positions, 1, keep)
    vis = torch.gather(visible, 1, keep[:, :, None].expand(B, m, n))  # [B, m, n]
    vis = torch.gather(vis, 2, keep[:, None, :].expand(B, m, m))  # [B, m, m]
    real = torch.arange(m, device=keep.device)[None] < torch.tensor(kept, device=keep.device)[:, None]  # [B, m]
    eye = torch.eye(m, dtype=torch.bool, device=keep.device)[None]
    vis = (vis & real[:, :, None] & real[:, None, :]) | (eye & ~real[:, :, None])
    return h, positions, vis


@contextmanager
def _capture(layers, layer_ids: tuple[int, ...]):
    """Record attention weights of chosen layers (eager attention there, only while capturing)."""
    captured: dict[int, torch.Tensor] = {}
    if not layer_ids:
        yield captured
        return
    handles, configs = [], {}
    for li in layer_ids:
        attn = layers[li].self_attn
        configs[li] = attn.config
        compat.set_attention_implementation(layers[li], "eager")

        def hook(module, args, output, li=li):
            captured[li] = output[1].detach()

        handles.append(attn.register_forward_hook(hook))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()
        for li, cfg in configs.items():
            layers[li].self_attn.config = cfg

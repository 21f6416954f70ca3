"""Additive float attention masks for multi-stream attention (0 = may attend, dtype-min = may not).

Row layout of one forward step, per sequence:
    main rows   r = 0..n-1        tree nodes / prompt tokens (the base model's own computation)
    stream rows r = n + c*γ + j-1 stream j (1..γ) of carrier c (only in the top Ns layers)
Keys: the cache's accepted prefix (slots 0..P_b-1), then this step's rows in the same order.

Visibility (docs/METHOD.md §2):
    main row i    -> prefix, main rows visible[i] (ancestors-or-self); never stream rows
    stream (c, j) -> prefix, main rows visible[carrier c], streams 1..j of the same carrier
"""

from __future__ import annotations

import torch

from specstream_core.model import compat


def local_visibility(visible: torch.Tensor, carriers: torch.Tensor | None, gamma: int) -> torch.Tensor:
    """Boolean [B, q, q] visibility among this step's rows.

    visible: [B, n, n] main-row visibility; carriers: [B, s] indices of main rows that carry streams.
    """
    if carriers is None or carriers.shape[1] == 0:
        return visible
    B, n, _ = visible.shape
    s = carriers.shape[1]
    q = n + s * gamma
    out = torch.zeros(B, q, q, dtype=torch.bool, device=visible.device)
    out[:, :n, :n] = visible
    # stream rows see the main rows their carrier sees: [B, s, n] -> [B, s*γ, n]
    carrier_vis = torch.gather(visible, 1, carriers[:, :, None].expand(B, s, n))
    out[:, n:, :n] = carrier_vis.repeat_interleave(gamma, dim=1)
    # streams 1..j of the same carrier: block-diagonal lower-triangular γ×γ blocks
    tri = torch.tril(torch.ones(gamma, gamma, dtype=torch.bool, device=visible.device))
    out[:, n:, n:] = torch.block_diag(*([tri] * s)) if s else out[:, n:, n:]
    return out


_LAYOUTS: dict = {}  # (n, carriers, γ, visibility) -> (row -> position index, position offsets, local visibility)


def stream_layout(positions: torch.Tensor, visible: torch.Tensor, carriers: torch.Tensor,
                  gamma: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(position ids [B, q] of main then stream rows, `local_visibility` [B, q, q]) of a step. A single sequence's
    decoding step (no gradients) takes them from a memo of its tree's shape: 2 ops instead of ~12."""
    if positions.shape[0] != 1 or torch.is_grad_enabled() or visible.device.type != "cpu":
        return (torch.cat([positions, stream_positions(positions, carriers, gamma)], dim=1),
                local_visibility(visible, carriers, gamma))
    n = positions.shape[1]
    key = (n, gamma, carriers.numpy().tobytes(), visible.numpy().tobytes())
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        rows = torch.cat([torch.arange(n), carriers[0].repeat_interleave(gamma)])
        offsets = torch.cat([torch.zeros(n, dtype=torch.long), torch.arange(1, gamma + 1).repeat(carriers.shape[1])])
        layout = _LAYOUTS[key] = (rows, offsets, local_visibility(visible, carriers, gamma))
    rows, offsets, local = layout
    return positions[:, rows] + offsets, local


def stream_positions(positions: torch.Tensor, carriers: torch.Tensor, gamma: int) -> torch.Tensor:
    """Position ids of stream rows: the carrier's position + j (the position of the token it stands for)."""
    base = torch.gather(positions, 1, carriers)  # [B, s]
    offsets = torch.arange(1, gamma + 1, device=positions.device)
    return (base[:, :, None] + offsets).reshape(positions.shape[0], -1)


def additive_mask(prefix_lens: list[int], local: torch.Tensor, q_pos: torch.Tensor, dtype: torch.dtype,
                  window: int | tuple | None = None) -> torch.Tensor:
    """Float mask [B, 1, q, max(P)+q] for a step whose rows are written after each sequence's prefix. window: the
    attention window in tokens (a row sees keys less than `window` positions behind it), or each layer's
    (`compat.sliding_window`): then a `compat.PerLayer` of one mask per distinct window."""
    if isinstance(window, tuple):
        return compat.PerLayer({w: additive_mask(prefix_lens, local, q_pos, dtype, w) for w in set(window)}, window)
    B, q, _ = local.shape
    total = max(prefix_lens) + q
    device = local.device
    if B == 1 and window is None:  # a single decoding's step: its prefix is all visible (3 ops, not ~12)
        mask = torch.zeros(1, 1, q, total, dtype=dtype, device=device)
        mask[0, 0, :, prefix_lens[0]:].masked_fill_(~local[0], torch.finfo(dtype).min)
        return mask
    allowed = torch.zeros(B, q, total, dtype=torch.bool, device=device)
    key_pos = torch.full((B, total), -1, dtype=torch.long, device=device)
    prefix_ar = torch.arange(total, device=device)
    for b, p in enumerate(prefix_lens):
        allowed[b, :, :p] = True
        allowed[b, :, p:p + q] = local[b]
        key_pos[b, :p] = prefix_ar[:p]
        key_pos[b, p:p + q] = q_pos[b]
    if window is not None:
        allowed &= (q_pos[:, :, None] - key_pos[:, None, :]) < window
    mask = torch.zeros(B, 1, q, total, dtype=dtype, device=device)
    mask.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
    return mask


def causal_visibility(n: int, batch: int = 1, device=None) -> torch.Tensor:
    return torch.tril(torch.ones(n, n, dtype=torch.bool, device=device)).expand(batch, n, n)

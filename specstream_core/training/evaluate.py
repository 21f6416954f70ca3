"""Draft quality without decoding: per-depth top-1 / top-k accuracy and one τ estimate, for stream
sets and Medusa heads alike.

τ estimate: at each answer position, depth j counts when drafts 1..j all hold the true token in their
top-k_j (exactly the acceptance condition of the Cartesian draft tree), plus the bonus token.
"""

from __future__ import annotations

import torch

from specstream_core.model import compat, masks, msa
from specstream_core.model.streams import StreamParams
from specstream_core.training.data import IGNORE, shifted_targets


class Tally:
    """Counts over batches: hits per depth and the accepted length of the chain of drafts."""

    def __init__(self, depths: int, topk: tuple[int, ...]):
        self.topk, self.tree_depth = topk, min(depths, len(topk))
        self.hits1, self.hitsk, self.counts = torch.zeros(depths), torch.zeros(depths), torch.zeros(depths)
        self.accepted_sum, self.positions = 0.0, 0

    def k(self, j: int) -> int:
        return max(self.topk[j - 1] if j - 1 < len(self.topk) else 1, 1)

    def start(self, base_valid: torch.Tensor) -> None:
        """A batch: positions with a next-token target ([B, T])."""
        self.base_valid, self.alive = base_valid, base_valid.clone()
        self.accepted = torch.zeros(base_valid.shape, dtype=torch.float32, device=base_valid.device)

    def add(self, j: int, top: torch.Tensor, targets: torch.Tensor) -> None:
        """Depth j's top-k indices [B, T, k] against its targets [B, T] (IGNORE where there is none)."""
        valid = targets != IGNORE
        in1, ink = top[..., 0] == targets, (top == targets[..., None]).any(-1)
        self.hits1[j - 1] += float(in1[valid].sum())
        self.hitsk[j - 1] += float(ink[valid].sum())
        self.counts[j - 1] += float(valid.sum())
        if j <= self.tree_depth:
            self.alive &= ink & valid
            self.accepted += self.alive.float()

    def end(self) -> None:
        self.accepted_sum += float(self.accepted[self.base_valid].sum())
        self.positions += int(self.base_valid.sum())

    def summary(self, prefix: str) -> dict:
        safe = self.counts.clamp(min=1)
        return {f"{prefix}_top1": (self.hits1 / safe).tolist(), f"{prefix}_topk": (self.hitsk / safe).tolist(),
                "topk": list(self.topk[:self.tree_depth]), "tau_estimate": 1.0 + self.accepted_sum / max(1, self.positions)}


@torch.no_grad()
def evaluate_streams(model, streams: StreamParams, ids: torch.Tensor, weight: torch.Tensor,
                     topk: tuple[int, ...] = (4, 3, 2, 1), batch_size: int = 8) -> dict:
    """Per-stream top-1 / top-k accuracy on answer tokens, the main stream's top-1 and τ."""
    tally = Tally(streams.cfg.gamma, topk)
    main_hits = main_count = 0
    head = compat.lm_head(model)
    device = next(model.parameters()).device
    for start in range(0, ids.shape[0], batch_size):
        x = ids[start:start + batch_size].to(device)
        w = weight[start:start + batch_size].to(device)
        B, T = x.shape
        pos = torch.arange(T, device=device).expand(B, T)
        out = msa.forward(model, x, pos, masks.causal_visibility(T, B, device), streams=streams, carriers=pos,
                          window=compat.sliding_window(model.config))
        main_t = shifted_targets(x, w, 1)
        valid_main = main_t != IGNORE
        main_hits += int((head(out.main).argmax(-1) == main_t)[valid_main].sum())
        main_count += int(valid_main.sum())
        tally.start(valid_main)
        for j in range(1, streams.cfg.gamma + 1):
            logits = (head(out.streams[:, :, j - 1]) if streams.draft_vocab is None else
                      streams.draft_logits(head, out.streams[:, :, j - 1], head.weight.shape[0]))
            tally.add(j, logits.topk(tally.k(j), dim=-1).indices, shifted_targets(x, w, 1 + j))
        tally.end()
    return {"main_top1": main_hits / max(1, main_count), **tally.summary("stream")}

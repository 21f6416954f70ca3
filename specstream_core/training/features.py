"""`FeatureCache`: lossless training reuses what the frozen layers below N−Ns give each sequence."""

from __future__ import annotations

import torch

from specstream_core.model import msa


class FeatureCache:
    """Lossless training: what the frozen layers below N−Ns give for each training sequence.

    Nothing below the stream-birth layer trains in lossless mode, so each sequence's layer-(N−Ns)
    state is computed once (sequence by sequence, so the values do not depend on the batch) and reused
    every time the sequence is drawn again, within a memory budget. On a 30-layer model with Ns = 4
    this skips 26 of 30 layers' forward work on every repeat draw."""

    def __init__(self, model, n_bottom: int, budget_bytes: float):
        self.model, self.n_bottom, self.budget = model, n_bottom, budget_bytes
        self.rows: dict[int, torch.Tensor] = {}
        self.used = 0
        self.hits = self.misses = 0

    def get(self, ids: torch.Tensor, idx: list[int]) -> torch.Tensor:
        missing = [i for i in dict.fromkeys(idx) if i not in self.rows]
        self.hits += len(idx) - len(missing)
        self.misses += len(missing)
        fresh = {}
        if missing:
            pos = {i: n for n, i in enumerate(idx)}
            h = msa.bottom_hidden(self.model, ids[[pos[i] for i in missing]], self.n_bottom)
            for i, row in zip(missing, h):
                fresh[i] = row
                if self.used + row.numel() * row.element_size() <= self.budget:
                    self.rows[i] = row
                    self.used += row.numel() * row.element_size()
        return torch.stack([self.rows[i] if i in self.rows else fresh[i] for i in idx])

"""`MedusaDrafter`: draft trees from Medusa-style heads (`model/medusa_heads.py`) applied to the
accepted node's final-normed main hidden state; the one tree verifier checks them, so greedy output
equals plain decoding."""

from __future__ import annotations


from specstream_core.decoding.drafters.base import RowOutput, TopkDrafter
from specstream_core.model.medusa_heads import MedusaHeads


class MedusaDrafter(TopkDrafter):
    """Drafts from the heads applied to the accepted node's final main hidden state."""

    def __init__(self, heads: MedusaHeads, lm_head, topk: tuple[int, ...] = (1, 1, 1, 1), budget: int = 64):
        super().__init__(tuple(topk[: heads.cfg.num_heads]), budget)
        self.heads, self.lm_head = heads, lm_head

    def observe(self, out: RowOutput, node: int) -> None:
        hidden = out.main[node]  # [d]
        h = hidden.to(next(self.heads.parameters()).dtype)
        self._observe_logits(self.lm_head(self.heads(h)[: len(self.topk)].to(hidden.dtype)))  # [depth, V]

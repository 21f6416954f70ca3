"""The LM head laid out with the draft vocabulary's rows first: a pass's main rows scored over the whole vocabulary
and its stream rows over the draft vocabulary in one read of the head's weights.

A speculative pass needs the main rows' logits (verification) and the stream rows' scores over the draft vocabulary
(the next draft). Apart, the draft vocabulary's rows of the head are read twice a pass: SmolLM2's 8,192 of them are
9.4 MB in bf16 (~0.9 ms of a ~30 ms pass on a Xeon that reads its weights from memory), 4.7 MB in the 8-bit head of
int4-a8 (~0.35 ms of a ~12 ms step). Here the head is laid out once with those rows first. Its first call takes the
main rows and every carrier's stream rows over the draft vocabulary's block, its second the main rows over the rest,
and each output column is written where the vocabulary puts it (csrc/amx.c's `linear_bf16x_map`, csrc/quant.c's `linear_q8a8_map`).
The drafter then takes the accepted node's scores (`Engine.head_scores`, `RowOutput.scored`).

Two heads take it, each with the kernel its model's head already runs on:
- bf16 on AMX tiles (`amx_tiles`): up to 16 rows cost about what one does, so the stream rows come almost free;
- the 8-bit head of int4-a8 (`int8_head.Int8Linear` against 8-bit activations, `int4_a8`): the stream rows cost
  their dot products as they did apart, and the second read of the block is saved. The head itself is laid out so
  (`Int8Linear.lay_out`), its own calls writing each output where the vocabulary puts it: one copy of it, not two.
Every column is summed as the head's own call sums it, so the logits are bit for bit the head's, and the stream rows'
scores are the draft head's, which is cut from the same weights (tests/test_merged_head.py).
"""

from __future__ import annotations

import torch

from specstream_core.kernels.linears import int4_a8, rowinv
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels import amx_tiles, library


def _draft_first(vocab: int, ids: torch.Tensor) -> torch.Tensor:
    """The vocabulary's ids, the draft vocabulary's first (in its order), then the rest in order."""
    return torch.cat([ids, torch.ones(vocab, dtype=torch.bool).index_fill_(0, ids, False).nonzero()[:, 0]])


class MergedHead:
    """A bias-free LM head [V, d], its draft vocabulary's rows first (`of` makes one where it runs)."""

    def __init__(self, order: torch.Tensor, kd: int, lib):
        self.cols = order.to(torch.int32)  # laid-out column -> vocabulary id
        self.vocab, self.kd, self.lib = order.numel(), kd, lib

    @classmethod
    def of(cls, head, draft_ids: torch.Tensor | None) -> "MergedHead | None":
        """For a bf16 head that runs on AMX tiles or an 8-bit head against 8-bit activations, and a draft vocabulary
        of whole blocks (a multiple of 32 tokens, not all of them); else None. (The tiled head's own copy is then
        never made.)"""
        lib = library.library()
        if draft_ids is None or getattr(head, "bias", None) is not None or draft_ids.numel() % 32 or lib is None:
            return None
        ids = draft_ids.to(torch.long).cpu()
        if isinstance(head, rowinv.RowInvariantLinear):
            w = head.weight
            if (w.dtype is torch.bfloat16 and 0 < ids.numel() < w.shape[0] and amx_tiles.amx(lib)
                    and not w.shape[0] % amx_tiles.TILE):
                order = _draft_first(w.shape[0], ids)
                tiled = amx_tiles.tiled(w.detach()[order].contiguous(), lib)
                return None if tiled is None else _OnTiles(order, ids.numel(), lib, tiled)
        elif isinstance(head, int8_head.Int8Linear) and head.a8:
            return cls.of_head(head, ids)
        return None

    @classmethod
    def of_head(cls, head: int8_head.Int8Linear, draft_ids: torch.Tensor) -> "MergedHead | None":
        """An 8-bit head against 8-bit activations laid out with its draft vocabulary first in place
        (`Int8Linear.lay_out`: its own calls give the same logits from the new layout), and read from that one copy;
        None where that does not run or the vocabulary does not suit (as `of_groups`)."""
        lib, ids, vocab = library.library(), draft_ids.to(torch.long).cpu(), head.out_features
        if lib is None or not int4_a8.available() or ids.numel() % 32 or not 0 < ids.numel() < vocab or vocab % int4_a8.TILE:
            return None
        order = _draft_first(vocab, ids)
        if head.order is None or not torch.equal(head.order, order):
            head.lay_out(order)
        return _Q8A8(order, ids.numel(), lib, head.q8, head.d)

    @classmethod
    def of_groups(cls, q: torch.Tensor, scale: torch.Tensor, draft_ids: torch.Tensor) -> "MergedHead | None":
        """An 8-bit head's groups (q [V, d] int8, scale [V, d / 32]) against 8-bit activations, its draft vocabulary
        first (`int4_a8.pack_q8`), where that runs and the vocabulary suits (as `of`); else None. Also what
        `certified_head` reads an fp32-activation 8-bit head with."""
        lib = library.library()
        ids = draft_ids.to(torch.long).cpu()
        vocab = q.shape[0]
        if lib is None or not int4_a8.available() or ids.numel() % 32 or not 0 < ids.numel() < vocab or vocab % int4_a8.TILE:
            return None
        order = _draft_first(vocab, ids)
        return _Q8A8(order, ids.numel(), lib, *int4_a8.pack_q8(q[order], scale[order]))

    def scores(self, main: torch.Tensor, streams: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits [..., V] of main rows [..., d], scores [..., K] of stream rows [..., d] over the draft vocabulary, in
        its order, or None without them), fp32."""
        d = main.shape[-1]
        m = main.numel() // d
        s = 0 if streams is None else streams.numel() // d
        x = main.reshape(m, d) if streams is None else torch.cat([main.reshape(m, d), streams.reshape(s, d)])
        x = x.float().contiguous()
        logits, drafts = torch.empty(m, self.vocab), torch.empty(s, self.kd)
        # the draft vocabulary's block: every row (main rows to their columns, stream rows in order), then the rest
        library.check(self._block(x, m + s, 0, self.kd, logits, m, drafts.data_ptr(), self.kd), "merged head")
        library.check(self._block(x, m, self.kd, self.vocab - self.kd, logits, m, None, 0), "merged head")
        return (logits.reshape(*main.shape[:-1], self.vocab),
                None if streams is None else drafts.reshape(*streams.shape[:-1], self.kd))

    def _block(self, x: torch.Tensor, rows: int, n0: int, n: int, y: torch.Tensor, split: int, y2, ld2: int) -> int:
        """The kernel's mapped call on columns [n0, n0 + n) of the laid-out head: rows < split into y at their
        vocabulary columns, the others into y2 (a pointer, row stride ld2)."""
        raise NotImplementedError


class _OnTiles(MergedHead):
    def __init__(self, order, kd, lib, tiled: torch.Tensor):
        super().__init__(order, kd, lib)
        self.tiled, self.step = tiled, tiled[0].numel() * tiled.element_size()  # bytes a block of 32 columns

    def _block(self, x, rows, n0, n, y, split, y2, ld2):
        return self.lib.linear_bf16x_map(x.data_ptr(), rows, x.shape[-1], self.tiled.data_ptr() + n0 // 32 * self.step,
                                         n, y.data_ptr(), y.shape[-1], self.cols.data_ptr() + 4 * n0, split, y2, ld2,
                                         torch.get_num_threads())


class _Q8A8(MergedHead):
    def __init__(self, order, kd, lib, data: torch.Tensor, dm: torch.Tensor):
        super().__init__(order, kd, lib)
        self.data, self.dm = data, dm  # int4_a8.pack_q8's [V / 16, G, 8, 64] and [V / 16, G, 2, 16]

    def _block(self, x, rows, n0, n, y, split, y2, ld2):
        t = n0 // int4_a8.TILE
        return self.lib.linear_q8a8_map(x.data_ptr(), rows, x.shape[-1], self.data[t:].data_ptr(), self.dm[t:].data_ptr(),
                                        n, y.data_ptr(), y.shape[-1], self.cols.data_ptr() + 4 * n0, split, y2, ld2,
                                        torch.get_num_threads())

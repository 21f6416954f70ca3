"""The LM head on AMX tiles with the draft vocabulary's rows first: a pass's main rows scored over the whole vocabulary
and its stream rows over the draft vocabulary in one read of the head's weights.

A speculative pass needs the main rows' logits (verification) and the stream rows' scores over the draft vocabulary
(the next draft). Apart, the draft vocabulary's rows of the head are read twice a pass: SmolLM2's 8,192 of them are
9.4 MB in bf16, ~0.9 ms of a ~30 ms pass on a Xeon where the pass reads its weights from memory. On tiles (bf16 where
the CPU has AMX, `rowinv_tiles`) up to 16 rows cost about what one does, so scoring every carrier's stream rows with
the main rows costs little more than the main rows alone, and the drafter then takes the accepted node's.

The weight is tiled once with the draft vocabulary's rows first (`rowinv.c`'s `linear_bf16x_map`): its first call
takes main and stream rows over the draft vocabulary's block, its second the main rows over the rest, and each output
column is written where the vocabulary puts it. Every column is summed exactly as the head's own tiled call sums it,
so the logits are bit for bit the same (tests/test_tiled_head.py), and so are the stream rows' scores against the
draft head cut from the same weights.
"""

from __future__ import annotations

import ctypes

import torch

from specstream_core.model import rowinv, rowinv_tiles

_typed: list = [None, None]  # rowinv.typed's cache: the library typed for `linear_bf16x_map`, or None


def _setup(lib):
    if not hasattr(lib, "linear_bf16x_map"):
        return None  # an older kernel (kernel_ab)
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.linear_bf16x_map.argtypes = [ptr, i64, i64, ptr, i64, ptr, i64, ptr, i64, ptr, i64, ctypes.c_int]
    lib.linear_bf16x_map.restype = ctypes.c_int
    return lib


class TiledHead:
    """A bias-free LM head [V, d] on tiles, its draft vocabulary's rows first (`of` makes one where it runs)."""

    def __init__(self, weight: torch.Tensor, draft_ids: torch.Tensor, tiled: torch.Tensor):
        vocab = weight.shape[0]
        rest = torch.ones(vocab, dtype=torch.bool)
        rest[draft_ids] = False
        self.cols = torch.cat([draft_ids, rest.nonzero()[:, 0]]).to(torch.int32)  # tiled column -> vocabulary id
        self.vocab, self.kd, self.tiled = vocab, draft_ids.numel(), tiled
        self.rest = tiled[self.kd // rowinv_tiles.TILE:]  # the tiles of the columns after the draft vocabulary's

    @classmethod
    def of(cls, head, draft_ids: torch.Tensor | None) -> "TiledHead | None":
        """For a bf16 head that runs on tiles (`rowinv_tiles.tiled`, no bias) and a draft vocabulary of whole tiles
        (a multiple of 32 tokens, not all of them); else None. (Its own tiled copy is then never made.)"""
        if (draft_ids is None or not isinstance(head, rowinv.RowInvariantLinear) or head.bias is not None
                or head.weight.dtype is not torch.bfloat16 or draft_ids.numel() % rowinv_tiles.TILE
                or not 0 < draft_ids.numel() < head.weight.shape[0] or rowinv.typed(_typed, _setup) is None
                or not rowinv_tiles.amx(rowinv.library())):
            return None
        vocab = head.weight.shape[0]
        ids = draft_ids.to(torch.long).cpu()
        order = torch.cat([ids, torch.ones(vocab, dtype=torch.bool).index_fill_(0, ids, False).nonzero()[:, 0]])
        tiled = rowinv_tiles.tiled(head.weight.detach()[order].contiguous(), rowinv.library())
        return None if tiled is None else cls(head.weight, ids, tiled)

    def scores(self, main: torch.Tensor, streams: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits [..., V] of main rows [..., d], scores [..., K] of stream rows [..., d] over the draft vocabulary, in
        its order, or None without them), fp32."""
        lib = rowinv.typed(_typed, _setup)
        d = main.shape[-1]
        m = main.numel() // d
        s = 0 if streams is None else streams.numel() // d
        x = main.reshape(m, d) if streams is None else torch.cat([main.reshape(m, d), streams.reshape(s, d)])
        x = x.float().contiguous()
        logits, drafts = torch.empty(m, self.vocab), torch.empty(s, self.kd)
        threads, cols = torch.get_num_threads(), self.cols.data_ptr()
        # the draft vocabulary's block: every row (main rows to their columns, stream rows in order), then the rest
        failed = (lib.linear_bf16x_map(x.data_ptr(), m + s, d, self.tiled.data_ptr(), self.kd, logits.data_ptr(),
                                       self.vocab, cols, m, drafts.data_ptr(), self.kd, threads)
                  or lib.linear_bf16x_map(x.data_ptr(), m, d, self.rest.data_ptr(), self.vocab - self.kd,
                                          logits.data_ptr(), self.vocab, cols + 4 * self.kd, m, None, 0, threads))
        if failed:
            raise RuntimeError("the kernel's tiled head could not run (out of memory, or the AMX tiles were refused)")
        return (logits.reshape(*main.shape[:-1], self.vocab),
                None if streams is None else drafts.reshape(*streams.shape[:-1], self.kd))

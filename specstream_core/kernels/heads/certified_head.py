"""Greedy choices of an exact 8-bit head from a cheaper read of it, provably the same tokens.

The head that fp32 and int4 engines decode with (`int8_head.Int8Linear` on fp32 activations: the GGUF file's Q8_0
groups, fp32's head bit for bit where `int8_head.use_exact_head` put it) makes every weight d q in fp32 and sums in
fp32: each main row of a step costs its multiply-adds over all 49,152 tokens of SmolLM2. Greedy verification needs
only each row's first largest logit, and only a handful of tokens can be it.

So the same groups are read against activations rounded to 8 bits (int4-a8's arithmetic, `int4_a8`: integer dot
products), which gives every token v an approximation a_v of its exact logit e_v with a proven bound: rounding x to
dx_g q (dx_g = max |x| / 127 over group g of 32 inputs) moves each input by at most dx_g / 2 (+ 5e-5 dx_g for the
fp32 scaling), so the 8-bit sum is within sum_g dx_g / 2 L_vg of x . w_v, where L_vg = sum_j |w_vj| over the group;
the fp32 sums of both sides round by less than 5e-4 sum_g dx_g L_vg (at most ~45 roundings of terms no larger than
127 dx_g |w_vj|). Hence |a_v - e_v| <= 0.51 sum_g dx_g L_vg <= r_v = 0.51 (sum_{g in B} dx_g L_vg + D sum_{g not in B}
L_vg), B the BOUNDED groups where the pass's rows have their largest scales (hidden states have a few outlier
channels), D the largest scale of the others: three sums a token instead of 18 on SmolLM2.

A token whose upper end a_v + r_v lies below the best lower end, max_u (a_u - r_u), has e_v < e_u for that u: it is
neither the largest nor tied with it. The others (the candidates) are computed exactly by the head's own kernel call
on the blocks that hold them, whose every output is summed as in the whole head's call (csrc/quant.c: per output,
whatever the block or the call), and the first of the largest is taken, in vocabulary order. That is `argmax` of the
whole exact head, token for token (tests/test_certified_head.py, which also fails with a bound too small). Rows with
a non-finite input or approximation take the whole head. All of it after the 8-bit read is one kernel call
(csrc/argmax.c's `certified_choices`), ~0.05 ms for five rows.

With a draft vocabulary the 8-bit read is `merged_head`'s: the stream rows' draft scores come from the same read
(what the drafter's 8-bit draft head, cut from the same groups, computes apart: `StreamParams.draft_head`).

SmolLM2's head, one thread, its weights in cache (ad-hoc): 1 row 1.36 ms whole, 1.34 this way; 2 rows 1.66 / 1.43;
3 rows 2.07 / 1.48; 5 rows 2.68 / 1.75. Decoding steps read it cold, after the layers; BENCHMARKS.md has what it
gives there.
"""

from __future__ import annotations

import torch

from specstream_core.kernels.heads import greedy, int8_head, merged_head
from specstream_core.kernels import library
from specstream_core.kernels.linears import int4_a8

GROUP = int8_head.GROUP
SLACK = 0.51  # r_v's multiplier: 1/2 for the rounding, < 1e-3 for fp32 (module docstring), the rest margin
BOUNDED = 3  # groups bounded one by one (certified_choices takes up to 4). Candidates a row on 2,193 main rows of
# SmolLM2's speculative passes over 16 eval prompts (median / 90th percentile / largest; ad-hoc, each row its own
# groups): all 18 groups 3 / 11 / 73, 3 groups 7 / 40 / 611, 1 group 18 / 152 / 8,036, none (the largest scale for all)
# 84 / 7,289 / 49,030


class CertifiedHead:
    """An exact 8-bit head, its 8-bit-activation copy (draft vocabulary first where there is one) and each row's
    group sums of |w| [G, V]: `choose` answers argmax of the head's logits."""

    def __init__(self, head: int8_head.Int8Linear, approx, group_l1: torch.Tensor):
        self.head, self.approx, self.group_l1 = head, approx, group_l1  # [G, V]
        self.total_l1 = group_l1.sum(0)  # [V]

    @classmethod
    def of(cls, head, draft_ids: torch.Tensor | None = None) -> "CertifiedHead | None":
        """For a bias-free `Int8Linear` on the kernel with fp32 activations, where int4-a8's 8-bit calls run (an
        AVX512-VNNI build); else None."""
        if not (isinstance(head, int8_head.Int8Linear) and head.kernel and not head.a8 and head.bias is None
                and int4_a8.available() and not head.out_features % int4_a8.TILE):
            return None
        q, scale = head.groups()
        approx = merged_head.MergedHead.of_groups(q, scale, draft_ids) if draft_ids is not None else None
        if approx is None:
            approx = _WholeVocabulary(*int4_a8.pack_q8(q, scale), head.out_features)
        n, k = q.shape
        sums = torch.cat([b.float().abs().reshape(-1, k // GROUP, GROUP).sum(-1) for b in q.split(4096)])  # by blocks
        l1 = sums * scale.float()  # [V, G]: sum_j |w_vj| exactly
        return cls(head, approx, l1.t().contiguous())

    def choose(self, main: torch.Tensor, streams: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(argmax of the head's logits of main rows [..., d] -> [...], int64; the stream rows' [..., d] scores over
        the draft vocabulary as `MergedHead.scores` gives them, or None). csrc/argmax.c's `certified_choices` bounds each
        token group by group for the BOUNDED groups where the pass's rows have their largest scales (hidden states
        have a few outlier channels) and with the largest scale of the rest for the others (r made larger, never
        smaller), finds the candidates and computes them exactly."""
        d = main.shape[-1]
        x = main.reshape(-1, d).float().contiguous()
        approx, drafts = self.approx.scores(x, streams)
        approx = approx.contiguous()
        out = torch.empty(x.shape[0], dtype=torch.int64)
        status = library.library().certified_choices(x.data_ptr(), x.shape[0], d, approx.data_ptr(), approx.shape[1],
                                              self.group_l1.data_ptr(), self.total_l1.data_ptr(), BOUNDED, SLACK,
                                              self.head.q8.data_ptr(), self.head.d.data_ptr(), out.data_ptr())
        if status == library.Status.NOT_FINITE:  # a row or an approximation not finite: the whole head
            out = greedy.argmax(self.head(x))
        else:
            library.check(status, "certified_choices")
        return out.reshape(main.shape[:-1]), drafts


class _WholeVocabulary:
    """The 8-bit-activation read of a head without a draft vocabulary: `MergedHead.scores`'s interface, no drafts."""

    def __init__(self, data: torch.Tensor, dm: torch.Tensor, n: int):
        self.data, self.dm, self.n = data, dm, n

    def scores(self, x: torch.Tensor, streams: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
        return int4_a8.linear_q8(x, self.data, self.dm, self.n), None

"""A row adapter's second factor on the row-invariant kernel: x B^T where K, the adapter's rank, is short.

`StreamRowLoRA` adds (x A^T) B^T to its stream rows, with B [N, r] and r = 32 on the default model. Through the kernel's
dot products (`rowinv.linear`) each of the N outputs is a 32-term sum folded out of vector lanes, and the folds cost
more than the FMAs. Here (`rowinv.c`'s `linear_kouter`) each output is summed over j = 0 .. r - 1 in order,
16 outputs a vector, from B^T, with no fold. So that B^T needs no copy that could go stale, `make_low_rank` keeps the
weight as the transpose of a contiguous [r, N] buffer: `weight` is still the [N, r] parameter (training, saving,
loading and in-place changes see it as before), and the kernel (also the whole-layer steps, `rowinv_steps`) reads
the buffer. Stream rows only draft, so this changes no output; it changes which sums a stream row gets, the same on
the module path and in the kernel's whole-layer steps (`direct_layers`' probe checks them bit for bit).
"""

from __future__ import annotations

import torch
from torch import nn

from specstream_core.model import rowinv

MAX_RANK = 128  # the widest K taken this way (a row adapter's rank)


def transposed(w: torch.Tensor) -> bool:
    """Whether w [N, K] is the transpose of a contiguous [K, N] buffer (what `linear_kouter` reads)."""
    return w.dim() == 2 and w.stride() == (1, w.shape[0])


class LowRankLinear(rowinv.RowInvariantLinear):
    """A bias-free Linear of a short K whose weight lies transposed (`make_low_rank`): its inference forward on fp32
    CPU rows runs `linear_kouter`; otherwise torch's Linear."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (x.is_cpu and x.dtype is torch.float32 and w.dtype is torch.float32 and self.bias is None
                and transposed(w) and rowinv.enabled() and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return kouter(x, w)
        return nn.functional.linear(x, w.to(x.dtype), self.bias)


def kouter(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x W^T through `linear_kouter`: x fp32 [..., K], w [N, K] fp32 `transposed`."""
    rows = x if x.is_contiguous() else x.contiguous()
    n, k = w.shape
    y = torch.empty(*x.shape[:-1], n)
    rowinv.library().linear_kouter(rows.data_ptr(), rows.numel() // k, k, w.data_ptr(), n, y.data_ptr(), n, 0)
    return y


def make_low_rank(module: nn.Module) -> bool:
    """Turn a bias-free nn.Linear of at most MAX_RANK inputs into a LowRankLinear in place, its weight re-laid as the
    transpose of a contiguous buffer (same values, same parameter name)."""
    if type(module) not in (nn.Linear, rowinv.RowInvariantLinear) or module.bias is not None or module.in_features > MAX_RANK:
        return False
    w = module.weight
    module.weight = nn.Parameter(w.detach().t().contiguous().t(), requires_grad=w.requires_grad)
    module.__class__ = LowRankLinear
    return True


def on_kernel(a: nn.Module, b: nn.Module) -> bool:
    """Whether a row adapter's A and B are what the kernel's whole-layer steps take: A a RowInvariantLinear with a
    contiguous fp32 weight, B a LowRankLinear with its transposed fp32 weight, neither with a bias."""
    return (isinstance(a, rowinv.RowInvariantLinear) and not isinstance(a, LowRankLinear) and a.bias is None
            and a.weight.dtype is torch.float32 and a.weight.is_contiguous()
            and isinstance(b, LowRankLinear) and b.bias is None and b.weight.dtype is torch.float32 and transposed(b.weight))

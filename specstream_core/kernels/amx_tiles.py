"""bf16 Linears on the AMX tile unit of Intel CPUs (csrc/amx.c's `linear_bf16x`), where the CPU and the OS allow it.

One tile instruction multiplies up to 16 rows by 32 columns of K against 16 outputs, so a pass of up to 32 rows
costs about what one row does: a bf16 speculative pass (5 rows in the lower layers, 25 in the stream layers) stays
bound by reading the weights, where the vector kernel's FMAs ran out. Row-invariant like the rest of the kernel:
x is rounded to bf16 value by value and each output summed over K in tile steps, in order, whatever the other rows.
Its sums are not the vector kernel's (that one keeps x in fp32), so a model's bf16 Linears take one or the other
for all their passes: `RowInvariantLinear` decides once per weight (`tiled`), the layer steps follow it;
`rowinv.linear_tiled` is the call.
"""

from __future__ import annotations

import os

import torch

AMX = os.environ.get("SPECSTREAM_AMX", "").strip() != "0"  # SPECSTREAM_AMX=0: bf16 stays on the vector kernel
TILE = 32  # outputs and columns of K a tile step takes (csrc/amx.c's layout)


def amx(lib) -> bool:
    """Whether bf16 Linears run on AMX tiles here: `lib` (`kernels/library.py`'s) is an AMX build the OS lets use them,
    and not SPECSTREAM_AMX=0."""
    return AMX and lib is not None and hasattr(lib, "rowinv_amx") and bool(lib.rowinv_amx())


def tiled(weight: torch.Tensor, lib) -> torch.Tensor | None:
    """A bf16 weight [N, K] as linear_bf16x reads it (Wx[N/32][K/32][2][16][16][2]: each step of 32 columns, two
    tiles of 16 column pairs x 16 outputs), or None where it does not run: not bf16, N or K not a multiple of 32,
    no AMX here (`amx`)."""
    n, k = weight.shape
    if weight.dtype is not torch.bfloat16 or n % TILE or k % TILE or not amx(lib):
        return None
    w = weight.detach().contiguous()
    return w.view(n // TILE, 2, 16, k // TILE, 16, 2).permute(0, 3, 1, 4, 2, 5).contiguous()

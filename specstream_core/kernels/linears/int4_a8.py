"""int4-a8: the 4-bit Linears of `kernels/linears/int4.py` and the 8-bit head of `kernels/heads/int8_head.py` multiplied against
8-bit activations, llama.cpp's arithmetic for Q4_1 and Q8_0 weights, on the row-invariant kernel's AVX512-VNNI
build (`csrc/quant.c`: `linear_q4a8_ld`, `linear_q8a8_ld`).

Why: in int4 with fp32 activations every row of a pass costs its fp32 multiply-adds at the vector units'
peak, so a speculative pass's extra rows are not free and speculative streaming only draws level with
plain decoding. Rounding each input row to 8 bits per group of 32 (`dx = max |x| / 127`) lets the products
run as 8-bit integer dot products, 64 at a time (vpdpbusd): on SmolLM2's 576 -> 1,536 Linear, one row
takes about half the time of int4's, six rows about a quarter (docs/BENCHMARKS.md).

What it computes: another model than fp32 (activations rounded to 8 bits, as llama.cpp rounds them), but
still row-invariant. Each group's products are summed exactly in 32-bit integers, and the groups are added
in fp32 in one fixed order whatever the other rows of the call. So speculative passes compute their main
rows bit for bit as plain passes: int4-a8 speculative output equals int4-a8 plain decoding, token for token
(tests/test_int4_a8.py).

Layout (`pack`): per tile of 16 output rows and group of 32 inputs, 4 chunks of 64 bytes; chunk c's byte
4 o + k holds q[o][8c + k] in its low nibble and q[o][8c + 4 + k] in its high one, so one load and two
masks give the 16 rows' next 8 weights; then the tile's scales and low ends, [N / 16, G, 2, 16] in fp16 as
Q4_1 keeps them (a third less to read than fp32: the scales were a third of the bytes). The 8-bit head
(`pack_q8`): 8 chunks of 64 signed bytes (byte 4 o + k of chunk c: q[o][4c + k]), its fp16 scales and each
group's sum of weights, with which the kernel takes off what the unsigned activations add (csrc/quant.c).
"""

from __future__ import annotations

import torch

from specstream_core.kernels import library as kernel_library
from specstream_core.kernels.linears import rowinv

GROUP = 32
TILE = 16  # output rows per tile
SUM_ROWS = 4096  # rows `pack_q8` sums and `take_rows_q8` moves at a time


def available() -> bool:
    """Whether int4-a8 runs here: the kernel's AVX512-VNNI build."""
    return library() is not None


def library():
    """The kernel where its 8-bit calls run (an AVX512-VNNI build), else None."""
    lib = kernel_library.library()
    return lib if lib is not None and lib.a8 else None


def unavailable_reason() -> str:
    if not rowinv.available():
        return f"the row-invariant kernel cannot run here: {rowinv.unavailable_reason()}"
    return "" if available() else "int4-a8 needs a CPU with AVX512-VNNI (this one has not, or the kernel was built without)"


def pack(q: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [N, K] in 0..15, scale, low [N, K / 32]) -> (nibbles [N' / 16, G, 4, 64] uint8, dm [N' / 16, G, 2, 16] fp16),
    N' = N rounded up to 16 (the last row repeated; its outputs are dropped). Scales and low ends are kept in
    fp16, as Q4_1 keeps them: a GGUF file's own are exact, others are rounded once more."""
    q, scale, low = (rowinv.pad_rows(t, TILE) for t in (q, scale, low))
    n, k = q.shape
    g = k // GROUP
    qq = q.to(torch.uint8).reshape(n // TILE, TILE, g, 4, 2, 4)  # tile, o, group, chunk, half, k
    nibbles = (qq[..., 0, :] | (qq[..., 1, :] << 4)).permute(0, 2, 3, 1, 4).contiguous()  # tile, group, chunk, o, k
    dm = torch.stack([scale.half(), low.half()]).reshape(2, n // TILE, TILE, g).permute(1, 3, 0, 2).contiguous()
    return nibbles.reshape(n // TILE, g, 4, 4 * TILE), dm


def unpack(nibbles: torch.Tensor, dm: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of `pack`: (q, scale, low) of the first n rows."""
    tiles, g = nibbles.shape[:2]
    b = nibbles.reshape(tiles, g, 4, TILE, 4).permute(0, 3, 1, 2, 4)  # tile, o, group, chunk, k
    q = torch.stack([b & 0x0F, b >> 4], dim=-2).reshape(tiles * TILE, g * GROUP)  # chunk: 4 low, then 4 high
    scale, low = dm.permute(2, 0, 3, 1).reshape(2, tiles * TILE, g).float()
    return q[:n], scale[:n], low[:n]


def pack_q8(q: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [N, K] in -128..127, scale [N, K / 32]) -> (bytes [N' / 16, G, 8, 64] int8, dm [N' / 16, G, 2, 16] int16:
    the scales' fp16 bits (Q8_0 keeps fp16 scales), then sum_j q per group)."""
    q, scale = rowinv.pad_rows(q.to(torch.int8), TILE), rowinv.pad_rows(scale.float(), TILE)
    n, k = q.shape
    g = k // GROUP
    data = q.reshape(n // TILE, TILE, g, 8, 4).permute(0, 2, 3, 1, 4).contiguous()  # tile, group, chunk, o, k
    sums = torch.cat([b.reshape(-1, g, GROUP).sum(-1, dtype=torch.int32).to(torch.int16)  # |sum| <= 4,096
                      for b in q.split(SUM_ROWS)])  # a block of rows at a time: no int32 copy of the whole head
    dm = torch.stack([scale.half().view(torch.int16), sums]).reshape(2, n // TILE, TILE, g).permute(1, 3, 0, 2)
    dm = dm.contiguous()
    return data.reshape(n // TILE, g, 8, 4 * TILE), dm


def take_rows_q8(data: torch.Tensor, dm: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The `pack_q8` layout of stored rows `index` [M] (M a multiple of 16), in that order: the same bytes moved, the
    scales and group sums with their rows (no unpacking, no sums made again)."""
    tiles, g = data.shape[:2]
    m = index.numel()
    src, out = data.view(tiles, g, 8, TILE, 4), torch.empty(m // TILE, g, 8, TILE, 4, dtype=data.dtype)
    for a in range(0, m // TILE, SUM_ROWS // TILE):  # a block of tiles at a time: no second whole copy in between
        part = index[a * TILE:(a + SUM_ROWS // TILE) * TILE]
        rows = src[part // TILE, :, :, part % TILE, :]  # [M', G, 8, 4]
        out[a:a + part.numel() // TILE] = rows.reshape(-1, TILE, g, 8, 4).permute(0, 2, 3, 1, 4)
    t, o = index // TILE, index % TILE
    dm = dm[t, :, :, o].reshape(m // TILE, TILE, g, 2).permute(0, 2, 3, 1).contiguous()  # [M / 16, G, 2, 16]
    return out.reshape(m // TILE, g, 8, 4 * TILE), dm


def unpack_q8(data: torch.Tensor, dm: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `pack_q8`: (q, scale) of the first n rows."""
    tiles, g = data.shape[:2]
    q = data.reshape(tiles, g, 8, TILE, 4).permute(0, 3, 1, 2, 4).reshape(tiles * TILE, g * GROUP)
    return q[:n], dm[:, :, 0].permute(0, 2, 1).reshape(tiles * TILE, g)[:n].view(torch.float16).float()


def linear(x: torch.Tensor, nibbles: torch.Tensor, dm: torch.Tensor, n: int) -> torch.Tensor:
    """x W^T for 4-bit W (`pack`) with x rounded to 8 bits per group of 32 (module docstring); x fp32 or bf16
    [..., K]. The result has x's dtype."""
    return _call(library().linear_q4a8_ld, x, nibbles, dm, n)


def linear_q8(x: torch.Tensor, data: torch.Tensor, dm: torch.Tensor, n: int) -> torch.Tensor:
    """x W^T for 8-bit W (`pack_q8`), x rounded to 8 bits per group of 32."""
    return _call(library().linear_q8a8_ld, x, data, dm, n)


def linear_q8_map(x: torch.Tensor, data: torch.Tensor, dm: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """`linear_q8` of a head whose rows are stored in another order: stored row i's output goes to column cols[i]
    (int32, a permutation; csrc/quant.c's `linear_q8a8_map`, each output summed as `linear_q8` sums it)."""
    k, n = x.shape[-1], cols.numel()
    rows, y = rowinv._rows_and_out(x, n)
    m = rows.numel() // k
    kernel_library.check(library().linear_q8a8_map(rows.data_ptr(), m, k, data.data_ptr(), dm.data_ptr(), n, y.data_ptr(),
                                                   n, cols.data_ptr(), m, None, 0, torch.get_num_threads()), "8-bit head")
    return y if x.dtype is torch.float32 else y.to(x.dtype)


def embed_q8(ids: torch.Tensor, data: torch.Tensor, dm: torch.Tensor, stored: torch.Tensor | None, k: int) -> torch.Tensor:
    """Rows `ids` [...] of an 8-bit weight in `pack_q8`'s layout as fp32 [..., k], each weight q * scale (exact);
    stored: output row j's stored row (int64), or None (stored in order)."""
    rows = ids.reshape(-1).to(torch.int64).contiguous()
    out = torch.empty(*ids.shape, k)
    if stored is not None:
        stored = stored.to(torch.int64).contiguous()
    library().embed_q8a8(rows.data_ptr(), rows.numel(), k, data.data_ptr(), dm.data_ptr(),
                         None if stored is None else stored.data_ptr(), out.data_ptr())
    return out


def _call(fn, x: torch.Tensor, w: torch.Tensor, dm: torch.Tensor, n: int) -> torch.Tensor:
    k, width = x.shape[-1], w.shape[0] * TILE
    rows, y = rowinv._rows_and_out(x, width)  # contiguous fp32 rows, and the padded output
    kernel_library.check(fn(rows.data_ptr(), rows.numel() // k, k, w.data_ptr(), dm.data_ptr(), width, y.data_ptr(),
                            width, torch.get_num_threads()), "int4-a8 Linear")
    y = y if width == n else y[..., :n]
    return y if x.dtype is torch.float32 else y.to(x.dtype)

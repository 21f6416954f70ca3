"""A GGUF file's own groups for a Llama model's Linears, read one tensor at a time.

The decoder layers' Q4_1 tensors become (q, scale, low) (`from_q4_1`), the head's Q8_0 tensor (the output matrix,
or the tied token embedding) (q, scale) (`int8_head.from_q8_0`), rows in the model's order (llama.cpp stores q and k
rows permuted for its RoPE layout: `_row_order` undoes it). Each is checked against the model's own weight and
used only where it is that weight exactly (`FileGroups.take`).

The file's header is parsed once (`tensor_table`: the tensors' names, types and offsets) and each tensor's bytes are
then read into a buffer of its own when its Linear is packed, and let go: loading holds one tensor of the file at a
time, never the whole file mapped (SmolLM2's is 98 MB; its groups as loose tensors, 132 MB).
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import torch

from specstream_core.kernels.heads import int8_head

GROUP = 32  # elements per group (Q4_1's and Q8_0's block size)
# GGUF's names of a llama decoder layer's Linears -> the model's
GGUF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj"}
HEAD_NAMES = ("output.weight", "token_embd.weight")  # the head's own matrix first, then the tied embedding
CHECK_ROWS = 4096  # rows compared at a time: a head's check never holds a whole fp32 copy of it


def from_q4_1(raw: np.ndarray, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scale, low) from GGUF Q4_1 blocks [n, k / 32 * 20 bytes]: fp16 d, fp16 m, 16 bytes of nibbles
    (element j is the low nibble of byte j, element j + 16 its high nibble); w = d * q + m."""
    blocks = np.ascontiguousarray(raw).reshape(n, k // GROUP, 20)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    nibbles = blocks[..., 4:20]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).reshape(n, k)
    return torch.from_numpy(q.astype(np.uint8)), torch.from_numpy(d), torch.from_numpy(m)


def dequantize(q: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """q * scale + low rounded once to fp32, as the kernel makes each weight (fma)."""
    n, k = q.shape
    g = q.double().reshape(n, k // GROUP, GROUP)
    return (g * scale.double()[..., None] + low.double()[..., None]).float().reshape(n, k)


def _row_order(rows: int, n_head: int) -> np.ndarray:
    """llama.cpp stores q/k rows permuted for its RoPE layout; transformers' own GGUF reader undoes it.
    Apply that same function to row numbers to learn the order."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    return LlamaTensorProcessor()._reverse_permute_weights(np.arange(rows), n_head, n_head)


def _same(dequantized, groups: tuple, weight: torch.Tensor, model) -> bool:
    """Whether `dequantized(*groups)` is `weight` (one of `model`'s) bit for bit, compared CHECK_ROWS rows at a time
    (`int8_head.weight_rows`: from the checkpoint file where loading says how)."""
    if tuple(weight.shape) != tuple(groups[0].shape):
        return False
    return all(torch.equal(dequantized(*(g[r:r + CHECK_ROWS] for g in groups)),
                           int8_head.weight_rows(model, weight, r, r + CHECK_ROWS).float())
               for r in range(0, weight.shape[0], CHECK_ROWS))


# ---- the file's header -----------------------------------------------------------------------------
BLOCKS = {3: ("Q4_1", 20), 8: ("Q8_0", 34)}  # GGML type id -> (name, bytes per block of 32); other types are skipped
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes


class _Header:
    """Reads a GGUF header (little-endian, version 2 or 3) from the file's start, value by value."""

    def __init__(self, f):
        self.f = f

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError("truncated GGUF header")
        return struct.unpack("<" + fmt, data)

    def string(self) -> bytes:
        return self.f.read(self.take("Q")[0])

    def skip_value(self, kind: int):
        if kind == 8:
            self.f.seek(self.take("Q")[0], 1)
        elif kind == 9:
            item, count = self.take("IQ")
            if item in _SCALARS:
                self.f.seek(_SCALARS[item] * count, 1)
            else:
                for _ in range(count):
                    self.skip_value(item)
        else:
            self.f.seek(_SCALARS[kind], 1)


def tensor_table(path: str) -> list[tuple[str, str, int, int]]:
    """(name, type name, absolute offset, bytes) of the file's Q4_1 and Q8_0 tensors, from its header alone (gguf's own
    reader builds an object per value of the metadata, the tokenizer's ~100,000 strings included: seconds)."""
    alignment, infos = 32, []
    with open(path, "rb") as f:
        h = _Header(f)
        magic, version = h.take("4sI")
        if magic != b"GGUF" or version not in (2, 3):
            raise ValueError(f"{path}: not a GGUF file of version 2 or 3")
        n_tensors, n_values = h.take("QQ")
        for _ in range(n_values):
            key, kind = h.string(), h.take("I")[0]
            if key == b"general.alignment" and kind == 4:
                alignment = h.take("I")[0]
            else:
                h.skip_value(kind)
        for _ in range(n_tensors):
            name = h.string().decode()
            dims = h.take("Q" * h.take("I")[0])
            kind, offset = h.take("IQ")
            infos.append((name, dims, kind, offset))
        start = -(-f.tell() // alignment) * alignment
    return [(name, BLOCKS[kind][0], start + offset, math.prod(dims) // GROUP * BLOCKS[kind][1])
            for name, dims, kind, offset in infos if kind in BLOCKS]


class FileGroups:
    """The Q4_1 and Q8_0 tensors of a llama GGUF file by the keys of `int4._linears` ("<layer>.<module path>",
    "lm_head"), read on demand (`take`)."""

    def __init__(self, path: str, config):
        self.path = path
        self.heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
        self.tensors: dict[str, list[tuple]] = {}  # key -> [(kind, type name, offset, bytes)], file order
        if config.model_type != "llama":
            return
        for name, type_name, offset, size in tensor_table(path):  # the header only: `take` reads each tensor's bytes
            parts = name.split(".")
            if name in HEAD_NAMES and type_name == "Q8_0":
                key, kind = "lm_head", "head"
            elif type_name == "Q4_1" and len(parts) == 4 and parts[0] == "blk" and parts[2] in GGUF_NAMES:
                key, kind = f"{parts[1]}.{GGUF_NAMES[parts[2]]}", parts[2]
            else:
                continue
            self.tensors.setdefault(key, []).append((kind, type_name, offset, size))

    def keys(self):
        return self.tensors.keys()

    def __contains__(self, key: str) -> bool:
        return key in self.tensors

    def _read(self, offset: int, size: int) -> np.ndarray:
        with open(self.path, "rb") as f:
            data = os.pread(f.fileno(), size, offset)
        if len(data) != size:
            raise OSError(f"{self.path}: truncated tensor data")
        return np.frombuffer(data, dtype=np.uint8)

    def take(self, key: str, weight: torch.Tensor, model=None) -> tuple | None:
        """The file's groups for the Linear under `key` whose weight [N, K] is `weight` (`model`'s): (q, scale, low) of a
        decoder Linear, (q, scale) of the head, where they dequantize to `weight` bit for bit; else None."""
        n, k = weight.shape
        for kind, _, offset, size in self.tensors.get(key, ()):
            if kind == "head":
                groups = int8_head.from_q8_0(self._read(offset, size), n, k)
                if _same(int8_head.dequantize, groups, weight, model):
                    return groups
                continue
            q, scale, low = from_q4_1(self._read(offset, size), n, k)
            if kind in self.heads:
                order = torch.from_numpy(_row_order(n, self.heads[kind]).copy())
                q, scale, low = q[order], scale[order], low[order]
            if _same(dequantize, (q, scale, low), weight, model):
                return q, scale, low
        return None

    def checked(self, linears: dict, model=None) -> dict[str, tuple]:
        """The Q4_1 tensors as (q, scale, low) per key of `linears` (the model's Linears by `int4._linears` key), rows in
        the model's order, and the Q8_0 head (the output matrix, or the tied token embedding) as (q, scale) under
        "lm_head"; each is checked against the model's own weight (`take`), and one that differs is left out. All of
        them at once (`take` reads each when it is used)."""
        out = {key: self.take(key, linears[key].weight, model) for key in self.keys() if key in linears}
        return {key: groups for key, groups in out.items() if groups is not None}

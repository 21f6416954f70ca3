"""The LM head of an int4 model in 8-bit groups, as GGUF's Q8_0 keeps it: 32 signed bytes and a scale per
group along the input, w = q * scale (`rowinv.linear_q8`).

The head is the largest single matrix of a small model (SmolLM2: 49,152 x 576, 113 MB in fp32, 30 MB in
Q8_0) and every pass reads it, so in an int4 model it was the one fp32 matrix and cost a third of a plain
pass. llama.cpp keeps heads and token embeddings at 8 bits for the same reason: 4 bits there change the
output (on the default model 14 of 15 prompts, docs/BENCHMARKS.md; tests/test_int4_head.py shows it in small). Where the base was converted from a
GGUF file whose head is Q8_0 (the default model's tied token embedding), these are the file's own groups,
so the head holds the fp32 model's weights exactly (its fp16 scales times int8 are exact in fp32); the
kernel sums them per group, a different order from the fp32 kernel's.

On the kernel the activations and sums stay fp32 and each row is summed in one fixed order (row-invariant,
like every Linear of the decoding path). Without it (no kernel here, `SPECSTREAM_KERNEL=torch`, inside
`rowinv.torch_linears()`, or with gradients) the layer multiplies by its dequantized fp32 weight, made on
first use; that matmul is not row-invariant, so int4 models without the kernel keep a 4-bit head
(`int4.quantize_model`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from specstream_core.errors import SpecstreamError
from specstream_core.model import compat
from specstream_core.kernels.linears import int4_a8, rowinv

GROUP = 32  # elements per scale (Q8_0's block size)


class Int8Linear(nn.Module):
    """y = x W^T (+ b) with W in 8-bit groups (module docstring). Output rows are padded to a multiple of 4
    (the last row repeated, its outputs dropped). `rows` cuts it to some outputs (a draft vocabulary)."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None,
                 kernel: bool | None = None, a8: bool = False):
        """q: integers -128..127 [N, K]; scale: [N, K / GROUP] (w = q * scale). a8: against 8-bit activations
        (int4-a8, `kernels/linears/int4_a8.py`; another layout of the same groups)."""
        super().__init__()
        n, k = q.shape
        if k % GROUP or scale.shape != (n, k // GROUP):
            raise SpecstreamError(f"8-bit weights need groups of {GROUP} along the input (got {tuple(q.shape)})")
        self.in_features, self.out_features = k, n
        self.kernel = rowinv.available() if kernel is None else kernel
        self.a8 = a8
        if a8 and not (self.kernel and int4_a8.available()):
            raise SpecstreamError(int4_a8.unavailable_reason() or "int4-a8 runs on the row-invariant kernel only")
        if a8:
            q8, d = int4_a8.pack_q8(q, scale)  # [N' / 16, G, 8, 64], [N' / 16, G, 2, 16]
        else:
            q, scale = rowinv.pad_rows(q.to(torch.int8)), rowinv.pad_rows(scale.float())
            q8, d = rowinv.to_blocks(q, k // GROUP), rowinv.to_blocks(scale, k // GROUP)  # [N'/4, G, 4, 32], [N'/4, G, 4, 1]
        self.register_buffer("q8", q8, persistent=False)
        self.register_buffer("d", d, persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach().float(), persistent=False)
        self._weight: torch.Tensor | None = None  # the dequantized weight, for the torch path

    def groups(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(q, scale) of the layer's N output rows."""
        if self.a8:
            return int4_a8.unpack_q8(self.q8, self.d, self.out_features)
        return rowinv.from_blocks(self.q8, self.out_features), rowinv.from_blocks(self.d, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel and rowinv.takes(x):
            y = (int4_a8.linear_q8 if self.a8 else rowinv.linear_q8)(x, self.q8, self.d, self.out_features)
        else:
            if self._weight is None:
                self._weight = self.dequantized()
            y = F.linear(x.float(), self._weight).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def rows(self, index: torch.Tensor, a8: bool | None = None) -> "Int8Linear":
        """The same layer restricted to output rows `index` (a draft vocabulary's slice of the head); a8: against 8-bit
        activations or not (default: as this layer)."""
        index = index.to(torch.long).cpu()
        q, scale = self.groups()
        bias = None if self.bias is None else self.bias[index]
        return Int8Linear(q[index], scale[index], bias, kernel=self.kernel, a8=self.a8 if a8 is None else a8)

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight [N, K], q * scale."""
        return dequantize(*self.groups())

    def extra_repr(self) -> str:
        where = ("row-invariant kernel, 8-bit activations" if self.a8 else "row-invariant kernel") if self.kernel else "torch"
        return f"in_features={self.in_features}, out_features={self.out_features}, group={GROUP}, 8-bit on {where}"


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_0's rule: per group of 32, scale = max |w| / 127 and q = round(w / scale)."""
    w = weight.detach().float()
    n, k = w.shape
    if k % GROUP:
        raise SpecstreamError(f"8-bit groups need input sizes that are multiples of {GROUP} (got {k})")
    g = w.reshape(n, k // GROUP, GROUP)
    scale = g.abs().amax(-1) / 127
    q = torch.round(g / scale.clamp_min(1e-30)[..., None]).clamp_(-127, 127)
    return q.reshape(n, k).to(torch.int8), scale


def exact_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(q, scale) whose `dequantize` is `weight` bit for bit (a head converted from a Q8_0 file: its fp16 scales
    times int8 are exact in fp32, and Q8_0's rule finds them again), or None where the weight is anything else."""
    w = weight.detach()
    if w.dtype is not torch.float32 or w.dim() != 2 or w.shape[1] % GROUP or not torch.isfinite(w).all():
        return None
    q, scale = quantize_groups(w)
    return (q, scale) if torch.equal(dequantize(q, scale), w) else None


def use_exact_head(model: nn.Module) -> bool:
    """Give an fp32 model on the row-invariant kernel an 8-bit head where its weights are 8-bit groups exactly
    (`exact_groups`); its logits stay the fp32 head's bit for bit (`rowinv.linear_q8` makes each weight d q in fp32
    and sums as `rowinv.linear` sums), from a quarter of the bytes (SmolLM2: 31.5 MB a pass instead of 113, the
    largest single read of an fp32 pass). The token embedding keeps its fp32 weight. Returns whether it did.
    For decoding (`Engine.load`): training, Medusa heads and the layer draft read the head's `weight`, which the
    8-bit head does not have."""
    head = compat.lm_head(model)
    if not isinstance(head, rowinv.RowInvariantLinear) or head.bias is not None:
        return False
    groups = exact_groups(head.weight)
    if groups is None:
        return False
    compat.causal_lm(model).lm_head = Int8Linear(*groups, kernel=True)
    model.config.specstream_head = "8-bit groups, exactly the fp32 weights"
    return True


def from_q8_0(raw: np.ndarray, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) from GGUF Q8_0 blocks [n, k / 32 * 34 bytes]: fp16 d, then 32 signed bytes; w = d * q."""
    blocks = np.ascontiguousarray(raw).reshape(n, k // GROUP, 34)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    q = blocks[..., 2:].copy().view(np.int8).reshape(n, k)
    return torch.from_numpy(q), torch.from_numpy(d)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    n, k = q.shape
    return (q.float().reshape(n, k // GROUP, GROUP) * scale[..., None]).reshape(n, k)

"""torch as a backend: torch's Linears and sdpa (no compiler or AVX2 here, `SPECSTREAM_KERNEL=torch`, nf4 and int8,
CUDA).

int4 without the kernel runs torch's own int4 kernel (`aten._weight_int4pack_mm_for_cpu`), which is row-invariant as
it ships: there a decoding step attends row-exact (one one-row sdpa call per main row, `compat.row_exact_attention`)
and the direct layer steps are bound, so speculative output equals plain decoding, and plain decoding equals
transformers' generate on that model bit for bit (sdpa's own arithmetic is kept: those Linears round activations to
bf16, where a last-bit difference in attention would often change a token).
"""

from __future__ import annotations

from torch import nn

from specstream_core.backends.base import Backend
from specstream_core.model.precisions import INT4


class TorchBackend(Backend):
    """torch's Linears; row-exact where they are row-invariant (4-bit groups on torch's int4 kernel)."""

    def __init__(self, model: nn.Module, precision: str, streams=None):
        self.row_exact = precision in INT4
        super().__init__(model, precision, streams)

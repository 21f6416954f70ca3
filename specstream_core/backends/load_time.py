"""What loading asks of the kernels before any backend exists: the kernel choices, whether int4-a8 runs here, the
int4 quantization of a model's Linears and the row-invariant Linears installed in their place.

`model.loading` owns the checkpoint (its files, its weight reader `CheckpointRows`, a GGUF source) and passes what
the kernels need as arguments; this module only calls the kernel layer.
"""

from __future__ import annotations

import torch
from torch import nn

from specstream_core.model import compat
from specstream_core.kernels.linears import int4, int4_a8, rowinv

KERNELS = rowinv.KERNELS  # auto: the row-invariant kernel where it can run; rowinv; torch: never
WEIGHT_ROWS = int4.WEIGHT_ROWS  # where a loaded model keeps its weight reader (`int8_head.weight_rows`)


def kernel_runs(precision: str, device: str, kernel: str) -> bool:
    """Whether a model loaded at `precision` on `device` with `kernel` ("auto", "rowinv", "torch") would have its
    Linears on the row-invariant CPU kernel here."""
    return rowinv.kernel_for(precision, device, kernel)


def a8_available() -> bool:
    """Whether the kernel's build here computes int4-a8 (AVX512-VNNI)."""
    return int4_a8.available()


def a8_unavailable_reason() -> str:
    """Why int4-a8 does not run here ("" where it does)."""
    return int4_a8.unavailable_reason()


def set_weight_rows(model: nn.Module, reader) -> None:
    """Leave `reader` (rows of the model's weights as in their files) where the kernels' checks look for it."""
    model.__dict__[WEIGHT_ROWS] = reader


def weight_rows(model: nn.Module):
    """The reader `set_weight_rows` left on `model`, or None."""
    return model.__dict__.get(WEIGHT_ROWS)


def quantize_int4(model: nn.Module, source: str | None, kernel: bool, a8: bool = False) -> dict:
    """4-bit decoder Linears and an 8-bit head (kernels/linears/int4.py), on the row-invariant kernel or through
    torch; with `source` (a GGUF file) its own groups, each read as its Linear is packed. Returns the report
    (`int4.quantize_model`)."""
    groups = int4.file_groups(source, model) if source else {}
    return int4.quantize_model(model, groups, kernel=kernel, a8=a8)


def install_linears(model: nn.Module, kernel: str, weight_dtype: torch.dtype) -> None:
    """The model's Linears replaced by the row-invariant kernel's, keeping weights in `weight_dtype`; a decoder
    Linear's original weight is then let go through the model's weight reader where it has one (`release_copied`)."""
    rowinv.install(model, kernel, weight_dtype)
    release_copied(model, weight_rows(model))


def release_copied(model: nn.Module, reader) -> None:
    """Let the pages of each decoder layer's weights the kernel has copied go (`reader.release`); none without a
    reader."""
    for layer in compat.decoder_layers(model) if reader is not None else ():  # fp32 Linears: kept as their copies
        for module in layer.modules():
            if isinstance(module, rowinv.RowInvariantLinear):
                rowinv.release_after_copy(module.weight, reader.release)

"""What loading asks of the kernels before any backend exists: the kernel choices, whether int4-a8 runs here, the
int4 quantization of a model's Linears and the row-invariant Linears installed in their place.

`model.loading` owns the checkpoint (its files, its weight reader `CheckpointRows`, a GGUF source) and passes what
the kernels need as arguments; this module only calls the kernel layer.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from specstream_core.model import compat
from specstream_core.kernels.linears import int4, int4_a8, pack_cache, rowinv

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
    torch; with `source` (a GGUF file) its own groups, each read as its Linear is packed. The packed layers are
    loaded from the kernel cache where a former load of the same files and build left them (`pack_cache`), and left
    there otherwise. Returns the report (`int4.quantize_model`)."""
    entry = pack_key(model, source, {"kind": "int4", "a8": a8, "kernel": kernel})
    model.__dict__[pack_cache.MODEL_KEY] = entry
    found = pack_cache.read(entry) if entry else None
    made: dict = {}
    if found is not None:
        report = int4.quantize_model(model, kernel=kernel, a8=a8, layouts=pack_cache.unflatten(*found), made=made)
    else:
        groups = int4.file_groups(source, model) if source else {}
        report = int4.quantize_model(model, groups, kernel=kernel, a8=a8, made=made)
        if entry:
            pack_cache.write(entry, *pack_cache.flatten(made, report))
    if "lm_head" in made and hasattr(made["lm_head"], "pack_key"):  # its layouts for a draft vocabulary, cached too
        made["lm_head"].pack_key = entry
    return report


def pack_key(model: nn.Module, source: str | None, asked: dict) -> str | None:
    """The kernel cache's key for what loading packs from `model`'s checkpoint files (and `source`, a GGUF file) as
    `asked` says (`pack_cache.key`); None where the weights are not those files' (no weight reader: a merged LoRA, a
    model made in memory) or the cache is off."""
    reader = weight_rows(model)
    files = getattr(reader, "files", None)
    if not files or not pack_cache.enabled():
        return None
    roles = {f"checkpoint/{os.path.basename(f)}": f for f in files}
    config = os.path.join(os.path.dirname(files[0]), "config.json")
    roles.update({"config": config} if os.path.isfile(config) else {})
    roles.update({"gguf": source} if source else {})
    try:
        return pack_cache.key(roles, asked)
    except OSError:
        return None


def install_linears(model: nn.Module, kernel: str, weight_dtype: torch.dtype) -> None:
    """The model's Linears replaced by the row-invariant kernel's, keeping weights in `weight_dtype`; a decoder
    Linear's original weight is then let go through the model's weight reader where it has one (`release_copied`)."""
    reader = weight_rows(model)
    rowinv.install(model, kernel, weight_dtype, release=None if reader is None else reader.release)
    release_copied(model, reader)


def release_copied(model: nn.Module, reader) -> None:
    """Let the pages of each decoder layer's weights the kernel has copied go (`reader.release`); none without a
    reader."""
    for layer in compat.decoder_layers(model) if reader is not None else ():  # fp32 Linears: kept as their copies
        for module in layer.modules():
            if isinstance(module, rowinv.RowInvariantLinear):
                rowinv.release_after_copy(module.weight, reader.release)

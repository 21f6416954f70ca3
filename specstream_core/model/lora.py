"""Shared-mode stream sets carry a peft LoRA for the base weights (`lora/` beside the streams): merged
into the base model when loaded for decoding."""

from __future__ import annotations

import os
import warnings

from specstream_core.errors import SpecstreamError
from specstream_core.model.stream_config import LORA_DIR, read_stream_config


def has_shared_lora(streams_dir: str) -> bool:
    """Whether loading with this stream directory merges a LoRA into the base weights (a shared-mode set)."""
    return read_stream_config(streams_dir).mode == "shared"


def apply_shared_lora(model, streams_dir: str):
    """Shared mode: merge the peft LoRA stored beside the streams into the base weights."""
    lora = os.path.join(streams_dir, LORA_DIR)
    if not has_shared_lora(streams_dir):
        return model
    if not os.path.isdir(lora):
        raise SpecstreamError(f"shared-mode streams in {streams_dir} lack their LoRA adapter directory {LORA_DIR}/")
    try:
        from peft import PeftModel

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peft_model = PeftModel.from_pretrained(model, lora)
        return peft_model.merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise SpecstreamError(f"cannot load the shared-mode LoRA in {lora}: {str(exc).splitlines()[0]}") from None


def read_shared_lora(streams_dir: str) -> dict | None:
    """The tensors of a shared-mode set's LoRA (as peft saved them), or None for a set without one."""
    lora = os.path.join(streams_dir, LORA_DIR)
    if read_stream_config(streams_dir).mode != "shared" or not os.path.isdir(lora):
        return None
    from peft.utils import load_peft_weights

    try:
        return load_peft_weights(lora, device="cpu")
    except (OSError, ValueError, RuntimeError) as exc:  # safetensors' own error is a RuntimeError subclass
        raise SpecstreamError(f"cannot read the shared-mode LoRA in {lora}: {str(exc).splitlines()[0]}") from None

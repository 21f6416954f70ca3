"""Checkpoints of stream training: one file replaced atomically (`checkpoint.save_atomic`), holding the
trainable tensors, the optimizer, scheduler and data-order RNG states (so a resumed run is bit-identical
to an uninterrupted one) and the run's identity (base model fingerprint, settings, data fingerprint)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict

import torch
from safetensors.torch import load_file

from specstream_core.errors import SpecstreamError
from specstream_core.model.streams import LORA_DIR
from specstream_core.training import checkpoint
from specstream_core.training.config import TrainConfig, settings_differences

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_VERSION = 2


def run_identity(model, cfg: TrainConfig, train_data) -> dict:
    """What a checkpoint must match to be resumed: the base model, the settings and the training data."""
    return {"base_model": checkpoint.model_fingerprint(model),
            "base_name": str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")),
            "settings": asdict(cfg),
            "data": checkpoint.tensor_fingerprint(*train_data)}


def require_checkpoint(out_dir: str, every: int) -> None:
    """--resume with nothing to resume is an error (not a silent fresh start)."""
    ckpt = os.path.join(out_dir, CHECKPOINT_DIR)
    if not _checkpoint_exists(ckpt):
        raise SpecstreamError(f"--resume: there is no checkpoint in {ckpt} to resume from (one is written every "
                              f"{every} steps); run without --resume to start fresh")


def _checkpoint_exists(ckpt: str) -> bool:
    return os.path.isfile(os.path.join(ckpt, CHECKPOINT_FILE)) or os.path.isfile(os.path.join(ckpt, "state.json"))


def _lora_state(model, streams) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    with streams.unwrapped():  # the LoRA's own names, whatever row adapters wrap its Linears
        return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def _save_checkpoint(ckpt, step, history, identity, model, streams, optimizer, scheduler, gen) -> None:
    state = {"version": CHECKPOINT_VERSION, "step": step, "history": history, "identity": identity,
             "streams": streams.state_tensors(),
             "lora": _lora_state(model, streams) if streams.cfg.mode == "shared" else {},
             "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "data_rng": gen.get_state()}
    checkpoint.save_atomic(state, os.path.join(ckpt, CHECKPOINT_FILE))


def _identity_differences(saved: dict, current: dict) -> list[str]:
    diffs = []
    if saved.get("base_model") != current["base_model"]:
        diffs.append(f"base model {saved.get('base_name') or '?'!r} (fingerprint {saved.get('base_model')}) -> "
                     f"{current['base_name'] or '?'!r} (fingerprint {current['base_model']})")
    diffs += settings_differences(saved.get("settings", {}), current["settings"], TrainConfig)
    if saved.get("data") != current["data"]:
        diffs.append(f"training data (fingerprint {saved.get('data')} -> {current['data']})")
    return diffs


def _check_tensors(ckpt: str, what: str, saved: dict, own: dict) -> None:
    missing, unexpected = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if missing or unexpected:
        raise SpecstreamError(f"cannot resume from {ckpt}: its {what} tensors do not match this run "
                              f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, tensor in own.items():
        if tuple(saved[name].shape) != tuple(tensor.shape):
            raise SpecstreamError(f"cannot resume from {ckpt}: {what} tensor {name} has shape {tuple(saved[name].shape)} "
                                  f"there and {tuple(tensor.shape)} in this run")


def _load_checkpoint(ckpt, identity, model, streams, optimizer, scheduler, gen, log=print):
    path = os.path.join(ckpt, CHECKPOINT_FILE)
    if os.path.isfile(path):
        state = checkpoint.load(path)
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
            raise SpecstreamError(f"cannot resume from {path}: not a version-{CHECKPOINT_VERSION} training checkpoint")
        diffs = _identity_differences(state.get("identity", {}), identity)
        if diffs:
            raise SpecstreamError(f"cannot resume from {ckpt}: it was made with a different " + "; ".join(diffs) +
                                  ". Resume with the same base model, settings and data, or remove the folder "
                                  "to start over")
        planned = state["identity"]["settings"].get("steps")
        if planned != identity["settings"]["steps"]:
            log(f"note: steps changed from {planned} to {identity['settings']['steps']}: the learning-rate schedule "
                f"follows the new number from here on")
    else:
        state = _read_legacy_checkpoint(ckpt)
        log(f"note: {ckpt} was written by an older version (several files, no record of the base model, "
            f"settings or data): only tensor names and shapes can be checked")
    _check_tensors(ckpt, "stream", state["streams"], streams.state_tensors())
    if streams.cfg.mode == "shared":
        _check_tensors(ckpt, "LoRA", state["lora"], _lora_state(model, streams))
    with torch.no_grad():
        for name, target in streams.named_tensors().items():
            target.copy_(state["streams"][name])
    if streams.cfg.mode == "shared":
        from peft import set_peft_model_state_dict

        with streams.unwrapped():
            set_peft_model_state_dict(model, state["lora"])
    try:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    except (ValueError, KeyError, RuntimeError) as exc:
        raise SpecstreamError(f"cannot resume from {ckpt}: its optimizer state does not fit this run ({exc})") from None
    step = int(state["step"])
    if state.get("data_rng") is not None:
        gen.set_state(state["data_rng"])
    else:  # an older checkpoint: the batch order continues as the older version did
        gen.manual_seed(int(identity["settings"]["seed"]) + step)
    return step, list(state["history"])


def _read_legacy_checkpoint(ckpt: str) -> dict:
    """A checkpoint folder of the older multi-file format (state.json, streams, lora/, optimizer.pt)."""
    try:
        with open(os.path.join(ckpt, "state.json")) as f:
            state = json.load(f)
        lora_file = os.path.join(ckpt, LORA_DIR, "adapter_model.safetensors")
        opt = checkpoint.load(os.path.join(ckpt, "optimizer.pt"))
        return {"step": state["step"], "history": state["history"],
                "streams": load_file(os.path.join(ckpt, "streams.safetensors")),
                "lora": load_file(lora_file) if os.path.isfile(lora_file) else {},
                "optimizer": opt["optimizer"], "scheduler": opt["scheduler"], "data_rng": None}
    except SpecstreamError:
        raise
    except Exception as exc:  # noqa: BLE001 - a half-written old-format checkpoint: say so
        raise SpecstreamError(f"cannot resume from {ckpt}: an incomplete older-format checkpoint "
                              f"({type(exc).__name__}: {exc}); remove the folder to start over") from None

"""Checkpoints a kill cannot corrupt, and the fingerprints that tie saved work to a model and its data.

- `save_atomic(obj, path)`: `torch.save` to a temporary file beside `path`, fsync it, rename it over
  `path` (`os.replace`, atomic on POSIX) and fsync the folder. A kill at any moment leaves either the
  old complete file or the new complete file, never a mix; a stale temporary file is ignored and
  replaced by the next save.
- `load(path)`: `torch.load(..., weights_only=True)` — tensors and plain Python values only, never
  code from the file — with a clear error for an unreadable file.
- `model_fingerprint(model)`: a short hash of the architecture and the weights (every parameter's
  name, shape, dtype and first and last values), cheap even for a large model; `tensor_fingerprint`
  hashes data tensors whole.
- `save_run` / `restore_run`: the resumable checkpoint of a trainer whose trained tensors are few (layer
  draft, Medusa heads), checked against the run's settings on resume.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict

import torch

from specstream_core.errors import SpecstreamError
from specstream_core.training.config import settings_differences

SAMPLE = 2048  # values taken from each end of every parameter for the model fingerprint


def save_atomic(obj, path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(folder)


def fsync_dir(folder: str) -> None:
    """Make a rename in `folder` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path: str, what: str = "checkpoint"):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise SpecstreamError(f"{what} {path} does not exist") from None
    except Exception as exc:  # noqa: BLE001 - pickle, zip and weights_only errors all mean "not a usable file"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecstreamError(f"cannot read {what} {path}: {first}") from None


def model_fingerprint(model) -> str:
    """Names one set of base weights: equal for the same model loaded twice, different after any training."""
    h = hashlib.sha256(str(getattr(model.config, "model_type", "")).encode())
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
            for part in (flat[:SAMPLE], flat[-SAMPLE:]):
                h.update(part.to("cpu", torch.float32).numpy().tobytes())
    return h.hexdigest()[:16]


def tensor_fingerprint(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().to("cpu").contiguous()
        h.update(f"{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def save_run(path: str, cfg, state, trained: dict[str, torch.Tensor], optimizer, scheduler, gen) -> None:
    """A resumable checkpoint of a run (layer draft, Medusa heads): its settings (`asdict(cfg)`), the loop's
    state, the trained tensors, the optimizer, scheduler and data-order RNG states."""
    save_atomic({"config": asdict(cfg), "step": state.step, "elapsed": state.elapsed, "tokens": state.tokens,
                 "history": state.history, "trained": {n: t.detach().clone() for n, t in trained.items()},
                 "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "data_rng": gen.get_state()}, path)


def restore_run(path: str, cfg, trained: dict[str, torch.Tensor], optimizer, scheduler, gen, what: str) -> dict:
    """Load `save_run`'s checkpoint into `trained` and the optimizer, scheduler and RNG; an error naming the
    settings that differ (`settings_differences`). Returns the loop's state: step, elapsed, tokens, history."""
    saved = load(path, what)
    changed = settings_differences(saved["config"], asdict(cfg), type(cfg))
    if changed:
        raise SpecstreamError(f"the checkpoint in {path} was made with other settings ({'; '.join(changed)})")
    missing = sorted(set(trained) - set(saved["trained"]))
    if missing:
        raise SpecstreamError(f"the checkpoint in {path} lacks {missing[:3]}")
    with torch.no_grad():
        for name, target in trained.items():
            target.copy_(saved["trained"][name])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    gen.set_state(saved["data_rng"])
    return {k: saved[k] for k in ("step", "elapsed", "tokens", "history")}

"""What differs between the CPU and a CUDA device, in one place: the dtype nf4 computes in, and a clock that
waits for the device before it reads the time.

    dtype = nf4_compute_dtype("cuda")        # bf16 where the GPU supports it, else fp16; fp32 on the CPU
    with SyncTimer(model.device) as t:       # torch.cuda.synchronize before and after on cuda; nothing on CPU
        step()
    t.elapsed                                # seconds of device work, not just of launching it

CUDA runs kernels asynchronously: without a sync a clock read after a pass measures the launches, and the
pass's tail is charged to whatever is timed next (in the lab's race, the other decoder).
"""

from __future__ import annotations

import time
from typing import Callable

import torch


def nf4_compute_dtype(device, bf16_supported: Callable[[], bool] | None = None) -> torch.dtype:
    """bitsandbytes' 4-bit compute dtype: fp32 on the CPU (its exact path, `loading.make_nf4_exact`), bf16 on
    a GPU that has it (Ampere and later), fp16 on older ones (T4, V100). fp32 on a GPU would be the slowest."""
    if torch.device(device).type != "cuda":
        return torch.float32
    supported = bf16_supported if bf16_supported is not None else torch.cuda.is_bf16_supported
    return torch.bfloat16 if supported() else torch.float16


def synchronizer(device) -> Callable[[], None]:
    """The call that waits for `device`'s queued work: torch.cuda.synchronize(device) on cuda, else nothing."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


SYNC_FREE_ROPE = ("cuda",)  # devices whose RoPE table is made for every position at once (compat._rope_table)


def rope_positions_limit(module, device: torch.device) -> int | None:
    """How many positions a rotary module serves (the model's `max_position_embeddings`, which the engine never
    exceeds) on a SYNC_FREE_ROPE device, where reading a pass's largest position would make the host wait for
    the device; None elsewhere (on the CPU that read costs nothing) or when the module does not say."""
    limit = getattr(module, "original_max_seq_len", None) or getattr(module, "max_seq_len_cached", None)
    return int(limit) if device.type in SYNC_FREE_ROPE and limit else None


class SyncTimer:
    """Times a block of device work: syncs before it starts (what was queued earlier is not charged to it)
    and before it stops (its own tail is). `sync` and `clock` may be replaced (tests)."""

    def __init__(self, device="cpu", sync: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.sync = sync if sync is not None else synchronizer(device)
        self.clock = clock
        self.elapsed = 0.0

    def now(self) -> float:
        self.sync()
        return self.clock()

    def __enter__(self) -> "SyncTimer":
        self._start = self.now()
        return self

    def __exit__(self, *exc) -> None:
        self.elapsed = self.now() - self._start

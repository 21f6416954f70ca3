"""The clock `pass-cost` and its roofline time with: wall time (the default), or this process's CPU time (`--clock
cpu`), which leaves out the time a pass spends preempted on a machine that other processes share (at one thread, the
two are the same on a quiet machine). The weights' reads still compete for memory with the other processes."""

from __future__ import annotations

import time

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_now = [time.perf_counter]


def now() -> float:
    """Seconds on the clock in use."""
    return _now[0]()


def use(name: str) -> None:
    """Time with the named clock (CLOCKS) from now on."""
    _now[0] = CLOCKS[name]


def name() -> str:
    return next(k for k, fn in CLOCKS.items() if fn is _now[0])

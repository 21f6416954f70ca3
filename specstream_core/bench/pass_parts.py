"""Where a pass's time goes, for engines on the row-invariant kernel: its Linears, its attention, and the
rest (norms, RoPE, activations, residual adds, the cache, Python: torch's per-op work in transformers'
own modules, which no roofline counts).

The kernel's entry points (`rowinv.linear`, `rowinv.linear_q4`, `rowinv.linear_q8`, `rowinv.attend`, int4-a8's
`int4_a8.linear` and `int4_a8.linear_q8`, bf16 on AMX tiles' `rowinv.linear_tiled` and `MergedHead.scores`, and the
one-call layer steps of decoding steps, `rowinv_steps.layer_front`, `layer_back`, `layer_step`, `layer_stack` and
`stream_stack`, counted with the Linears: their Linears are most of them, their attention, norms and SiLU inside
them) are wrapped with timers for a few extra rounds after `pass-cost` has timed the passes unwrapped; each part is a
median over those rounds. Set
next to the roofline, this says what remains: Linears ÷ their share of the roofline is how close the
weight reads come to this machine's bandwidth, and the rest is what no kernel call pays for.
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from specstream_core.bench import clocks
from specstream_core.kernels.linears import int4_a8, rowinv
from specstream_core.kernels.heads import merged_head
from specstream_core.kernels.steps import rowinv_steps


@dataclass
class Parts:
    linears_ms: float
    attention_ms: float
    rest_ms: float


def _timer(fn, spent: dict[str, float], part: str):
    """fn, with the time spent inside it added to spent[part]."""
    def timed(*args, **kwargs):
        t = clocks.now()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[part] += clocks.now() - t
    return timed


@contextmanager
def _timed(spent: dict[str, float]):
    """Inside, time spent in the kernel's Linears and attention adds up in `spent`."""
    kept = [(module, name, getattr(module, name)) for module, names in
            ((rowinv, ("linear", "linear_q4", "linear_q8", "attend", "linear_tiled")),
             (rowinv_steps, ("layer_front", "layer_back", "layer_step", "layer_stack", "stream_stack")),
             (int4_a8, ("linear", "linear_q8")), (merged_head.MergedHead, ("scores",)))
            for name in names]
    for module, name, fn in kept:
        setattr(module, name, _timer(fn, spent, "attention" if name == "attend" else "linears"))
    try:
        yield
    finally:
        for module, name, fn in kept:
            setattr(module, name, fn)


def measure_parts(kinds, rounds: int = 5) -> dict[str, Parts]:
    """kinds: (kind, label, nodes, run) as `pass_cost.measure` builds them, where run() makes one pass
    (inside the attention a decoding step uses). Returns each label's median parts."""
    per: dict[str, list[tuple[float, float, float]]] = {label: [] for _, label, _, _ in kinds}
    spent = {"linears": 0.0, "attention": 0.0}
    with torch.inference_mode(), _timed(spent):
        for _ in range(rounds):
            for _, label, _, run in kinds:
                spent.update(linears=0.0, attention=0.0)
                t = clocks.now()
                run()
                total = clocks.now() - t
                per[label].append((spent["linears"], spent["attention"], total - spent["linears"] - spent["attention"]))
    return {label: Parts(*(round(statistics.median(x[i] for x in v) * 1e3, 3) for i in range(3)))
            for label, v in per.items()}

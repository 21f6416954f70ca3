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

Below that (`Parts.below`): the head's read (the greedy choice or the merged head: main rows over the vocabulary,
stream rows over the draft vocabulary; `CertifiedHead.choose`, `MergedHead.scores`, the 8-bit head's calls), and inside
the one-call layer steps, by the kernel's own clock (csrc/clock.c), the layers of main rows only and the multi-stream
layers with their stream rows apart: their Linears, attention, stream-row adapters and the glue between them (norms,
RoPE and the cache write, SiLU, residual adds, copies); the kernel calls outside the layer steps; and Python with
torch's per-op work.
"""

from __future__ import annotations

import ctypes
import statistics
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from specstream_core.kernels import library
from specstream_core.bench import clocks
from specstream_core.kernels.linears import int4_a8, rowinv
from specstream_core.kernels.heads import certified_head, int8_head, merged_head
from specstream_core.kernels.steps import rowinv_steps

# the kernel clock's sections and parts (csrc/rowinv.h: CLK_MAIN, CLK_STREAM; CLK_LINEARS .. CLK_LAYERS), by name
SECTIONS = ("main", "stream")
CLOCK_PARTS = ("linears", "attention", "adapters", "layers")
BELOW = ("head", "main_linears", "main_attention", "main_glue", "stream_linears", "stream_attention", "stream_adapters",
         "stream_glue", "other_kernel", "python")


@dataclass
class Parts:
    linears_ms: float
    attention_ms: float
    rest_ms: float
    below: dict[str, float] | None = None  # BELOW's parts, ms (None: not measured)


def _timer(fn, spent: dict[str, float], part: str):
    """fn, with the time spent inside it added to spent[part]; a call inside another timed call counts once, in the
    outer one's part."""
    def timed(*args, **kwargs):
        spent["depth"] += 1
        t = clocks.now()
        try:
            return fn(*args, **kwargs)
        finally:
            spent["depth"] -= 1
            if not spent["depth"]:
                spent[part] += clocks.now() - t
    return timed


@contextmanager
def _timed(spent: dict[str, float]):
    """Inside, time spent in the kernel's Linears and attention adds up in `spent`."""
    kept = [(module, name, getattr(module, name)) for module, names in
            ((rowinv, ("linear", "linear_q4", "linear_q8", "attend", "linear_tiled")),
             (rowinv_steps, ("layer_front", "layer_back", "layer_step", "layer_stack", "stream_stack")),
             (int4_a8, ("linear",)), (int4_a8, ("linear_q8",)), (merged_head.MergedHead, ("scores",)),
             (certified_head.CertifiedHead, ("choose",)), (int8_head.Int8Linear, ("forward",)))
            for name in names]
    heads = {"scores", "choose", "forward", "linear_q8"}
    for module, name, fn in kept:
        setattr(module, name, _timer(fn, spent, "attention" if name == "attend" else "head" if name in heads else "linears"))
    try:
        yield
    finally:
        for module, name, fn in kept:
            setattr(module, name, fn)


def measure_parts(kinds, rounds: int = 5) -> dict[str, Parts]:
    """kinds: (kind, label, nodes, run) as `pass_cost.measure` builds them, where run() makes one pass
    (inside the attention a decoding step uses). Returns each label's median parts."""
    per: dict[str, list[tuple[float, ...]]] = {label: [] for _, label, _, _ in kinds}
    spent = {"linears": 0.0, "attention": 0.0, "head": 0.0, "depth": 0}
    lib = library.library()
    with torch.inference_mode(), _timed(spent):
        _clock(lib, True)
        try:
            for _ in range(rounds):
                for _, label, _, run in kinds:
                    spent.update(linears=0.0, attention=0.0, head=0.0)
                    _clock(lib, True)
                    t = clocks.now()
                    run()
                    total = clocks.now() - t
                    kernel = spent["linears"] + spent["attention"] + spent["head"]
                    per[label].append((spent["linears"] + spent["head"], spent["attention"], total - kernel,
                                       *_below(_clock(lib, True), spent["head"], kernel, total - kernel)))
        finally:
            _clock(lib, False)
    out = {}
    for label, v in per.items():
        med = [round(statistics.median(x[i] for x in v) * 1e3, 3) for i in range(len(v[0]))]
        out[label] = Parts(*med[:3], below=dict(zip(BELOW, med[3:])) if lib is not None else None)
    return out


def _clock(lib, on: bool) -> dict[str, dict[str, float]]:
    """The kernel clock's seconds since the last call {section: {part: s}} (then cleared), kept from now on or not."""
    if lib is None:
        return {s: dict.fromkeys(CLOCK_PARTS, 0.0) for s in SECTIONS}
    out = (ctypes.c_double * (len(SECTIONS) * len(CLOCK_PARTS)))()
    lib.kernel_clock(int(on), out)
    return {s: dict(zip(CLOCK_PARTS, out[i * len(CLOCK_PARTS):(i + 1) * len(CLOCK_PARTS)])) for i, s in enumerate(SECTIONS)}


def _below(clock: dict[str, dict[str, float]], head: float, kernel: float, python: float) -> tuple[float, ...]:
    """BELOW's parts (s) of one pass: the head, each section's parts and glue (its layers' time less its parts), the
    kernel calls outside layer steps and the head, Python."""
    parts, covered = [head], 0.0
    for section in SECTIONS:
        c = clock[section]
        inside = c["linears"] + c["attention"] + c["adapters"]
        parts += [c["linears"], c["attention"]] + ([c["adapters"]] if section == "stream" else [])
        parts.append(max(0.0, c["layers"] - inside))
        covered += max(c["layers"], inside)  # no whole-layer call (layer_front / layer_back): its parts alone
    return (*parts, max(0.0, kernel - head - covered), python)


def below_table(passes: list[dict]) -> list[str]:
    """Markdown lines of each pass's `Parts.below` (pass-cost's JSON records), or [] where none was measured."""
    if not all(isinstance(p.get("below"), dict) for p in passes):
        return []
    head = ("\nBelow that (ms; the layer steps' own clock, csrc/clock.c): the head's read; the layers of main rows only "
            "and the multi-stream layers carrying stream rows, each as Linears / attention / (adapters) / glue (norms, "
            "RoPE, cache writes, SiLU, residual adds); other kernel calls; Python and torch:\n")
    lines = [head, "| pass | head | main-row layers: Linears / attention / glue | stream layers: Linears / attention / "
             "adapters / glue | other kernel | Python + torch |", "|---|---|---|---|---|---|"]
    for p in passes:
        b = p["below"]
        main = " / ".join(f"{b[k]:.2f}" for k in ("main_linears", "main_attention", "main_glue"))
        stream = " / ".join(f"{b[k]:.2f}" for k in ("stream_linears", "stream_attention", "stream_adapters", "stream_glue"))
        lines.append(f"| {p['label']} | {b['head']:.2f} | {main} | {stream} | {b['other_kernel']:.2f} | {b['python']:.2f} |")
    return lines

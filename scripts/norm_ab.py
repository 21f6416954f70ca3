"""A/B of the kernel's RMSNorm (`rowinv.rmsnorm`: one call instead of the module's ~7 torch ops) against
the modules' own forward, on the kernel's engines, switched before every pass in one process
(alternating, 60 rounds), medians of pass-cost's passes as decoding steps run them
(`pass_cost.pass_kinds`).

    python scripts/norm_ab.py bf16      # or fp32; about 2 minutes on the default model
"""
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.bench import pass_cost  # noqa: E402
from specstream_core.kernels.linears import rowinv  # noqa: E402
from specstream_core.model import defaults  # noqa: E402

prec = sys.argv[1] if len(sys.argv) > 1 else "bf16"
eng = Engine.load(*defaults.resolve(None, None), precision=prec)  # the default model and its streams
norms = {m: type(m) for m in eng.model.modules() if isinstance(m, rowinv.RowInvariantNorm)}
assert norms, "no kernel norms installed: is the kernel available?"
VARIANTS = {"torch norms": False, "kernel norms": True}


def cuts(on: bool) -> None:
    for m, cls in norms.items():
        m.__class__ = cls if on else cls.__mro__[2]  # (RowInvariant<Norm>, RowInvariantNorm, <Norm>)


kinds, _ = pass_cost.pass_kinds(eng, verify_rows=(3,))
times = {(label, v): [] for _, label, _, _ in kinds for v in VARIANTS}
names = list(VARIANTS)
with torch.inference_mode():
    for r in range(60):
        for _, label, _, run in kinds:
            for v in names[r % 2:] + names[: r % 2]:
                cuts(VARIANTS[v])
                run()  # once to settle, once timed
                t = time.perf_counter()
                run()
                times[label, v].append(time.perf_counter() - t)
cuts(True)
print(f"{prec}, median ms of 60 passes each")
print("| pass | " + " | ".join(names) + " | kernel ÷ torch |\n|---|" + "---|" * (len(names) + 1))
for _, label, _, _ in kinds:
    ms = [statistics.median(times[label, v]) * 1e3 for v in names]
    print(f"| {label} | " + " | ".join(f"{x:.1f}" for x in ms) + f" | {ms[-1] / ms[0]:.3f} |")

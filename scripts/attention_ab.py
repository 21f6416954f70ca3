"""A/B of the row-exact attention on the kernel's engines: pass-cost's passes, as decoding steps run them,
with the kernel's attention (rowinv.attend, the default) and with one sdpa call per main row plus a masked
call for the stream rows (the fallback), alternating in one process (4 x 6 rounds each), medians.

    python scripts/attention_ab.py fp32      # or bf16; about 3 minutes on the default model
"""
import os
import statistics
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.bench import pass_cost  # noqa: E402
from specstream_core.kernels.linears import rowinv  # noqa: E402
from specstream_core.model import defaults  # noqa: E402
prec = sys.argv[1] if len(sys.argv) > 1 else "fp32"
eng = Engine.load(*defaults.resolve(None, None), precision=prec)  # the default model and its streams
res = {True: [], False: []}
for rep in range(4):
    for on in (True, False):
        Engine.kernel_attention = property(lambda self, on=on: rowinv.attend if on else None)
        costs = pass_cost.measure(eng, verify_rows=(3, 5), repeats=6, progress=False)
        res[on].append({c.label: c.ratio for c in costs} | {"plain ms": costs[0].median_ms})
for on in (True, False):
    labels = res[on][0]
    print(prec, "kernel attention" if on else "sdpa per main row",
          " ".join(f"{label}: {statistics.median(r[label] for r in res[on]):.2f}" for label in labels))

"""Cost of one Linear of the bundled model's shape (256 -> 1024, fp32) over m rows, relative to m = 1.

    .venv/bin/python scripts/matmul_rows.py [--threads 1]

Why a speculative pass costs more than a plain one on a CPU: verifying a 5-node tree multiplies 5
rows where plain decoding multiplies one (a matrix-vector product). Median of 7 timings per m.
"""

import argparse
import statistics
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    weight = torch.randn(1024, 256)
    base = None
    for m in (1, 2, 5, 9, 25):
        x = torch.randn(m, 256)
        for _ in range(200):
            torch.nn.functional.linear(x, weight)
        runs = []
        for _ in range(7):
            t = time.perf_counter()
            for _ in range(1000):
                torch.nn.functional.linear(x, weight)
            runs.append((time.perf_counter() - t) / 1000 * 1e6)
        med = statistics.median(runs)
        base = base or med
        print(f"m = {m:2d} rows: {med:7.1f} µs  ({med / base:.2f}× one row)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

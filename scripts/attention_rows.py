"""What the kernel's row-exact attention costs a layer (`rowinv.attend`): SmolLM2's heads (9 query heads over 3
key/value heads of 64), 1 to 20 rows of a step over 16 to 600 cached keys, each row seeing the prefix and the
rows before it; µs a call (median), the Python call included, and µs a (row, head).

    python scripts/attention_rows.py                      # ~5 s, one thread
    python scripts/attention_rows.py --against da17c5d    # that commit's kernel too, alternating (scripts/kernel_ab.py)
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from specstream_core.kernels.linears import rowinv  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", default="9,3,64", help="query heads, key/value heads, head size")
    p.add_argument("--keys", default="16,128,300,600")
    p.add_argument("--rows", default="1,4,8,20")
    p.add_argument("--repeats", type=int, default=300)
    p.add_argument("--against", help="a commit whose kernel to time as well, alternating with the working tree's")
    args = p.parse_args()
    if not rowinv.available():
        raise SystemExit(f"the kernel cannot run here: {rowinv.unavailable_reason()}")
    torch.set_num_threads(1)
    hq, hkv, d = (int(v) for v in args.heads.split(","))
    g = torch.Generator().manual_seed(0)
    libs = {"": rowinv.library()}
    if args.against:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from kernel_ab import kernels
        libs = {name: built[0][0] for name, built in kernels(args.against).items()}
    print(f"{hq} query heads / {hkv} key/value heads of {d}, {rowinv.isa()} build; µs a call (µs a row and head)"
          + (f"; each cell: {' / '.join(libs)}" if args.against else ""))
    print("cached keys | " + " | ".join(f"{r} rows" for r in args.rows.split(",")))
    for s in (int(v) for v in args.keys.split(",")):
        cells = []
        for n in (int(v) for v in args.rows.split(",")):
            q = torch.randn(hq, n, d, generator=g)
            k, v = torch.randn(hkv, s + n, d, generator=g), torch.randn(hkv, s + n, d, generator=g)
            spec = torch.tensor([[s + i + 1, -1] for i in range(n)], dtype=torch.int64).flatten()
            keys = torch.zeros(1, dtype=torch.int64)
            times = {name: [] for name in libs}
            for i in range(args.repeats + 20):
                for name, lib in libs.items():
                    rowinv._lib = lib
                    t = time.perf_counter()
                    rowinv.attend(q, k, v, spec, keys, d ** -0.5)
                    if i >= 20:
                        times[name].append(time.perf_counter() - t)
            us = [statistics.median(ts) * 1e6 for ts in times.values()]
            cells.append(" / ".join(f"{u:.1f} ({u / (n * hq):.2f})" for u in us))
        print(f"{s} | " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())

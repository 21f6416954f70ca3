"""What a row costs in a 4-bit Linear: int4 (fp32 activations, the fp32 model's arithmetic) against int4-a8
(8-bit activations, llama.cpp's), for 1..8 rows, streaming the weights of many layers from memory as a
decoding pass does (a 576 -> 1,536 layer, SmolLM2's MLP shape, 100 copies: 55 MB, beyond the L3 cache).

    python scripts/linear_rows.py            # ~1 minute, one thread
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from specstream_core.kernels.linears import int4, int4_a8  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=100)
    p.add_argument("--shape", default="1536x576", help="outputs x inputs")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    if not int4_a8.available():
        raise SystemExit(f"int4-a8 cannot run here: {int4_a8.unavailable_reason()}")
    torch.set_num_threads(1)
    n, k = (int(v) for v in args.shape.split("x"))
    g = torch.Generator().manual_seed(0)
    groups = [int4.quantize_groups(torch.randn(n, k, generator=g) * 0.05) for _ in range(args.layers)]
    kinds = {"int4": [int4.Int4Linear(*q, kernel=True) for q in groups],
             "int4-a8": [int4.Int4Linear(*q, kernel=True, a8=True) for q in groups]}
    print(f"{args.layers} layers {n}x{k}, µs a layer (best of {args.repeats}), kinds alternating per row count")
    print("rows | " + " | ".join(kinds) + " | int4-a8 ÷ int4")
    with torch.inference_mode():
        for rows in range(1, 9):
            x = torch.randn(rows, k, generator=g)
            best = {}
            for _ in range(args.repeats):
                for name, layers in kinds.items():
                    t0 = time.perf_counter()
                    for layer in layers:
                        layer(x)
                    best[name] = min(best.get(name, 1e9), (time.perf_counter() - t0) / len(layers) * 1e6)
            print(f"{rows} | {best['int4']:.1f} | {best['int4-a8']:.1f} | {best['int4-a8'] / best['int4']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

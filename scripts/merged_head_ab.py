"""The merged head (kernels/heads/merged_head.py) against the head and the draft head apart, in one process: the default model's
engine at one precision, speculative streaming with its stream set's draft (or the plain loop with --mode ar), the two
alternating per prompt (the order reversed every other prompt), one thread; prints the median per-prompt ratio. The
drafts are the same either way (tests/test_merged_head.py), so only the time differs.

    python scripts/merged_head_ab.py --precision int4-a8 --n 3    # ~2 minutes
"""
import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.model import defaults  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="int4-a8")
    p.add_argument("--mode", default="ss", choices=("ss", "ar"))
    p.add_argument("--n", type=int, default=3, help="eval prompts per category")
    args = p.parse_args()
    torch.set_num_threads(1)
    base, streams = defaults.resolve(None, None)
    engine = Engine.load(base, streams_dir=streams, precision=args.precision)
    merged = engine._merged_head()
    if merged is None:
        raise SystemExit(f"no merged head at {engine.precision} here (bf16 needs AMX tiles, int4-a8 AVX512-VNNI)")
    prompts = [x["prompt"] for c in suite_categories("corpus") for x in suite_examples("corpus", c, args.n)]
    cfg = engine.decode_config(mode=args.mode, max_new_tokens=64)
    engine.generate(prompts[0], cfg)  # warm-up
    ratios = []
    for i, prompt in enumerate(prompts):
        spent = {}
        for use in (True, False) if i % 2 == 0 else (False, True):
            engine._head_memo = (engine._head_memo[0], merged if use else None)
            t = time.perf_counter()
            engine.generate(prompt, cfg)
            spent[use] = time.perf_counter() - t
        ratios.append(spent[False] / spent[True])
    print(f"{engine.precision} {args.mode}: merged head / apart {statistics.median(ratios):.3f}x tokens/s "
          f"(median of {len(ratios)} eval prompts, 64 new tokens, one thread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

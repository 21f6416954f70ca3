"""The kernel's blocked weight layout (`rowinv.blocked`) against the row-major one it replaced, on the default
model: two engines of one precision, one loaded with blocked Linears (as shipped) and one with the row-major
kernel, decode the same eval prompts of the chat corpus (chat-wrapped, as `bench`) (plain loop and speculative streaming, the stream set's draft), one thread,
alternating per prompt in one process; prints tokens/s medians, the per-prompt ratio and that the tokens agree.

    python scripts/blocked_ab.py --precisions fp32,bf16 --n 2     # 8 categories x 2 eval prompts; ~6 minutes
"""
import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from specstream_core.decoding.config import DecodeConfig  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.model import defaults  # noqa: E402
from specstream_core.kernels.linears import rowinv  # noqa: E402
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402


def engines(precision: str) -> dict:
    base, streams = defaults.resolve(None, None)
    blocked = Engine.load(base, streams, precision=precision)
    made = rowinv.blocked
    rowinv.blocked = lambda weight: None  # every Linear of this engine keeps the row-major kernel (cached at load)
    try:
        row_major = Engine.load(base, streams, precision=precision)
    finally:
        rowinv.blocked = made
    return {"blocked": blocked, "row-major": row_major}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--n", type=int, default=2, help="eval prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(1)
    prompts = [e["prompt"] for c in suite_categories("chat") for e in suite_examples("chat", c, args.n)]  # as `bench`
    for precision in args.precisions.split(","):
        pair = engines(precision)
        for e in pair.values():  # warm-up
            e.generate(prompts[0], DecodeConfig(mode="ss", max_new_tokens=8))
        for mode in ("ar", "ss"):
            speed = {name: [] for name in pair}
            same = 0
            for i, prompt in enumerate(prompts):
                tokens = {}
                for name, engine in pair.items():
                    t = time.perf_counter()
                    r = engine.generate(prompt, DecodeConfig(mode=mode, max_new_tokens=args.max_new_tokens))
                    speed[name].append(len(r.token_ids) / (time.perf_counter() - t))
                    tokens[name] = r.token_ids
                same += tokens["blocked"] == tokens["row-major"]
                print(f"\r{precision} {mode}: {i + 1}/{len(prompts)}", end="", file=sys.stderr, flush=True)
            ratio = statistics.median(a / b for a, b in zip(speed["blocked"], speed["row-major"]))
            print(f"\r{precision} {mode}: blocked {statistics.median(speed['blocked']):.1f} tokens/s, row-major "
                  f"{statistics.median(speed['row-major']):.1f}; blocked / row-major per prompt {ratio:.2f}x; "
                  f"same tokens on {same}/{len(prompts)}")


if __name__ == "__main__":
    main()

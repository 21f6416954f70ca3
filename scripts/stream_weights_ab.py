"""Stream rows on the layers' own weights against 4-bit copies (kernels/draft_weights.py), in one process: one engine
at fp32 or bf16, its stream weights switched per generate (`Engine.set_stream_weights`), the chat eval prompts,
plain loop and speculative streaming, every combination on each prompt in turn (order reversed every other prompt),
one thread. Prints tokens/s medians, the per-prompt ratio, τ (tokens per pass) and how many prompts give the plain
loop's tokens.

    python scripts/stream_weights_ab.py --precision fp32 --n 5   # ~3 minutes
"""
import argparse
import collections
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.model import compat, defaults  # noqa: E402

KINDS = ("same", "int4-a8")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--n", type=int, default=5, help="eval prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--chain", type=int, default=0, help="draft a chain this many streams deep, streams only (0: the "
                   "stream set's recorded draft)")
    args = p.parse_args()
    torch.set_num_threads(1)
    base, streams = defaults.resolve(None, None)
    engine = Engine.load(base, streams, precision=args.precision)
    draft = ({"tree_topk": (1,) * args.chain, "lookup": 0, "ngrams": False, "node_budget": args.chain + 1}
             if args.chain else {})
    cfgs = {m: engine.decode_config(mode=m, max_new_tokens=args.max_new_tokens, **draft) for m in ("ar", "ss")}
    prompts = [ex["prompt"] for c in suite_categories("corpus") for ex in suite_examples("corpus", c, args.n)]
    runs = [("ar", "same")] + [("ss", k) for k in KINDS]
    for m, kind in runs:  # warm-up
        engine.set_stream_weights(kind)
        engine.generate(prompts[0], cfgs[m])
    speed, tau, same, t0 = collections.defaultdict(list), collections.defaultdict(list), collections.Counter(), time.time()
    for i, prompt in enumerate(prompts):
        tokens = {}
        for m, kind in runs if i % 2 == 0 else runs[::-1]:
            engine.set_stream_weights(kind)
            engine.streams.draft_head(compat.lm_head(engine.model))  # cut (and quantized) once, outside the timing
            t = time.perf_counter()
            r = engine.generate(prompt, cfgs[m])
            speed[(m, kind)].append(len(r.token_ids) / (time.perf_counter() - t))
            tau[(m, kind)].append(len(r.token_ids) / max(1, r.stats["forward_passes"]))
            tokens[(m, kind)] = r.token_ids
        same.update(k for k in tokens if tokens[k] == tokens[("ar", "same")])
        print(f"\r{i + 1}/{len(prompts)} prompts, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(f"\n{engine.precision}, {'a %d-stream chain' % args.chain if args.chain else 'the recorded draft'}, "
          f"{len(prompts)} eval prompts, {args.max_new_tokens} new tokens, one thread")
    for m, kind in runs:
        print(f"{m} stream rows {kind}: {statistics.median(speed[(m, kind)]):.1f} tokens/s, tau "
              f"{statistics.mean(tau[(m, kind)]):.2f}, plain loop's tokens on {same[(m, kind)]} of {len(prompts)}")
    ratio = statistics.median(a / b for a, b in zip(speed[("ss", "int4-a8")], speed[("ss", "same")]))
    print(f"ss, 4-bit stream rows against the layers' own weights: {ratio:.3f}x per prompt (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

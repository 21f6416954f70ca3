"""Drafts of speculative streaming against our plain loop on the default model, at one precision: the eval
prompts of the chat corpus (chat-wrapped, as `bench`), every draft and the plain loop decoding each prompt
in turn (the order reversed every other prompt), one thread, one process; prints tokens/s medians, τ, the
per-prompt ratio to the first variant (overall and per category) and that the tokens agree.

A variant is `ar` or a draft named as `draft-tau` names them: `b<node budget>l<copied tokens>[n]` (n: copy from
the n-gram store too) on the stream set's tree (one stream token on the bundled set), `default`, `streams`, with
an optional `/k<top-k per depth>`:

    python scripts/draft_ab.py --precision int4 --n 10 --variants ar,b3l2,b3l2n,b4l3n,b4l3    # ~4 minutes
    python scripts/draft_ab.py --precision fp32 --n 10 --variants ar,b3l2,b3l2n,b4l3n,b5l4n   # ~9 minutes
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
from specstream_core.bench.draft_replay import draft_config  # noqa: E402
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.errors import SpecstreamError  # noqa: E402
from specstream_core.model import defaults  # noqa: E402

def configs(engine, variants: list[str], max_new: int) -> dict:
    """ar, or a draft named as `draft-tau` names them (`draft_replay.draft_config`: b4l3n, streams/k1, ...)."""
    try:
        return {v: engine.decode_config(mode="ar", max_new_tokens=max_new) if v == "ar"
                else draft_config(engine, v, max_new) for v in variants}
    except SpecstreamError as exc:
        raise SystemExit(str(exc)) from None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="int4")
    p.add_argument("--n", type=int, default=10, help="eval prompts per category")
    p.add_argument("--variants", default="ar,b3l2,b3l2n,b4l3n")
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(1)
    base, streams = defaults.resolve(None, None)
    engine = Engine.load(base, streams, precision=args.precision)
    variants = args.variants.split(",")
    cfgs = configs(engine, variants, args.max_new_tokens)
    prompts = [(c, ex["prompt"]) for c in suite_categories("corpus") for ex in suite_examples("corpus", c, args.n)]
    for v in variants:  # warm-up
        engine.generate(prompts[0][1], cfgs[v])
    speed, tau, same, cats = collections.defaultdict(list), collections.defaultdict(list), collections.Counter(), []
    t0 = time.time()
    for i, (cat, prompt) in enumerate(prompts):
        tokens = {}
        for v in variants if i % 2 == 0 else variants[::-1]:
            t = time.perf_counter()
            r = engine.generate(prompt, cfgs[v])
            speed[v].append(len(r.token_ids) / (time.perf_counter() - t))
            tau[v].append(r.stats["mean_accepted"])
            tokens[v] = r.token_ids
        cats.append(cat)
        for v in variants:
            same[v] += tokens[v] == tokens[variants[0]]
        print(f"\r{i + 1}/{len(prompts)} prompts, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"{engine.precision}, {len(prompts)} eval prompts, {args.max_new_tokens} new tokens, one thread, "
          f"{time.time() - t0:.0f} s")
    first = variants[0]
    for v in variants:
        ratio = [a / b for a, b in zip(speed[v], speed[first])]
        per_cat = {c: statistics.median([r for r, rc in zip(ratio, cats) if rc == c]) for c in dict.fromkeys(cats)}
        print(f"{v:8s} {statistics.median(speed[v]):6.1f} tokens/s  τ {statistics.mean(tau[v]):.2f}  "
              f"× {first} {statistics.median(ratio):.3f}  same tokens {same[v]}/{len(prompts)}  | "
              + " ".join(f"{c} {x:.2f}" for c, x in per_cat.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

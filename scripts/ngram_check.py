"""What the n-gram store knows about the eval split, and that it was not told the answers: the default model's
greedy answers to the chat corpus's eval prompts (int4, which is the fp32 model, one thread), then
- how much of them the store's source answers already contain (8- and 16-token windows; answers whose
  first 32 tokens equal a stored answer's), with and without the eval answers a distillation cache holds;
- how often the token after each position is predicted by the context's latest n-gram match (prompt lookup)
  and by the store's longest match, per match length, and how many tokens a 2-token copy gets accepted.

    python scripts/ngram_check.py --n 20      # 8 categories x 20 eval prompts, 64 new tokens; ~3 minutes
"""
import argparse
import collections
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402
from specstream_core.cli.commands.ngrams import eval_prompt_keys  # noqa: E402
from specstream_core.decoding.drafters.ngram_store import NgramStore  # noqa: E402
from specstream_core.decoding.drafters.prompt_lookup import lookup_match  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.model import defaults  # noqa: E402
from specstream_core.training.distill import read_cache  # noqa: E402

ANSWERS = os.path.join(defaults.SMOL_ASSETS, "distill", "answers.jsonl.gz")


def overlap(outputs: list[list[int]], answers: list[list[int]]) -> str:
    parts = []
    for n in (8, 16):
        grams = {tuple(a[i:i + n]) for a in answers for i in range(len(a) - n + 1)}
        windows = [tuple(o[i:i + n]) for o in outputs for i in range(len(o) - n + 1)]
        parts.append(f"{n}-token windows {sum(w in grams for w in windows) / max(1, len(windows)):.1%}")
    starts = {tuple(a[:32]) for a in answers}
    parts.append(f"first 32 tokens equal a stored answer's: {sum(tuple(o[:32]) in starts for o in outputs)}/{len(outputs)}")
    return ", ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20, help="eval prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(1)
    base, streams = defaults.resolve(None, None)
    engine = Engine.load(base, streams)
    cfg = engine.decode_config(mode="ar", max_new_tokens=args.max_new_tokens)
    runs = []
    for cat in suite_categories("corpus"):
        for ex in suite_examples("corpus", cat, args.n):
            ids = engine.encode(ex["prompt"])
            runs.append((ids, engine.generate(ids, cfg).token_ids))
        print(f"\r{len(runs)} answers", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    cached = read_cache(ANSWERS)
    held = eval_prompt_keys(engine.tokenizer, True)
    kept = [a for k, a in cached.items() if tuple(int(t) for t in k.split(",")) not in held]
    outputs = [o for _, o in runs]
    print(f"{len(outputs)} eval answers; the cache holds {len(cached)} answers, {len(cached) - len(kept)} of them to "
          f"eval prompts")
    print(f"overlap with all cached answers:            {overlap(outputs, list(cached.values()))}")
    print(f"overlap with the store's (eval ones left out): {overlap(outputs, kept)}")
    store = engine.ngrams or NgramStore.build(kept, engine.model.config.vocab_size)
    hits = collections.defaultdict(lambda: [0, 0])
    accepted = collections.Counter()
    for ids, out in runs:
        for i in range(len(out) - 1):
            seq, truth = ids + out[:i + 1], out[i + 1:i + 3]
            ctx, n_ctx = lookup_match(seq, 3, 2)
            stored, n_store = store.continuation(seq, 2)
            pick = ctx if n_ctx >= 2 or n_store <= n_ctx else stored
            for name, draft, n in (("context", ctx, n_ctx), ("store", stored, n_store)):
                hits[(name, n)][0] += bool(draft) and draft[0] == truth[0]
                hits[(name, n)][1] += 1
            for name, draft in (("context", ctx), ("context, else the store", pick)):
                accepted[name] += next((k for k, (d, t) in enumerate(zip(draft, truth)) if d != t), min(len(draft), len(truth)))
            accepted["positions"] += 1
    for (name, n), (h, total) in sorted(hits.items()):
        print(f"{name:8s} match of {n} tokens: next token right {h / total:.1%} of {total} positions")
    for name in ("context", "context, else the store"):
        print(f"2-token copy from {name}: {accepted[name] / accepted['positions']:.3f} tokens accepted a position")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What τ a draft reaches on the default model's eval prompts, without decoding with it: each prompt's greedy
answer is decoded once (our plain loop), then every draft is replayed over it with the project's own
drafters (`specstream_core/bench/draft_replay.py`); τ is tokens per pass, as `bench` reports it, and says
nothing of what the passes cost (`draft_ab.py` and `bench` time drafts). Also prints each stream's top-1
accuracy on those answers.

A variant is `b<node budget>l<copied tokens>[n][/k<per-depth top-k>]` (n: copy from the n-gram store too;
the top-k defaults to the stream set's), or `streams[/k<...>]` for the streams alone (their whole tree):

    python scripts/draft_sim.py --n 20 --check 3 --json docs/bench/draft-sim.json \\
        --variants streams/k1,streams/k1111,b3l2n,b4l3n,b5l4n,b6l5n,b8l7n,b12l11n,b16l15n,b6l5n/k2,b8l6n/k21
"""
import argparse
import collections
import json
import os
import re
import statistics
import sys
import time
from dataclasses import replace

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from specstream_core.bench.draft_replay import replay, stream_rows  # noqa: E402
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.decoding.loop import default_drafter  # noqa: E402
from specstream_core.model import defaults  # noqa: E402

VARIANT = re.compile(r"^(?:b(\d+)l(\d+)(n?)|streams)(?:/k(\d+))?$")


def config(engine, spec: str, max_new_tokens: int):
    """The decode config of a variant (its drafter: `default_drafter`)."""
    m = VARIANT.match(spec)
    if not m:
        raise SystemExit(f"variant {spec!r}: expected b<budget>l<lookup>[n][/k<digits>] or streams[/k<digits>]")
    cfg = engine.decode_config(mode="ss", max_new_tokens=max_new_tokens)
    topk = tuple(int(c) for c in m[4]) if m[4] else cfg.tree_topk
    if spec.startswith("streams"):
        widths = [1]
        for k in topk:
            widths.append(widths[-1] * k)
        return replace(cfg, tree_topk=topk, node_budget=sum(widths), lookup=0, ngrams=False)
    return replace(cfg, node_budget=int(m[1]), lookup=int(m[2]), ngrams=bool(m[3]), tree_topk=topk)


def stream_hits(engine, rows: torch.Tensor, answer: list[int], hits: collections.Counter) -> None:
    """Adds each stream's top-1 hits (key j) and chances (key -j) on one answer: row i's stream j guesses answer[i + j]."""
    scores, ids = engine.draft_scores(rows)
    top1 = scores.argmax(-1) if ids is None else ids[scores.argmax(-1)]  # [len + 1, γ]
    for j in range(1, top1.shape[1] + 1):
        hits[j] += sum(int(top1[i, j - 1]) == answer[i + j] for i in range(len(answer) - j))
        hits[-j] += max(0, len(answer) - j)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="fp32")
    p.add_argument("--streams", help="a stream directory (default: the bundled lossless set)")
    p.add_argument("--n", type=int, default=20, help="eval prompts per category")
    p.add_argument("--variants", default="streams/k1,b3l2n,b4l3n,b6l5n,b8l7n,b12l11n,b16l15n")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--check", type=int, default=0,
                   help="also decode the first CHECK prompts with every variant and count those whose passes differ")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    torch.set_num_threads(1)
    engine = Engine.load(*defaults.resolve(None, args.streams), precision=args.precision)
    variants = args.variants.split(",")
    cfgs = {v: config(engine, v, args.max_new_tokens) for v in variants}
    plain = engine.decode_config(mode="ar", max_new_tokens=args.max_new_tokens)
    prompts = [(c, ex["prompt"]) for c in suite_categories("corpus") for ex in suite_examples("corpus", c, args.n)]
    tally = collections.defaultdict(lambda: [0, 0, 0])  # (variant, category) -> tokens, passes, nodes
    hits, checked, agree = collections.Counter(), collections.Counter(), collections.Counter()
    t0 = time.time()
    for k, (cat, text) in enumerate(prompts):
        prompt = engine.encode(text, args.max_new_tokens)
        answer = engine.generate(prompt, plain).token_ids
        rows = stream_rows(engine, prompt, answer)
        stream_hits(engine, rows, answer, hits)
        for v, cfg in cfgs.items():
            passes, nodes = replay(engine, default_drafter(engine, cfg), prompt, answer, rows)
            t = tally[(v, cat)]
            t[0], t[1], t[2] = t[0] + len(answer), t[1] + passes, t[2] + nodes
            if k < args.check:
                real = engine.generate(prompt, cfg)
                checked[v] += 1
                agree[v] += real.token_ids == answer and real.stats["forward_passes"] == passes
        print(f"\r{k + 1}/{len(prompts)} prompts, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    cats = suite_categories("corpus")
    tau = {v: {c: tally[(v, c)][0] / tally[(v, c)][1] for c in cats} for v in variants}
    # nodes a decoding step (the prefill, one pass a prompt, drafts nothing)
    nodes = {v: sum(tally[(v, c)][2] for c in cats) / (sum(tally[(v, c)][1] for c in cats) - len(prompts))
             for v in variants}
    accuracy = {j: hits[j] / max(1, hits[-j]) for j in range(1, engine.streams.cfg.gamma + 1)}
    print(f"{engine.precision}, {len(prompts)} eval prompts, {args.max_new_tokens} new tokens, {time.time() - t0:.0f} s")
    print("stream top-1 accuracy by depth: " + ", ".join(f"{j}: {a:.3f}" for j, a in accuracy.items()))
    print("| draft | nodes a step | " + " | ".join(cats) + " | mean τ |")
    print("|---|---|" + "---|" * (len(cats) + 1))
    for v in variants:
        print(f"| {v} | {nodes[v]:.2f} | " + " | ".join(f"{tau[v][c]:.2f}" for c in cats)
              + f" | **{statistics.mean(tau[v].values()):.2f}** |")
    for v in checked:
        print(f"check {v}: decoding took the replay's passes on {agree[v]} of {checked[v]} prompts")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"precision": engine.precision, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                       "stream_top1": accuracy, "nodes": nodes, "tau": tau,
                       "checked": {v: [agree[v], checked[v]] for v in checked}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

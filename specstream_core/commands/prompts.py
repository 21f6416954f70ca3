"""`python -m specstream_core prompts --split train|eval --out FILE.jsonl`: write the chat prompt corpus.

One JSON record per line (see ``specstream_core.tasks.corpus``); train records are interleaved
round-robin across categories, so any prefix of the file is balanced. Prints a per-category table.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter

from ..errors import SpecstreamError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", required=True, choices=["train", "eval"])
    p.add_argument("--n-per-category", type=int, default=None,
                   help="records per category (default: 800 train, 50 eval)")
    p.add_argument("--categories", default=None, help="comma-separated subset (default: all)")
    p.add_argument("--out", required=True, help="output JSONL file (overwritten)")


def run(args: argparse.Namespace) -> int:
    from ..tasks.corpus import CATEGORIES, load_corpus

    if args.n_per_category is not None and args.n_per_category < 1:
        raise SpecstreamError("--n-per-category must be at least 1")
    try:
        records = load_corpus(args.split, args.categories, args.n_per_category)
    except ValueError as exc:
        raise SpecstreamError(str(exc)) from None
    folder = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(folder, exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, args.out)
    counts = Counter(r["category"] for r in records)
    templates = {c: len({r["template"] for r in records if r["category"] == c}) for c in counts}
    with_ref = Counter(r["category"] for r in records if r["reference"] is not None)
    print(f"{'category':<14} {'prompts':>8} {'templates':>10} {'with reference':>15}")
    for cat in CATEGORIES:
        if cat in counts:
            print(f"{cat:<14} {counts[cat]:>8} {templates[cat]:>10} {with_ref[cat]:>15}")
    print(f"{'total':<14} {len(records):>8}")
    print(f"wrote {len(records)} {args.split} prompts to {args.out}")
    return 0

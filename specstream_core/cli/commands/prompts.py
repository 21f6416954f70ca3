"""`python -m specstream_core prompts --split train|eval --out FILE.jsonl`: write the chat prompt corpus.

One JSON record per line (see ``specstream_core.tasks.corpus``); train records are interleaved
round-robin across categories, so any prefix of the file is balanced. Prints a per-category table.

``--score ANSWERS.jsonl`` instead scores a model's answers to the split's records: one JSON object per
line with the record's ``id`` (or its exact ``prompt``) and the reply text under ``answer`` (or
``completion``, ``output``, ``prediction``, ``response``, ``text``), chat template already removed.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter

from specstream_core.errors import SpecstreamError
from specstream_core.io.jsonl import read_objects


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", required=True, choices=["train", "eval"])
    p.add_argument("--n-per-category", type=int, default=None,
                   help="records per category (default: 800 train, 50 eval)")
    p.add_argument("--categories", default=None, help="comma-separated subset (default: all)")
    p.add_argument("--out", help="output JSONL file (overwritten); required unless --score is given")
    p.add_argument("--score", metavar="ANSWERS", help="score the answers in this JSONL file per category instead")
    p.add_argument("--json", action="store_true", help="with --score: print the report as JSON")


ANSWER_KEYS = ("answer", "completion", "output", "prediction", "response", "text")


def _read_answers(path: str, records: list[dict]) -> dict[str, str]:
    by_prompt = {r["prompt"]: r["id"] for r in records}
    answers = {}
    for n, obj in read_objects(path, "answers"):
        key = next((k for k in ANSWER_KEYS if isinstance(obj.get(k), str)), None)
        rid = obj.get("id") if obj.get("id") is not None else by_prompt.get(obj.get("prompt"))
        if key is None or rid is None:
            raise SpecstreamError(f"{path}:{n}: expected an 'id' (or 'prompt') and an answer field ({', '.join(ANSWER_KEYS)})")
        answers[str(rid)] = obj[key]
    return answers


def _score(args, records) -> int:
    from specstream_core.tasks.corpus import CATEGORIES, score_answers

    report = score_answers(records, _read_answers(args.score, records))
    if not report["categories"]:
        raise SpecstreamError(f"no answer in {args.score} matches a {args.split} record (ids like "
                              f"{records[0]['id']!r}); check --split, --n-per-category and --categories")
    if args.json:
        print(json.dumps(report["categories"] | {"mean": report["mean"]}, indent=1))
        return 0
    print(f"{'category':<14} {'answers':>8} {'score':>7}")
    for cat in CATEGORIES:
        if cat in report["categories"]:
            c = report["categories"][cat]
            print(f"{cat:<14} {c['n']:>8} {c['score']:>7.3f}")
    print(f"{'mean':<14} {sum(c['n'] for c in report['categories'].values()):>8} {report['mean']:>7.3f}")
    if report["missing"]:
        print(f"({len(report['missing'])} {args.split} records have no answer in {args.score})")
    return 0


def run(args: argparse.Namespace) -> int:
    from specstream_core.tasks.corpus import CATEGORIES, load_corpus

    if args.n_per_category is not None and args.n_per_category < 1:
        raise SpecstreamError("--n-per-category must be at least 1")
    try:
        records = load_corpus(args.split, args.categories, args.n_per_category)
    except ValueError as exc:
        raise SpecstreamError(str(exc)) from None
    if args.score:
        return _score(args, records)
    if not args.out:
        raise SpecstreamError("--out is required (or --score ANSWERS.jsonl)")
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

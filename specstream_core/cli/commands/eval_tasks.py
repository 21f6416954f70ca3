"""`python -m specstream_core eval-tasks --model DIR`: per-category task scores with plain greedy decoding."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specstream_core.errors import SpecstreamError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="model directory (config, safetensors, tokenizer)")
    parser.add_argument("--n", type=int, default=20, help="eval prompts per category")
    parser.add_argument("--category", action="append", default=None, help="only this category (repeatable)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument("--show", type=int, default=0, help="print this many sample generations per category")


def run(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specstream_core.tasks import CATEGORIES
    from specstream_core.tasks.evaluate import evaluate, format_table

    path = Path(args.model)
    if not (path / "config.json").is_file():
        raise SpecstreamError(f"{path} is not a model directory (no config.json)")
    for cat in args.category or []:
        if cat not in CATEGORIES:
            raise SpecstreamError(f"unknown category {cat!r}; choose from {', '.join(CATEGORIES)}")
    if args.n < 1:
        raise SpecstreamError("--n must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    report = evaluate(model, tokenizer, n=args.n, categories=args.category, max_new_tokens=args.max_new_tokens,
                      keep_examples=max(args.show, 1))
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        print(format_table(report))
        print(f"{report['generated_tokens']} tokens generated in {report['seconds']}s")
        for cat, items in report["samples"].items():
            for item in items[: args.show]:
                print(f"\n--- {cat}\n{item['prompt']}{item['prediction']}\n[reference] {item['reference']}")
    return 0

"""`distill`: write the base model's greedy answers to task-suite prompts (self-distillation targets).

`train --distill --distill-cache FILE` reads the same file, so two trainings (lossless and shared) can
share one distillation run; answers already in the file are not generated again.
"""

from __future__ import annotations

from specstream_core.model import defaults
from specstream_core.cli.args import load_examples


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model directory or hub id (default: SmolLM2-135M-Instruct)")
    p.add_argument("--out", required=True, help="JSONL cache file (appended to; existing answers are kept; "
                   "OUT.meta.json records the model and settings they belong to)")
    p.add_argument("--data", default="chat", help="'chat' (the chat prompt corpus), 'tasks' or a JSONL file as for `train` (all its prompts)")
    p.add_argument("--eval-data", default="", help="a second JSONL file whose prompts are distilled first")
    p.add_argument("--max-examples", type=int, default=0, help="distill only the first N prompts of --data (0 = all)")
    p.add_argument("--raw", action="store_true", help="do not wrap prompts in the model's chat template")
    p.add_argument("--examples-per-category", type=int, default=500)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch default)")


def run(args) -> int:
    import torch

    from specstream_core.training.distill import distilled_pairs
    from specstream_core.model.loading import LoadConfig, load_model, load_tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    base, _ = defaults.resolve(args.base, None)
    tokenizer = load_tokenizer(base)
    model = load_model(LoadConfig(base, precision="fp32", device=args.device))
    total = 0
    chat = not args.raw
    if args.data in ("tasks", "chat"):  # the same train and eval prompts `train` will ask for
        jobs = [load_examples(args.data, tokenizer, n, split, chat)
                for split, n in (("eval", max(20, args.examples_per_category // 20)), ("train", args.examples_per_category))]
    else:
        jobs = [load_examples(args.eval_data, tokenizer, 0, "all", chat)] if args.eval_data else []
        pairs = load_examples(args.data, tokenizer, 0, "all", chat)
        jobs.append(pairs[: args.max_examples] if args.max_examples else pairs)
    for pairs in jobs:
        distilled_pairs(model, tokenizer, pairs, args.max_new_tokens, args.batch_size, cache_file=args.out)
        total += len(pairs)
    print(f"{total} distilled answers in {args.out}")
    return 0

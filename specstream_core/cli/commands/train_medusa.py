"""`train-medusa`: train Medusa-style heads (a benchmark baseline) on the same data as the streams.

By default the targets are self-distilled (the base model's own greedy answers, as for the streams),
so the benchmark compares drafters trained on the same thing.
"""

from __future__ import annotations

import json

import torch

from specstream_core.model import defaults
from specstream_core.errors import SpecstreamError
from specstream_core.cli.args import load_examples


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--out", required=True, help="output directory for the heads")
    p.add_argument("--data", default="chat", help="'chat' (the chat prompt corpus), 'tasks' (the old task suite) or a JSONL file (as for `train`)")
    p.add_argument("--examples-per-category", type=int, default=500)
    p.add_argument("--heads", type=int, default=4, help="number of Medusa heads K")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--minutes", type=float, default=0.0, help="stop after this many minutes (0 = no limit)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-distill", action="store_true", help="train on the data's answers instead of the base "
                   "model's own greedy answers")
    p.add_argument("--distill-max-new-tokens", type=int, default=128)
    p.add_argument("--distill-cache", default="", help="JSONL cache of distilled answers (shared with `train --distill`)")
    p.add_argument("--recommend-topk", default="1,1,1,1", help="draft tree stored with the heads")
    p.add_argument("--no-accelerate", action="store_true", help="plain torch loop without accelerate")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    from specstream_core.decoding.config import parse_topk
    from specstream_core.model.loading import LoadConfig, load_model, load_tokenizer
    from specstream_core.training.medusa import MedusaTrainConfig, train_heads
    from specstream_core.training.data import pack_examples

    if args.threads:
        torch.set_num_threads(args.threads)
    if not 1 <= args.heads <= 8:
        raise SpecstreamError(f"--heads must be between 1 and 8, got {args.heads}")
    topk = parse_topk(args.recommend_topk)
    cfg = MedusaTrainConfig(num_heads=args.heads, steps=args.steps, minutes=args.minutes, batch_size=args.batch_size,
                            seq_len=args.seq_len, lr=args.lr, seed=args.seed)
    base, _ = defaults.resolve(args.base, None)
    tokenizer = load_tokenizer(base)
    model = load_model(LoadConfig(base, precision="fp32", device=args.device))
    train_pairs = load_examples(args.data, tokenizer, args.examples_per_category, "train")
    eval_pairs = load_examples(args.data, tokenizer, max(20, args.examples_per_category // 20), "eval")
    if not args.no_distill:
        from specstream_core.training.distill import distilled_pairs

        cache = args.distill_cache or None
        train_pairs = distilled_pairs(model, tokenizer, train_pairs, args.distill_max_new_tokens, cache_file=cache)
        eval_pairs = distilled_pairs(model, tokenizer, eval_pairs, args.distill_max_new_tokens, cache_file=cache)
    train_data, eval_data = pack_examples(train_pairs, cfg.seq_len), pack_examples(eval_pairs, cfg.seq_len)
    print(f"training {cfg.num_heads} Medusa heads on {train_data[0].numel():,} tokens "
          f"({int(train_data[1].sum()):,} answer tokens); eval {eval_data[0].numel():,} tokens")
    extra = {"targets": "data" if args.no_distill else "self-distilled (base greedy answers)",
             "decode": {"topk": list(topk)}, "base": base}
    summary = train_heads(model, cfg, train_data, args.out, eval_data=eval_data, extra=extra,
                          use_accelerate=not args.no_accelerate)
    print(json.dumps({"out": args.out, "steps": summary["steps"], "train_seconds": summary["train_seconds"],
                      "extra_parameters": summary["extra_parameters"], "eval": summary.get("eval")}, indent=1))
    return 0

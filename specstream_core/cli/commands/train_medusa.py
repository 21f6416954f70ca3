"""`train-medusa`: train Medusa-style heads (a benchmark baseline) on the same data as the streams.

By default the targets are self-distilled (the base model's own greedy answers, as for the streams),
so the benchmark compares drafters trained on the same thing. Resumable: `--resume` continues from
OUT/checkpoint/ (written every `--checkpoint-every` steps and when the time budget ends).
"""

from __future__ import annotations

import json
import os

from specstream_core.cli.args import (add_training_data_arguments, add_training_flags, training_config_from,
                                      training_pairs, use_threads)
from specstream_core.errors import SpecstreamError
from specstream_core.model import defaults
from specstream_core.training.config import MedusaTrainConfig


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--out", required=True, help="output directory for the heads")
    add_training_data_arguments(p, examples_per_category=500, distill=True)
    p.add_argument("--heads", type=int, default=4, help="number of Medusa heads K")
    add_training_flags(p, steps=400, lr=1e-3, warmup=20, checkpoint_every=50)
    p.add_argument("--recommend-topk", default="1,1,1,1", help="draft tree stored with the heads")
    p.add_argument("--no-accelerate", action="store_true", help="plain torch loop without accelerate")


def run(args) -> int:
    from specstream_core.decoding.config import parse_topk
    from specstream_core.model.loading import LoadConfig, load_model, load_tokenizer
    from specstream_core.training.data import pack_examples
    from specstream_core.training.medusa import CHECKPOINT, train_heads

    use_threads(args)
    topk = parse_topk(args.recommend_topk)
    cfg = training_config_from(args, MedusaTrainConfig, num_heads=args.heads)
    if args.resume and not os.path.isfile(os.path.join(args.out, CHECKPOINT)):
        raise SpecstreamError(f"--resume: no checkpoint in {os.path.join(args.out, CHECKPOINT)}")
    base, _ = defaults.resolve(args.base, None)
    tokenizer = load_tokenizer(base)
    model = load_model(LoadConfig(base, precision="fp32", device=args.device))
    train_pairs, eval_pairs = training_pairs(args, model, tokenizer)
    train_data, eval_data = pack_examples(train_pairs, cfg.seq_len), pack_examples(eval_pairs, cfg.seq_len)
    print(f"training {cfg.num_heads} Medusa heads on {train_data[0].numel():,} tokens "
          f"({int(train_data[1].sum()):,} answer tokens); eval {eval_data[0].numel():,} tokens")
    extra = {"targets": "self-distilled (base greedy answers)" if args.distill else "data",
             "decode": {"topk": list(topk)}, "base": base}
    summary = train_heads(model, cfg, train_data, args.out, eval_data=eval_data, extra=extra,
                          use_accelerate=not args.no_accelerate, resume=args.resume)
    print(json.dumps({"out": args.out, "steps": summary["steps"], "train_seconds": summary["train_seconds"],
                      "extra_parameters": summary["extra_parameters"], "eval": summary.get("eval")}, indent=1))
    return 0

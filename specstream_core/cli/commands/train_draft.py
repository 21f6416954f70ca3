"""`train-draft`: train a layer draft (the base's first K layers + a LoRA, a head over the draft
vocabulary) for transformers' assisted generation, on the base model's own greedy answers.

Resumable: `--resume` continues from OUT/checkpoint/ (written every `--checkpoint-every` steps, 50 by
default, and when the time budget ends). The result is a few MB (`lora/`, `draft_config.json`);
`bench --methods hf-assisted --draft OUT` rebuilds the draft from the base.
"""

from __future__ import annotations

import json
import os

from specstream_core.cli.args import (add_training_data_arguments, add_training_flags, training_config_from,
                                      training_pairs, use_threads)
from specstream_core.errors import SpecstreamError
from specstream_core.model import defaults
from specstream_core.training.config import DraftTrainConfig


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model directory or hub id (default: SmolLM2-135M-Instruct)")
    p.add_argument("--out", required=True, help="output directory for the draft")
    add_training_data_arguments(p)
    p.add_argument("--layers", type=int, default=4, help="decoder layers the draft keeps (the base's first K)")
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--draft-vocab", type=int, default=8192, help="tokens the draft can propose (most frequent answer tokens)")
    add_training_flags(p, batch_size=4, warmup=20, checkpoint_every=50)


def run(args) -> int:
    from specstream_core.model.loading import LoadConfig, load_model, load_tokenizer
    from specstream_core.training.data import one_per_row
    from specstream_core.training.layer_draft import CHECKPOINT, train_draft
    from specstream_core.training.objectives import draft_vocab_coverage, frequent_tokens

    use_threads(args)
    if args.resume and not os.path.isfile(os.path.join(args.out, CHECKPOINT)):
        raise SpecstreamError(f"--resume: no checkpoint in {os.path.join(args.out, CHECKPOINT)}")
    if args.draft_vocab < 2:
        raise SpecstreamError(f"--draft-vocab must be at least 2, got {args.draft_vocab}")
    cfg = training_config_from(args, DraftTrainConfig, n_layers=args.layers, lora_rank=args.lora_rank)
    base, _ = defaults.resolve(args.base, None)
    tokenizer = load_tokenizer(base)
    model = load_model(LoadConfig(base, precision="fp32", device=args.device))
    train_pairs, eval_pairs = training_pairs(args, model, tokenizer)
    vocab = frequent_tokens(train_pairs, min(args.draft_vocab, model.config.vocab_size),
                            always=(tokenizer.eos_token_id,), vocab_size=model.config.vocab_size)
    print(f"draft vocabulary: {len(vocab)} tokens cover {draft_vocab_coverage(eval_pairs, vocab):.1%} of eval answer tokens")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    train_data, eval_data = one_per_row(train_pairs, cfg.seq_len, pad), one_per_row(eval_pairs, cfg.seq_len, pad)
    print(f"training a {cfg.n_layers}-layer draft on {int(train_data[1].sum()):,} answer tokens")
    extra = {"targets": "self-distilled (base greedy answers)" if args.distill else "data", "base": base}
    summary = train_draft(model, cfg, vocab, train_data, args.out, eval_data=eval_data, resume=args.resume, extra=extra)
    print(json.dumps({"out": args.out, "steps": summary["steps"], "train_seconds": summary["train_seconds"],
                      "draft_parameters": summary["draft_parameters"], "eval": summary.get("eval")}, indent=1))
    return 0

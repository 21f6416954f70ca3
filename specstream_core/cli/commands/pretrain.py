"""`python -m specstream_core pretrain --out DIR`: train the bundled base model from offline text."""

from __future__ import annotations

import argparse

from specstream_core.training.pretrain_presets import PRESETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output directory (model + tokenizer)")
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS),
                        help="model/data size: tiny (seconds, for tests) or default (the bundled model)")
    parser.add_argument("--minutes", type=float, default=None, help="training wall-clock budget (default: preset's)")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--resume", action="store_true", help="continue from DIR/checkpoint")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 autocast (only faster on CPUs with AVX512-BF16/AMX; ~15x slower on plain AVX2)")
    parser.add_argument("--seed", type=int, default=0, help="corpus order and batch order")
    parser.add_argument("--init-from", default=None, metavar="MODEL_DIR",
                        help="continue pretraining from a saved model (its weights and tokenizer; new schedule)")
    parser.add_argument("--tokenizer-from", default=None, metavar="MODEL_DIR",
                        help="reuse this model's tokenizer (a draft model for assisted generation must share it)")
    parser.add_argument("--layers", type=int, default=None, help="override the preset's number of layers")
    parser.add_argument("--hidden", type=int, default=None, help="override the hidden size (heads: hidden/64)")
    parser.add_argument("--heads", type=int, default=None, help="override the number of attention heads")
    parser.add_argument("--intermediate", type=int, default=None, help="override the MLP size (default 4x hidden)")


def run(args: argparse.Namespace) -> int:
    from specstream_core.training.pretrain import pretrain

    info = pretrain(args.out, args.preset, minutes=args.minutes, threads=args.threads, resume=args.resume,
                    max_steps=args.max_steps, bf16=args.bf16, seed=args.seed,
                    init_from=args.init_from, tokenizer_from=args.tokenizer_from, layers=args.layers,
                    hidden=args.hidden, heads=args.heads, intermediate=args.intermediate)
    print(f"saved {info['parameters'] / 1e6:.2f}M-parameter model to {args.out}: {info['steps']} steps, "
          f"{info['tokens'] / 1e6:.2f}M tokens, {info['train_seconds'] / 60:.1f} min, final loss {info['final_loss']}")
    return 0

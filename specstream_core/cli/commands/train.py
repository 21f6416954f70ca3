"""`train`: train stream parameters (lossless or shared mode) on the task suite or a JSONL file."""

from __future__ import annotations

import json

from specstream_core.cli.args import (add_training_data_arguments, add_training_flags, training_config_from,
                                      training_pairs, use_threads)
from specstream_core.model import defaults
from specstream_core.training.config import TrainConfig


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model directory or hub id (default: SmolLM2-135M-Instruct)")
    p.add_argument("--out", required=True, help="output directory for the streams")
    p.add_argument("--mode", choices=("lossless", "shared"), default="lossless")
    add_training_data_arguments(p)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--n-stream-layers", type=int, default=2)
    p.add_argument("--adapter-rank", type=int, default=16, help="stream-rows-only LoRA rank (lossless)")
    p.add_argument("--lora-rank", type=int, default=16, help="shared LoRA rank (shared mode)")
    p.add_argument("--lora-layers", type=int, default=0, help="shared mode: LoRA on the top K layers only "
                   "(0 = every layer; K <= --n-stream-layers reuses the frozen lower layers' output, as lossless does)")
    p.add_argument("--main-target", choices=("kl", "greedy", "answers"), default="kl",
                   help="shared mode: the main rows learn the base's whole next-token distribution (kl), or the "
                   "training answers' tokens by cross-entropy (answers; greedy is its old name: with --distill they "
                   "are the base's greedy tokens, with --references the references where given)")
    p.add_argument("--lora-lr", type=float, default=0.0, help="shared mode: the LoRA's learning rate (0 = --lr)")
    p.add_argument("--alpha-main", type=float, default=1.0, help="shared mode: the main rows' loss weight against the "
                   "streams' 0.1 each (higher keeps the model closer to the base)")
    add_training_flags(p)  # TrainConfig's own defaults
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16 autocast (fast on GPUs; measured ~10x slower than fp32 on this CPU)")
    p.add_argument("--pack", action="store_true",
                   help="concatenate examples into full rows (faster, but examples see each other; default: one a row)")
    p.add_argument("--draft-vocab", type=int, default=0,
                   help="streams score only the N most frequent answer tokens (0 = the whole vocabulary)")
    p.add_argument("--feature-cache-gb", type=float, default=4.0,
                   help="lossless: memory for reusing the frozen lower layers' output per sequence (0 = off)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="check the streams on held-out answers every N steps (τ estimate and accuracy per stream, "
                   "with the training minutes so far, in train_log.json's history; 0 = at the end only)")
    p.add_argument("--eval-rows", type=int, default=32, help="held-out rows each --eval-every check reads")
    p.add_argument("--init-from", default="", help="start from this trained stream directory's tensors (same "
                   "gamma and layers; a larger --adapter-rank grows its adapters, the new part starting at zero; "
                   "in shared mode a shared set's LoRA too) "
                   "instead of fresh ones; its recommended draft carries over unless --recommend-* says otherwise")
    p.add_argument("--recommend-topk", default="", help="store a recommended draft tree (e.g. 3,2,1,1) with the streams")
    p.add_argument("--recommend-prune", type=float, default=None, help="store a recommended pruning threshold")
    p.add_argument("--recommend-budget", type=int, default=None, help="store a recommended node budget")
    p.add_argument("--recommend-lookup", type=int, default=None,
                   help="store a recommended number of prompt-lookup tokens grafted onto the tree (0 = off)")
    p.add_argument("--recommend-ngrams", action="store_true",
                   help="recommend copying from the set's n-gram store (build it with `ngrams --out` the same directory)")


def run(args) -> int:
    from specstream_core.model.loading import LoadConfig, load_model, load_tokenizer
    from specstream_core.training.data import one_per_row, pack_examples
    from specstream_core.training.stream_checkpoint import require_checkpoint
    from specstream_core.training.streams import train

    use_threads(args)
    cfg = training_config_from(args, TrainConfig, mode=args.mode, gamma=args.gamma,
                               n_stream_layers=args.n_stream_layers, adapter_rank=args.adapter_rank,
                               lora_rank=args.lora_rank, lora_layers=args.lora_layers, precision=args.precision,
                               draft_vocab_size=args.draft_vocab, feature_cache_gb=args.feature_cache_gb,
                               init_from=args.init_from, main_target=args.main_target, lora_lr=args.lora_lr,
                               alpha_main=args.alpha_main, eval_every=args.eval_every, eval_rows=args.eval_rows)
    if args.resume:  # before loading and distilling anything
        require_checkpoint(args.out, cfg.checkpoint_every)
    base, _ = defaults.resolve(args.base, None)
    tokenizer = load_tokenizer(base)
    model = load_model(LoadConfig(base, precision="fp32", device=args.device))
    train_pairs, eval_pairs = training_pairs(args, model, tokenizer)
    draft_vocab = None
    if args.draft_vocab:
        from specstream_core.training.objectives import draft_vocab_coverage, frequent_tokens

        draft_vocab = frequent_tokens(train_pairs, args.draft_vocab, always=(tokenizer.eos_token_id,),
                                      vocab_size=model.config.vocab_size)
        print(f"draft vocabulary: {len(draft_vocab)} tokens cover "
              f"{draft_vocab_coverage(train_pairs, draft_vocab):.1%} of training answer tokens and "
              f"{draft_vocab_coverage(eval_pairs, draft_vocab):.1%} of eval answer tokens")
    if args.pack:
        train_data, eval_data = pack_examples(train_pairs, cfg.seq_len), pack_examples(eval_pairs, cfg.seq_len)
    else:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        train_data = one_per_row(train_pairs, cfg.seq_len, pad)
        eval_data = one_per_row(eval_pairs, cfg.seq_len, pad)
    print(f"training {cfg.mode} streams on {train_data[0].numel():,} tokens "
          f"({int(train_data[1].sum()):,} answer tokens); eval {eval_data[0].numel():,} tokens")
    extra = _extra(args)
    summary = train(model, cfg, train_data, args.out, eval_data=eval_data, resume=args.resume,
                    extra=extra, draft_vocab=draft_vocab)
    ev = summary.get("eval", {})
    print(json.dumps({"out": args.out, "steps": summary["steps"], "train_seconds": round(summary["train_seconds"], 1),
                      "extra_parameters": summary["extra_parameters"], "eval": ev}, indent=1))
    return 0


def _inherited(init_from: str) -> tuple[dict, dict]:
    """(decode settings, earlier training) that a set trained on from `init_from` keeps of that set's record: its
    recommended draft, per precision too, without the measurements that described the streams it started from."""
    from specstream_core.model.stream_config import read_stream_config

    if not init_from:
        return {}, {}
    record = read_stream_config(init_from).extra or {}
    decode = record.get("decode") if isinstance(record.get("decode"), dict) else {}
    stale = ("measured", "command", "previous")
    kept = {k: v for k, v in decode.items() if k not in stale}
    if isinstance(kept.get("precisions"), dict):
        kept["precisions"] = {p: {k: v for k, v in d.items() if k not in stale}
                              for p, d in kept["precisions"].items() if isinstance(d, dict)}
    if kept:
        kept["inherited_from"] = f"{init_from}: its recommended draft, measured on the streams this set started from"
    history = {"training_before": record["training"]} if isinstance(record.get("training"), str) else {}
    return kept, history


def _extra(args) -> dict:
    """What the stream set records about its training, and the decode settings to recommend: those of the set it
    continues (`--init-from`), where the flags below say nothing else."""
    decode, history = _inherited(getattr(args, "init_from", ""))
    targets = "self-distilled (base greedy answers)" if args.distill else "data"
    if getattr(args, "references", False):
        targets = "the prompts' reference answers where given, self-distilled (base greedy answers) elsewhere"
    extra = {"targets": targets, **history}
    if args.recommend_topk:
        from specstream_core.decoding.config import parse_topk

        decode["topk"] = list(parse_topk(args.recommend_topk))
    if args.recommend_prune is not None:
        decode["prune_threshold"] = args.recommend_prune
    if args.recommend_budget is not None:
        decode["node_budget"] = args.recommend_budget
    if args.recommend_lookup is not None:
        decode["lookup"] = args.recommend_lookup
    if args.recommend_ngrams:
        decode["ngrams"] = True
    return {**extra, "decode": decode} if decode else extra

"""`generate`: decode one prompt, plain (ar) or speculative streaming (ss); `--json` for tools."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

from specstream_core.errors import SpecstreamError
from specstream_core.model.precisions import NOT_EXACT_NOTE
from specstream_core.cli.args import (add_decode_arguments, add_model_arguments, build_config, check_model_arguments,
                                      check_output_file, load_engine)

WARMUP_TOKENS = 4  # enough for the prefill and a few decode passes of the timed decode's shapes


def add_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--prompt", required=True, help="prompt text")
    add_decode_arguments(p)
    p.add_argument("--trace", metavar="FILE", help="write the per-step trace (JSON) here")
    p.add_argument("--attention-layers", default="", help="capture stream attention in these layers, e.g. 6,7")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="decode a few tokens of the prompt once before the timed decode, so that its figures leave "
                        "out the one-time costs (kernel builds, first-call allocations); their time is reported "
                        "apart as first_call_s")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def warm_up(engine, prompt: str, cfg) -> dict:
    """The one-time costs of a first decode (kernel builds, first-call allocations) paid by a short decode of the
    same prompt in the same mode: its wall time and tokens, reported apart from the timed decode's figures."""
    short = replace(cfg, max_new_tokens=min(WARMUP_TOKENS, cfg.max_new_tokens), trace=False, attention_layers=())
    t0 = time.perf_counter()
    out = engine.generate(prompt, short)
    return {"first_call_s": time.perf_counter() - t0, "first_call_tokens": out.stats["new_tokens"]}


def summary(mode: str, precision: str, stats: dict) -> str:
    """generate's one stderr line: what ran, τ, tokens/s and what the output equals."""
    warm = (f" (after a {stats['first_call_s']:.2f}s warm-up, not counted)" if "first_call_s" in stats
            else " (first call: one-time costs included)")
    return (f"[{mode} {precision}] {stats['new_tokens']} tokens, τ {stats['mean_accepted']:.2f}, "
            f"{stats['tokens_per_s']:.1f} tokens/s{warm}, {stats['forward_passes']} forward passes in "
            f"{stats['wall_s']:.2f}s; output equals {stats.get('equals', 'not stated')}")


def run(args) -> int:
    cfg = build_config(args)  # validate settings before loading anything
    check_model_arguments(args)
    if not args.prompt.strip():
        raise SpecstreamError("the prompt is empty")
    if args.trace:
        check_output_file(args.trace, "--trace")  # before decoding: a bad path must not cost the output
    from specstream_core.decoding.trace import save_trace

    engine = load_engine(args, quiet=args.json, image=not cfg.attention_layers)  # captured attention: the modules
    cfg = engine.settle(cfg)
    first = warm_up(engine, args.prompt, cfg) if args.warmup else {}
    result = engine.generate(args.prompt, cfg)
    stats = {**result.stats, **first}
    if cfg.mode == "ss" and not engine.exact and not args.json:
        print("note: " + NOT_EXACT_NOTE.format(precision=engine.precision), file=sys.stderr)
    from specstream_core.decoding import engine_image
    from specstream_core.model import compat, exactness

    hint = exactness.auto_hint(engine) if args.precision == "auto" else None
    if hint and not args.json:  # auto chose the checkpoint's own precision: name the faster ones
        print(hint, file=sys.stderr)
    if args.trace:
        save_trace(result.trace, args.trace)
    if args.json:
        print(json.dumps({"token_ids": result.token_ids, "text": result.text, "stats": stats,
                          "mode": cfg.mode, "model": engine.name, "precision": engine.precision,
                          "exact": cfg.mode == "ar" or engine.exact, "equals": stats["equals"],
                          "layers": compat.layer_path(engine.model),  # kernel or module path, and why
                          "started_from_image": engine_image.started_from_image(engine)}))
    else:
        print(result.text)
        print(summary(cfg.mode, engine.precision, stats), file=sys.stderr)
    return 0

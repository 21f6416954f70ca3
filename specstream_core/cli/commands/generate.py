"""`generate`: decode one prompt, plain (ar) or speculative streaming (ss); `--json` for tools."""

from __future__ import annotations

import json
import sys

from specstream_core.errors import SpecstreamError
from specstream_core.model.precisions import NOT_EXACT_NOTE
from specstream_core.cli.args import (add_decode_arguments, add_model_arguments, build_config, check_model_arguments,
                                      check_output_file, load_engine)


def add_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--prompt", required=True, help="prompt text")
    add_decode_arguments(p)
    p.add_argument("--trace", metavar="FILE", help="write the per-step trace (JSON) here")
    p.add_argument("--attention-layers", default="", help="capture stream attention in these layers, e.g. 6,7")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from specstream_core.decoding.trace import save_trace

    cfg = build_config(args)  # validate settings before loading anything
    check_model_arguments(args)
    if not args.prompt.strip():
        raise SpecstreamError("the prompt is empty")
    if args.trace:
        check_output_file(args.trace, "--trace")  # before decoding: a bad path must not cost the output
    engine = load_engine(args, quiet=args.json)
    cfg = engine.settle(cfg)
    result = engine.generate(args.prompt, cfg)
    if cfg.mode == "ss" and not engine.exact and not args.json:
        print("note: " + NOT_EXACT_NOTE.format(precision=engine.precision), file=sys.stderr)
    from specstream_core.model import exactness

    hint = exactness.auto_hint(engine) if args.dtype == "auto" and args.quantize == "none" else None
    if hint and not args.json:  # auto chose the checkpoint's own precision: name the faster ones
        print(hint, file=sys.stderr)
    if args.trace:
        save_trace(result.trace, args.trace)
    if args.json:
        print(json.dumps({"token_ids": result.token_ids, "text": result.text, "stats": result.stats,
                          "mode": cfg.mode, "model": engine.name, "precision": engine.precision,
                          "exact": cfg.mode == "ar" or engine.exact, "equals": result.stats["equals"]}))
    else:
        print(result.text)
        s = result.stats
        print(f"[{cfg.mode}] {s['new_tokens']} tokens, {s['forward_passes']} forward passes, "
              f"tau={s['mean_accepted']:.2f}, {s['wall_s']:.2f}s; output equals {s['equals']}", file=sys.stderr)
    return 0



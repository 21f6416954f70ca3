"""`generate-batch`: decode every prompt of a JSONL file into a JSONL file (see specstream_core/pipeline.py).

    python -m specstream_core generate-batch --input prompts.jsonl --output out.jsonl --batch-size 8

Input lines `{"id": ..., "prompt": "..."}` (other fields come back under "extra"); output lines
`{"id", "text", "token_ids", "stats"}` in input order, or `{"id", "error"}` for a prompt that cannot be
generated (empty, too long). Rerunning resumes: ids already in the output are skipped. Exit status 0
when every input id has a result in the output, 1 when the output holds error records, 2 on bad input
lines, bad settings or a crashed worker (the message says what was written). Under `accelerate launch` /
torchrun each process takes a share and rank 0 merges them in input order (specstream_core/io/shard.py).
"""

from __future__ import annotations

import sys

from specstream_core.io import pipeline, shard
from specstream_core.cli.args import (add_decode_arguments, add_model_arguments, build_config, check_model_arguments,
                                      load_engine)


def add_arguments(p) -> None:
    p.add_argument("--input", required=True, help="JSONL file, one {\"id\": ..., \"prompt\": ...} a line")
    p.add_argument("--output", required=True, help="JSONL file to append results to (resumes when it exists)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts decoded together per forward pass")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_arguments(p)
    add_decode_arguments(p)


def run(args) -> int:
    cfg = build_config(args)  # validate settings and input before loading anything
    check_model_arguments(args)
    recommended = {}

    def load():
        engine = load_engine(args, quiet=True)
        recommended["cfg"] = engine.settle(cfg)
        return engine

    if shard.world().size > 1:  # under `accelerate launch` / torchrun: this rank's share, rank 0 merges
        return shard.run_command(args, load, lambda: recommended["cfg"])
    summary = pipeline.run(load, args.input, args.output, lambda: recommended["cfg"],
                           batch_size=args.batch_size, progress=not args.no_progress)
    s = summary
    if s.written == 0:
        print(f"nothing to do: all {s.skipped} id(s) of {args.input} are already in {args.output}", file=sys.stderr)
    else:
        rate = f", {s.new_tokens / s.wall_s:.1f} tokens/s" if s.wall_s else ""
        print(f"wrote {s.written} record(s) to {args.output} ({s.skipped} already there; {s.new_tokens} new tokens "
              f"in {s.wall_s:.1f}s{rate})", file=sys.stderr)
    if s.errors_in_file:
        print(f"error: {args.output} holds {s.errors_in_file} error record(s) (prompts that could not be generated; "
              f"see their \"error\" field)", file=sys.stderr)
        return 1
    return 0

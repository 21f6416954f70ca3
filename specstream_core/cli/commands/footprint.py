"""`footprint`: per precision, what a fresh process pays to load the engine and answer one short prompt (wall time,
load time, peak RSS), on a first start (the kernel layouts packed) and a cached start (loaded from the kernel cache), beside llama.cpp's `llama-bench` on the same GGUF file where one is found
(specstream_core/bench/footprint.py).

    python -m specstream_core footprint                               # auto (int4-a8 here), int4, fp32, bf16
    python -m specstream_core footprint --precisions auto,fp32 --json footprint.json
    python -m specstream_core footprint --llama-bench ~/llama.cpp/build/bin/llama-bench
"""

from __future__ import annotations

import json

from specstream_core.cli.args import write_text
from specstream_core.errors import SpecstreamError

PRECISIONS = ("auto", "int4", "fp32", "bf16", "int4-a8")


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model directory or hub id (default: SmolLM2-135M-Instruct)")
    p.add_argument("--streams", help="stream directory (default: the default model's lossless streams)")
    p.add_argument("--precisions", default="auto,int4,fp32,bf16",
                   help=f"comma-separated, each measured in its own process: {', '.join(PRECISIONS)}")
    p.add_argument("--tokens", type=int, default=16, help="new tokens of the answer each process decodes")
    p.add_argument("--threads", type=int, default=1, help="threads of each process (OMP_NUM_THREADS) and llama-bench")
    p.add_argument("--llama-bench", metavar="PATH", help="llama.cpp's llama-bench (default: $SPECSTREAM_LLAMA_BENCH, "
                   "else one on PATH, if any)")
    p.add_argument("--gguf", metavar="FILE", help="the GGUF file llama-bench reads (default: the base's own, if any)")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON ('-': print them instead of the table)")


def _precisions(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PRECISIONS]
    if not names or bad:
        raise SpecstreamError(f"--precisions takes a comma-separated subset of {', '.join(PRECISIONS)}, got {text!r}")
    return names


def run(args) -> int:
    from specstream_core.bench import footprint
    from specstream_core.model import default_model

    names = _precisions(args.precisions)
    if not 1 <= args.tokens <= 1024 or not 1 <= args.threads <= 256:
        raise SpecstreamError("--tokens must be 1..1024 and --threads 1..256")
    binary = footprint.find_llama_bench(args.llama_bench)
    if args.llama_bench and binary is None:
        raise SpecstreamError(f"--llama-bench {args.llama_bench}: not found or not executable")
    rows = [row for p in names for row in footprint.measure_starts(p, args.base, args.streams, args.tokens, args.threads)]
    if binary is None:
        rows.append({"asked": "llama.cpp", "error": "llama-bench not found (on PATH, $SPECSTREAM_LLAMA_BENCH or --llama-bench)"})
    else:
        gguf = args.gguf or default_model.gguf_source(args.base or default_model.resolve_default_base())
        rows.append(footprint.llama_bench(binary, gguf, args.tokens, args.threads) if gguf else
                    {"asked": "llama.cpp", "error": "no GGUF file for this base (give --gguf)"})
    from specstream_core.bench.provenance import stamp

    report = stamp(rows, getattr(args, "_command", None))
    if args.json and args.json != "-":
        write_text(args.json, json.dumps(report, indent=1) + "\n")
    if args.json == "-":
        print(json.dumps(report, indent=1))
    else:
        print(footprint.table(rows))
    return 0

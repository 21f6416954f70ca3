"""Command-line entry point: `python -m specstream_core COMMAND ...`.

Each command lives in `specstream_core/cli/commands/<name>.py` and exposes
`add_arguments(parser)` and `run(args) -> int`. Errors the user can fix are raised as
`SpecstreamError` and printed as one line on stderr (exit status 2).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys

from specstream_core import __version__
from specstream_core.errors import SpecstreamError

# command name -> (module, one-line help)
COMMANDS = {
    "generate": ("specstream_core.cli.commands.generate", "decode one prompt (plain or speculative)"),
    "generate-batch": ("specstream_core.cli.commands.generate_batch",
                       "decode a JSONL file of prompts to a JSONL file (batched, resumable)"),
    "train": ("specstream_core.cli.commands.train", "train stream parameters (lossless or shared mode)"),
    "bench": ("specstream_core.cli.commands.bench", "benchmark speculative streaming against other methods per category"),
    "distill": ("specstream_core.cli.commands.distill", "write the base model's greedy answers (self-distillation targets)"),
    "pretrain": ("specstream_core.cli.commands.pretrain", "pretrain a small base model from offline text (the first, 9.4M model)"),
    "bench-batch": ("specstream_core.cli.commands.bench_batch", "batched decoding throughput (samples/s) and the shared-prompt cache"),
    "eval-tasks": ("specstream_core.cli.commands.eval_tasks", "score a model on the task suite (plain greedy)"),
    "train-medusa": ("specstream_core.cli.commands.train_medusa", "train Medusa-style heads (a benchmark baseline)"),
    "train-draft": ("specstream_core.cli.commands.train_draft",
                    "train a layer draft (the base's first layers + LoRA) for transformers' assisted generation"),
    "prompts": ("specstream_core.cli.commands.prompts",
                "write the chat prompt corpus (8 categories; train, or the differently worded eval split) as JSONL"),
    "pass-cost": ("specstream_core.cli.commands.pass_cost",
                  "cost of a plain, a verification and a speculative pass here, and the τ each needs"),
    "ngrams": ("specstream_core.cli.commands.ngrams",
               "build a stream set's n-gram store (ngrams.npz) from the base's distilled answers"),
    "draft-tau": ("specstream_core.cli.commands.draft_tau",
                  "the τ each draft reaches on the eval prompts, replayed over decoded answers instead of timed"),
    "speed": ("specstream_core.cli.commands.speed",
              "tokens/s against transformers and llama.cpp, fp32, bf16 and int4, at 1 and 2 threads"),
    "footprint": ("specstream_core.cli.commands.footprint",
                  "load time and peak memory per precision, each in a fresh process, beside llama.cpp's"),
    "train-curve": ("specstream_core.cli.commands.train_curve",
                    "τ against training time, from a stream training run's evaluation records (train --eval-every)"),
    "report": ("specstream_core.cli.commands.report",
               "write docs/BENCHMARKS.md and the README's results table from the result files in docs/bench/"),
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the arguments of the command that `argv` names (every command's when `argv` is None).

    Only that command's module is imported, so `--help` and argument errors cost no torch import: the modules
    under commands/ defer their machinery to `run()`."""
    prog = "specstream" if os.path.basename(sys.argv[0]) == "specstream" else "python -m specstream_core"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    named = next((a for a in argv if a in COMMANDS), None) if argv is not None else None
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        if argv is None or name == named:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args._command = "python -m specstream_core " + shlex.join(argv)  # what a result file records
    args._argv = argv  # the command as given, for results that record it
    try:
        from specstream_core.model import hub_access

        hub_access.check(getattr(args, "base", None))  # a hub id it cannot fetch: one line now, not after retries
        return int(args._run(args) or 0)
    except SpecstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130

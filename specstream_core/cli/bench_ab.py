"""`bench ab`: an A/B of the working tree's code against another revision's, or of two sets of engine options.

On the chat corpus's eval prompts, alternating per prompt, medians, the same tokens checked (`bench/ab.py`); a
subcommand of `bench` (cli/commands/bench.py).

    python -m specstream_core bench ab --against HEAD                       # default precision and fp32, 32 prompts
    python -m specstream_core bench ab --against 05e3f56 --precisions int4-a8 --methods ar,ss --n 4
    python -m specstream_core bench ab --side-a precision=int4 --side-b precision=int4-a8 --methods ar
    python -m specstream_core bench ab --side-a stream_weights=same --side-b stream_weights=int4-a8 --precisions fp32
    python -m specstream_core bench ab --side-a node_budget=3 --side-a lookup=2 --side-b node_budget=4 --side-b lookup=3 --methods ss
"""

from __future__ import annotations

import contextlib
import json
import os

from specstream_core.bench import ab
from specstream_core.bench.runner import markdown_table
from specstream_core.bench.suites import suite_categories, suite_examples
from specstream_core.errors import SpecstreamError
from specstream_core.model import defaults
from specstream_core.model.loading import resolve_precision

OPTION_HELP = ("an engine option of side %s, KEY=VALUE, repeatable: precision, streams (a stream directory), "
               "stream_weights, kernel, chat, or a draft setting: topk ([2,2,1]), node_budget, lookup, ngrams, "
               "prune_threshold")


def add_arguments(p) -> None:
    p.add_argument("--against", metavar="REV", help="side A runs this git revision's code (side B: the working tree); "
                   "without it both sides run the working tree and --side-a / --side-b say how they differ")
    p.add_argument("--side-a", action="append", metavar="KEY=VALUE", help=OPTION_HELP % "A")
    p.add_argument("--side-b", action="append", metavar="KEY=VALUE", help=OPTION_HELP % "B")
    p.add_argument("--base", help="base model (default: SmolLM2-135M-Instruct)")
    p.add_argument("--streams", help="stream directory for both sides (default: the default model's lossless set)")
    p.add_argument("--methods", default="ar,ss", help="decoding modes, comma-separated: ar (plain loop), ss")
    p.add_argument("--precisions", default="", help="comma-separated (default: the default precision, then fp32); "
                   "a side's own precision= option overrides it")
    p.add_argument("--suite", choices=("chat", "tasks"), default="chat", help="prompt suite (bench's)")
    p.add_argument("--n", type=int, default=4, help="eval prompts per category (default 4: 32 prompts)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch threads in each worker")
    p.add_argument("--json", metavar="FILE", help="write the summary, per-category rows and settings as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _plan(args) -> dict:
    modes = _csv(args.methods)
    if not modes or any(m not in ("ar", "ss") for m in modes):
        raise SpecstreamError(f"--methods must list ar and/or ss, got {args.methods!r}")
    if args.n < 1 or args.max_new_tokens < 1 or args.threads < 1:
        raise SpecstreamError("--n, --max-new-tokens and --threads must be positive")
    a, b = ab.parse_options(args.side_a), ab.parse_options(args.side_b)
    if args.against is None and a == b:
        raise SpecstreamError("nothing to compare: give --against REV, or --side-a / --side-b options that differ")
    base, streams = defaults.resolve(args.base, args.streams)
    for side in (a, b):  # paths reach the workers absolute (each runs in its own tree)
        side.setdefault("streams", streams)
        if side["streams"] and os.path.exists(side["streams"]):
            side["streams"] = os.path.abspath(side["streams"])
    base = os.path.abspath(base) if os.path.exists(base) else base
    precisions = _csv(args.precisions) or list(dict.fromkeys([resolve_precision("auto", "cpu", base=base), "fp32"]))
    texts = {c: [ex["prompt"] for ex in suite_examples(args.suite, c, args.n)] for c in suite_categories(args.suite)}
    return {"a": a, "b": b, "base": base, "precisions": precisions, "modes": modes, "texts": texts}


def run(args) -> int:
    pl = _plan(args)
    here = defaults.ROOT
    with _a_tree(here, args.against) as (tree_a, label_a):
        sides = (ab.Side(label_a, tree_a, pl["a"]),
                 ab.Side("B" if args.against is None else "working tree", here, pl["b"]))
        summaries, rows = ab.run_ab(sides, pl["base"], pl["texts"], pl["precisions"], pl["modes"],
                                    args.max_new_tokens, args.threads)
    table = ab.markdown(summaries)
    print(table)
    settings = {"against": args.against, "a": pl["a"], "b": pl["b"], "base": pl["base"], "suite": args.suite,
                "n": args.n, "prompts": sum(map(len, pl["texts"].values())), "max_new_tokens": args.max_new_tokens,
                "threads": args.threads, "methods": pl["modes"], "precisions": pl["precisions"]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summaries, "rows": [r.__dict__ for r in rows], "settings": settings}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"{table}\n\nPer category (speedup: B over A; identical: B's tokens against A's):\n\n"
                    f"{markdown_table(rows, 'A')}\n\nSettings: `{json.dumps(settings)}`\n")
    return 0


@contextlib.contextmanager
def _a_tree(here: str, against: str | None):
    """(side A's source tree, its label): the other revision's files in a temporary directory, or this tree."""
    if against is None:
        yield here, "A"
        return
    commit = ab.resolve_revision(here, against)
    with ab.revision_tree(here, commit) as tree:
        yield tree, commit

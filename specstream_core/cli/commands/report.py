"""`report`: write docs/BENCHMARKS.md and the README's generated parts (the results table, what training the
bundled streams took) from the result files in docs/bench/ and assets/smollm2/bench/
(specstream_core/bench/report.py); `--check` only says whether they are current.

    python -m specstream_core report           # after adding or rerunning a result file
    python -m specstream_core report --check   # exit status 1 where a page differs from what the files give
"""

from __future__ import annotations

import os
import sys

from specstream_core.errors import SpecstreamError

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def add_arguments(p) -> None:
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is not what the files give")
    p.add_argument("--root", help="the repository checkout whose docs to read and write (default: the current "
                   "directory if it holds docs/bench/, else the checkout this package runs from)")


def _root(given: str | None) -> str:
    root = given or (os.getcwd() if os.path.isdir(os.path.join(os.getcwd(), "docs", "bench")) else CHECKOUT)
    if not (os.path.isdir(os.path.join(root, "docs", "bench")) and os.path.isfile(os.path.join(root, "README.md"))):
        raise SpecstreamError(f"{root} has no docs/bench/ and README.md: run it in the repository checkout or "
                              "name one with --root")
    return root


def run(args) -> int:
    from specstream_core.bench import report

    root = _root(args.root)
    if args.check:
        stale = report.check(root)
        for rel in stale:
            print(f"{rel} is not what the result files give: run `python -m specstream_core report`", file=sys.stderr)
        return 1 if stale else 0
    changed = report.write(root)
    print("\n".join(f"wrote {rel}" for rel in changed) or "up to date")
    return 0

"""`report`: write docs/BENCHMARKS.md and the README's results table from the result files in docs/bench/
(specstream_core/bench/report.py); `--check` only says whether they are current.

    python -m specstream_core report           # after adding or rerunning a result file in docs/bench/
    python -m specstream_core report --check   # exit status 1 where a page differs from what the files give
"""

from __future__ import annotations

import os
import sys


def add_arguments(p) -> None:
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is not what the files give")
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))), help="the repository checkout whose docs/ to read and write")


def run(args) -> int:
    from specstream_core.bench import report

    if args.check:
        stale = report.check(args.root)
        for rel in stale:
            print(f"{rel} is not what the result files give: run `python -m specstream_core report`", file=sys.stderr)
        return 1 if stale else 0
    changed = report.write(args.root)
    print("\n".join(f"wrote {rel}" for rel in changed) or "up to date")
    return 0

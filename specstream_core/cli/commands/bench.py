"""`bench`: speculative streaming vs plain decoding and other methods, per category, precision and
ablation.

    python -m specstream_core bench --json docs/bench/latest.json --markdown docs/bench/latest.md \
        --plots docs/bench/

Methods on the same base model, same prompts and lengths, greedy: ar (our plain loop), hf-greedy,
hf-pld (transformers prompt lookup), hf-assisted (transformers assisted generation with the small
draft in assets/smollm2/draft), pld (our prompt-lookup drafter through our tree verifier), medusa
(Medusa-style heads in assets/smollm2/medusa through our tree verifier), ss (the lossless streams; rows
labelled ss-lossless) and ss-shared; each at the precisions --precisions lists.
Ablations (at the first precision listed, lossless streams, a subset of categories): draft depth γ (first g
streams), per-depth top-k, Ns (with --ablation-streams), the pruning threshold and prompt lookup grafted onto the tree
(`bench/ablations.py`).
"""

from __future__ import annotations

import argparse
import os

from specstream_core.bench.names import ABLATIONS, DOC_BEGIN, DOC_END
from specstream_core.cli import bench_ab
from specstream_core.cli.bench_settings import (ABLATION_CATEGORIES, ABLATION_N, ALL_METHODS, DEFAULT_MAX_NEW,
                                                DEFAULT_N, DRAFT_DIR, MEDUSA_DIR, PRECISIONS, SUITES)
from specstream_core.cli.vocab import Deprecated, add_tree_topk
from specstream_core.model import defaults


def _old_quantize(value: str) -> str:
    if value not in ("none", "nf4"):
        raise ValueError(f"unknown name {value!r}; valid: none, nf4")
    return "nf4" if value == "nf4" else "fp32"


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model (default: SmolLM2-135M-Instruct)")
    p.add_argument("--streams", help="lossless stream directory (default: the default model's, in assets/smollm2/)")
    p.add_argument("--shared-streams", help="shared-mode stream directory (default: the default model's)")
    p.add_argument("--suite", choices=SUITES, default="chat",
                   help="prompts: 'chat' = the chat corpus's eval split, worded unlike its train split (default); "
                        "'tasks' = the old templated task suite")
    p.add_argument("--raw", action="store_true", help="do not wrap prompts in the model's chat template")
    p.add_argument("--draft", help=f"draft model for hf-assisted (default: {os.path.relpath(DRAFT_DIR, defaults.ROOT)})")
    p.add_argument("--medusa", help=f"Medusa heads directory (default: {os.path.relpath(MEDUSA_DIR, defaults.ROOT)})")
    p.add_argument("--methods", default=",".join(ALL_METHODS), help=f"comma-separated subset of {', '.join(ALL_METHODS)} "
                   "(ss: the --streams set, its rows labelled ss-lossless)")
    p.add_argument("--baseline", default="hf-greedy", help="method the speedup column is relative to")
    p.add_argument("--categories", default="", help="comma-separated task categories (default: all)")
    p.add_argument("--n", type=int, default=None, help=f"eval prompts per category (default {DEFAULT_N})")
    p.add_argument("--max-new-tokens", type=int, default=None, help=f"default {DEFAULT_MAX_NEW}")
    add_tree_topk(p, "draft tree per depth (default: the streams' recommended)")
    p.add_argument("--prune-threshold", type=float, default=None)
    p.add_argument("--node-budget", type=int, default=None)
    p.add_argument("--lookup", type=int, default=None,
                   help="prompt-lookup tokens grafted onto the streams' tree (default: the streams' recommended)")
    p.add_argument("--ngrams", action=argparse.BooleanOptionalAction, default=None,
                   help="copy from the stream set's n-gram store where the context has no longer match "
                        "(default: the streams' recommended)")
    p.add_argument("--precisions", default=None, help=f"comma-separated subset of {', '.join(PRECISIONS)} (default: "
                   "the default precision (int4-a8 on the default model, bf16 on the CPU kernel for others), fp32, "
                   "nf4; --quick: fp32); ablations run on the first")
    # the old shorthand --quantize none|nf4 (--precisions fp32 / nf4) still works
    p.add_argument("--quantize", dest="precisions", action=Deprecated, new="--precisions", convert=_old_quantize)
    p.add_argument("--ablations", default=None,
                   help=f"comma-separated subset of {', '.join(ABLATIONS)}, or 'none' (default: all that apply)")
    p.add_argument("--ablation-streams", default="", help="comma-separated stream directories with different Ns "
                   "(the Ns ablation runs only with these)")
    p.add_argument("--ablation-categories", type=int, default=ABLATION_CATEGORIES, help="categories in the ablations")
    p.add_argument("--ablation-n", type=int, default=ABLATION_N, help="prompts per category in the ablations")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="smoke test: 2 categories × 2 prompts × 32 tokens, fp32, γ ablation only (≤ 3 minutes)")
    p.add_argument("--json", metavar="FILE", help="write rows, ablation rows, summary and settings as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the Markdown tables")
    p.add_argument("--plots", metavar="DIR", help="write figures (SVG + Plotly HTML) into DIR")
    p.add_argument("--doc", metavar="FILE", help="rewrite the generated section of this Markdown page (between "
                   f"{DOC_BEGIN} and {DOC_END}; a page of your own; docs/BENCHMARKS.md is made by `report`) with the tables, figures and command")
    sub = p.add_subparsers(dest="bench_command", metavar="ab", help="`bench ab --help`: an A/B of two revisions "
                           "or two sets of engine options (bench/ab.py)")
    bench_ab.add_arguments(sub.add_parser("ab", help=bench_ab.__doc__.splitlines()[0], description=bench_ab.__doc__,
                                          formatter_class=argparse.RawDescriptionHelpFormatter))


def run(args) -> int:
    if getattr(args, "bench_command", None) == "ab":
        return bench_ab.run(args)
    from specstream_core.cli import bench_run

    return bench_run.run(args)

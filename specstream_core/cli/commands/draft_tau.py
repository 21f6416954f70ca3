"""`draft-tau`: the τ each draft reaches on the chat corpus's eval prompts, replayed over their greedy answers
instead of timed (`bench/draft_replay.py`): how far drafting alone can take a stream set.

    python -m specstream_core draft-tau                                   # the default model, its set's draft
    python -m specstream_core draft-tau --n 20 --drafts default,b4l3n,b8l7n,b16l15n --json tau.json
    python -m specstream_core draft-tau --base MODEL --streams DIR --drafts streams/k1,streams/k4321

Each prompt's answer is decoded once with the plain loop, then every draft is replayed over it: the same
passes decoding with it would take (`--check` decodes some prompts again to show it). τ is tokens per
pass, as `bench` reports it. It says nothing of what a pass costs (`pass-cost`, `bench`).
"""

from __future__ import annotations

import json
import sys

from specstream_core.cli.args import add_model_arguments, check_model_arguments, check_output_file, load_engine, write_text
from specstream_core.errors import SpecstreamError


def add_arguments(p) -> None:
    from specstream_core.bench.draft_names import DRAFT_HELP

    add_model_arguments(p)
    p.add_argument("--drafts", default="streams,default,b8l7n,b16l15n", help="comma-separated drafts: " + DRAFT_HELP)
    p.add_argument("--n", type=int, default=10, help="eval prompts per category (1-100)")
    p.add_argument("--prompts", metavar="FILE", help="your own prompts instead: JSONL objects with a \"prompt\" (text, "
                   "or a list of token ids) and optionally a \"category\"")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--check", type=int, default=0, help="also decode the first CHECK prompts with every draft")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the table as Markdown")
    p.add_argument("--no-progress", action="store_true")


def read_prompts(path: str) -> list[tuple[str, str | list[int]]]:
    """(category, prompt) of each line of a prompts file; one clear error for a bad line."""
    from specstream_core.io.jsonl import read_objects

    out = []
    for n, obj in read_objects(path, "prompts"):
        prompt, category = obj.get("prompt"), obj.get("category", "all")
        ids = isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        if not (ids or (isinstance(prompt, str) and prompt.strip())) or not isinstance(category, str):
            raise SpecstreamError(f"{path}:{n}: expected a non-empty \"prompt\" (text or token ids) and a text \"category\"")
        out.append((category, prompt))
    if not out:
        raise SpecstreamError(f"{path}: no prompts in it")
    return out


def table(result: dict, drafts: list[str]) -> str:
    cats = list(next(iter(result["tau"].values())))
    lines = ["| draft | nodes a step | " + " | ".join(cats) + " | mean τ |", "|---|---|" + "---|" * (len(cats) + 1)]
    for d in drafts:
        lines.append(f"| {d} | {result['nodes_per_step'][d]:.2f} | " + " | ".join(f"{result['tau'][d][c]:.2f}" for c in cats)
                     + f" | **{result['mean_tau'][d]:.2f}** |")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    import torch

    from specstream_core.bench.draft_replay import parse_draft, run as replay_all
    from specstream_core.bench.suites import suite_categories, suite_examples

    check_model_arguments(args)
    drafts = [d.strip() for d in args.drafts.split(",") if d.strip()]
    if not drafts:
        raise SpecstreamError("--drafts names no draft")
    for d in drafts:
        parse_draft(d)
    if not 1 <= args.n <= 100:
        raise SpecstreamError(f"--n must be between 1 and 100, got {args.n}")
    if not 1 <= args.max_new_tokens <= 4096:
        raise SpecstreamError(f"--max-new-tokens must be between 1 and 4096, got {args.max_new_tokens}")
    if args.check < 0:
        raise SpecstreamError(f"--check must be 0 or more, got {args.check}")
    if args.threads < 1:
        raise SpecstreamError(f"--threads must be at least 1, got {args.threads}")
    for path, flag in ((args.json, "--json"), (args.markdown, "--markdown")):
        if path:
            check_output_file(path, flag)
    prompts = (read_prompts(args.prompts) if args.prompts else
               [(c, ex["prompt"]) for c in suite_categories("corpus") for ex in suite_examples("corpus", c, args.n)])
    torch.set_num_threads(args.threads)
    engine = load_engine(args, quiet=True)
    if engine.streams is None:
        raise SpecstreamError("draft-tau needs stream parameters")

    def progress(done: int, total: int) -> None:
        if not args.no_progress:
            print(f"\rdraft-tau: {done}/{total} prompts", end="" if done < total else "\n", file=sys.stderr, flush=True)

    result = replay_all(engine, prompts, drafts, args.max_new_tokens, args.check, progress)
    text = table(result, drafts)
    top1 = ", ".join(f"{j}: {a:.3f}" for j, a in result["stream_top1"].items())
    print(f"{engine.name}, {engine.precision}, {result['prompts']} prompts, {args.max_new_tokens} new tokens")
    print(f"the streams' top-1 accuracy by depth: {top1}")
    print(text, end="")
    for d, (agreed, checked) in result["checked"].items():
        print(f"check {d}: decoding took the replayed passes on {agreed} of {checked} prompts")
    if args.json:
        from specstream_core.bench.provenance import stamp

        data = {"precision": engine.precision, "max_new_tokens": args.max_new_tokens, "drafts": drafts, **result}
        write_text(args.json, json.dumps(stamp(data, getattr(args, "_command", None)), indent=1) + "\n")
    if args.markdown:
        write_text(args.markdown, text)
    return 0

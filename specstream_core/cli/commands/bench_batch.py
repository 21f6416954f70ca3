"""`bench-batch`: samples/s and tokens/s of batched decoding (ar, ss) against a sequential loop and
transformers' batched `generate`, plus the shared-prefix cache (n samples of one prompt)."""

from __future__ import annotations

import json
import os
import platform
import warnings

from specstream_core.model import defaults
from specstream_core.decoding.config import DRAFT_FALLBACK, DecodeConfig, decode_fields, parse_topk
from specstream_core.errors import SpecstreamError
from specstream_core.cli import vocab
from specstream_core.cli.args import recommended
from specstream_core.cli.vocab import add_tree_topk


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model (default: SmolLM2-135M-Instruct)")
    p.add_argument("--streams", help="stream directory (default: the default model's lossless streams)")
    p.add_argument("--batch-sizes", default="1,2,4,8,16", help="comma-separated batch sizes")
    p.add_argument("--methods", default="ar-seq,ar-batch,ss-batch,hf-batch",
                   help="subset of ar-seq, ar-batch, ss-batch, hf-batch (ar-seq is always run: it is the baseline)")
    p.add_argument("--prompts", type=int, default=32, help="eval prompts, mixed across categories")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per method and batch size (median)")
    add_tree_topk(p, "draft tree(s) per depth for ss-batch, ';' between trees, e.g. '1,1,1,1;1' (default: the "
                     "streams' recommended)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--shared-n", type=int, default=8, help="samples of one prompt for the shared-prefix comparison (0 = skip)")
    p.add_argument("--quick", action="store_true", help="8 prompts, batch sizes 1,8, 32 tokens, 1 repeat, shared n=4")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", metavar="FILE", help="write all rows as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the Markdown tables")


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecstreamError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or any(not 1 <= v <= 256 for v in values):
        raise SpecstreamError(f"{flag} values must be between 1 and 256, got {text!r}")
    return values


def _settings(args):
    """(batch sizes, methods, prompts, max new tokens, repeats, shared n), checked; --quick shrinks them."""
    from specstream_core.bench.batch_bench import METHODS

    batch_sizes = _int_list(args.batch_sizes, "--batch-sizes")
    methods = vocab.names(args.methods, "--methods", tuple(METHODS))
    if "ar-seq" not in methods:
        methods.insert(0, "ar-seq")
    n_prompts, max_new, repeats, shared_n = args.prompts, args.max_new_tokens, args.repeats, args.shared_n
    if args.quick:
        n_prompts, batch_sizes, max_new, repeats, shared_n = 8, [1, 8], 32, 1, min(shared_n, 4)
    if n_prompts < 1 or repeats < 1 or not 1 <= max_new <= 4096:
        raise SpecstreamError("--prompts and --repeats must be >= 1 and --max-new-tokens between 1 and 4096")
    if args.threads < 1:
        raise SpecstreamError(f"--threads must be >= 1, got {args.threads}")
    return batch_sizes, methods, n_prompts, max_new, repeats, shared_n


def run(args) -> int:
    import torch

    from specstream_core.bench.batch_bench import (run_throughput, shared_markdown, shared_prefix_benchmark, throughput_markdown,
                               to_json)
    from specstream_core.decoding.engine import Engine
    from specstream_core.kernels.linears import rowinv
    from specstream_core.tasks import load_split

    batch_sizes, methods, n_prompts, max_new, repeats, shared_n = _settings(args)
    torch.set_num_threads(args.threads)
    base, streams = defaults.resolve(args.base, args.streams)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = Engine.load(base, streams)
    draft = {**DRAFT_FALLBACK, **decode_fields(recommended(streams), rowinv.draft_precision(engine.precision))}  # the set's draft here, else the fallbacks
    trees = ([parse_topk(t) for t in args.topk.split(";") if t.strip()] if args.topk else [draft["tree_topk"]])
    budget, lookup = draft["node_budget"], draft["lookup"]
    ss_cfg = DecodeConfig(mode="ss", max_new_tokens=max_new, tree_topk=trees[0], node_budget=budget, lookup=lookup,
                          ngrams=bool(draft["ngrams"]) and engine.ngrams is not None)
    n_cats = 7
    examples = load_split("eval", n=-(-n_prompts // n_cats))[:n_prompts]  # categories interleaved
    prompts = [engine.encode(ex["prompt"], max_new) for ex in examples]

    rows = run_throughput(engine, prompts, batch_sizes, max_new, trees, methods, repeats, not args.no_progress, budget,
                          lookup)
    shared, longest = [], max(prompts, key=len)
    if shared_n > 1:
        shared = shared_prefix_benchmark(engine, longest, shared_n, max_new, ss_cfg, repeats)
    meta = {"model": engine.name, "streams": os.path.relpath(streams, defaults.ROOT) if streams else None,
            "threads": args.threads, "prompts": len(prompts),
            "max_new_tokens": max_new, "repeats": repeats, "batch_sizes": batch_sizes, "trees": [list(t) for t in trees],
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "torch": torch.__version__}
    table = throughput_markdown(rows)
    shared_table = shared_markdown(shared) if shared else ""
    print(table)
    if shared_table:
        print()
        print(shared_table)
    if args.json:
        with open(args.json, "w") as f:
            from specstream_core.bench.provenance import stamp

            json.dump(stamp(to_json(rows, shared, meta), getattr(args, "_command", None)), f, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"Batch throughput: {engine.name} + {meta['streams']}, {len(prompts)} eval prompts, "
                    f"{max_new} new tokens (greedy), "
                    f"{args.threads} threads, median of {repeats}.\n\n{table}\n")
            if shared_table:
                f.write(f"\nShared prompt: n={shared_n} samples of one {len(longest)}-token prompt.\n\n"
                        f"{shared_table}\n")
    return 0

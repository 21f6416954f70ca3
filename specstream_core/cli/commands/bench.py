"""`bench`: speculative streaming vs plain decoding and other methods, per category, precision and
ablation.

    python -m specstream_core bench --json docs/bench/latest.json --markdown docs/bench/latest.md \
        --plots docs/bench/

Methods on the same base model, same prompts and lengths, greedy: ar (our plain loop), hf-greedy,
hf-pld (transformers prompt lookup), hf-assisted (transformers assisted generation with the small
draft in assets/smollm2/draft), pld (our prompt-lookup drafter through our tree verifier), medusa
(Medusa-style heads in assets/smollm2/medusa through our tree verifier), ss-lossless and ss-shared.
Ablations (at the first precision listed, lossless streams, a subset of categories): draft depth γ (first g
streams), per-depth top-k, Ns (with --ablation-streams), the pruning threshold and prompt lookup grafted onto the tree
(`bench/ablations.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import warnings
from dataclasses import asdict, replace

from specstream_core.model import defaults
from specstream_core.decoding.config import NODE_BUDGET, DecodeConfig, decode_fields, parse_topk
from specstream_core.errors import SpecstreamError
from specstream_core.model.loading import INT4, LoadConfig, load_model, resolve_precision
from specstream_core.cli.args import recommended
from specstream_core.cli import bench_ab
from specstream_core.bench.ablations import ABLATIONS, ablation_methods, tree_nodes
from specstream_core.bench.report import DOC_BEGIN, DOC_END, update_doc
from specstream_core.bench.suites import suite_categories, suite_examples, suite_scorer

ALL_METHODS = ("ar", "hf-greedy", "hf-pld", "hf-assisted", "pld", "medusa", "ss-lossless", "ss-shared")
DRAFT_DIR = os.path.join(defaults.SMOL_ASSETS, "draft")
MEDUSA_DIR = defaults.SMOL_MEDUSA_DIR
SUITES = ("chat", "tasks")  # chat: the chat prompt corpus's eval split (default); tasks: the old templated suite
# default run sized to finish in <= 20 minutes on the project's 2-core CPU (see docs/BENCHMARKS.md)
DEFAULT_N, DEFAULT_MAX_NEW = 6, 64
ABLATION_CATEGORIES, ABLATION_N = 3, 4
QUICK = {"categories": 2, "n": 2, "max_new": 32, "precisions": "fp32", "ablations": "gamma"}


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
    p.add_argument("--methods", default=",".join(ALL_METHODS), help=f"comma-separated subset of {', '.join(ALL_METHODS)}")
    p.add_argument("--baseline", default="hf-greedy", help="method the speedup column is relative to")
    p.add_argument("--categories", default="", help="comma-separated task categories (default: all)")
    p.add_argument("--n", type=int, default=None, help=f"eval prompts per category (default {DEFAULT_N})")
    p.add_argument("--max-new-tokens", type=int, default=None, help=f"default {DEFAULT_MAX_NEW}")
    p.add_argument("--topk", default="", help="draft tree per depth (default: the streams' recommended)")
    p.add_argument("--prune-threshold", type=float, default=None)
    p.add_argument("--node-budget", type=int, default=None)
    p.add_argument("--lookup", type=int, default=None,
                   help="prompt-lookup tokens grafted onto the streams' tree (default: the streams' recommended)")
    p.add_argument("--ngrams", action=argparse.BooleanOptionalAction, default=None,
                   help="copy from the stream set's n-gram store where the context has no longer match "
                        "(default: the streams' recommended)")
    p.add_argument("--precisions", default=None, help="comma-separated: fp32,nf4,int4,int4-a8,bf16 (default: the default precision "
                                                           "(int4-a8 on the default model, bf16 on the CPU kernel for "
                                                           "others), fp32, nf4; --quick: fp32); ablations run on the "
                                                           "first")
    p.add_argument("--quantize", choices=("none", "nf4"), default=None, help="shorthand for --precisions fp32 / nf4")
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
                   f"{DOC_BEGIN} and {DOC_END}; e.g. docs/BENCHMARKS.md) with the tables, figures and command")
    sub = p.add_subparsers(dest="bench_command", metavar="ab", help="`bench ab --help`: an A/B of two revisions "
                           "or two sets of engine options (bench/ab.py)")
    bench_ab.add_arguments(sub.add_parser("ab", help=bench_ab.__doc__.splitlines()[0], description=bench_ab.__doc__,
                                          formatter_class=argparse.RawDescriptionHelpFormatter))


def lora_parameter_count(streams_dir: str) -> int:
    from safetensors import safe_open

    path = os.path.join(streams_dir, "lora", "adapter_model.safetensors")
    if not os.path.isfile(path):
        return 0
    with safe_open(path, "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def _csv(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _default_precision(args) -> str:
    try:
        base = args.base or defaults.resolve(None, None)[0]
    except SpecstreamError:  # no default model here: bench says so when it loads one
        base = None
    return resolve_precision("auto", args.device, base=base)


def plan(args) -> dict:
    """Resolve sizes, methods, precisions and ablations from the flags (quick mode fills defaults)."""
    CATEGORIES = suite_categories(args.suite)
    methods = _csv(args.methods)
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise SpecstreamError(f"unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}")
    if "ar" not in methods:
        methods.insert(0, "ar")
    categories = _csv(args.categories) or list(CATEGORIES)
    bad = [c for c in categories if c not in CATEGORIES]
    if bad:
        raise SpecstreamError(f"unknown categories {bad}; choose from {', '.join(CATEGORIES)}")
    if args.quick and not args.categories:
        categories = categories[: QUICK["categories"]]
    n = args.n if args.n is not None else (QUICK["n"] if args.quick else DEFAULT_N)
    max_new = args.max_new_tokens if args.max_new_tokens is not None else (QUICK["max_new"] if args.quick else DEFAULT_MAX_NEW)
    if args.precisions is not None:
        precisions = _csv(args.precisions)
    elif args.quantize is not None:
        precisions = ["nf4" if args.quantize == "nf4" else "fp32"]
    else:
        # the default precision first (int4-a8 on the default model, the checkpoint's own dtype elsewhere:
        # `resolve_precision`), then fp32 and nf4
        precisions = (_csv(QUICK["precisions"]) if args.quick
                      else list(dict.fromkeys([_default_precision(args), "fp32", "nf4"])))
    bad = [p for p in precisions if p not in ("fp32", "nf4", "int4", "int4-a8", "bf16")]
    if bad or not precisions:
        raise SpecstreamError(f"--precisions must list some of fp32, nf4, int4, int4-a8, bf16, got {args.precisions!r}")
    if args.ablations is not None:
        ablations = [] if args.ablations.strip() == "none" else _csv(args.ablations)
    else:
        ablations = _csv(QUICK["ablations"]) if args.quick else list(ABLATIONS)
    bad = [a for a in ablations if a not in ABLATIONS]
    if bad:
        raise SpecstreamError(f"unknown ablations {bad}; choose from {', '.join(ABLATIONS)} or 'none'")
    if "ns" in ablations and not args.ablation_streams:
        ablations.remove("ns")  # only with stream sets of different Ns
    if n < 1 or max_new < 1:
        raise SpecstreamError("--n and --max-new-tokens must be >= 1")
    baseline = args.baseline if args.baseline in methods else "ar"
    return {"methods": methods, "categories": categories, "n": n, "max_new": max_new, "precisions": precisions,
            "ablations": ablations, "baseline": baseline}


def _load_engine(base, streams_dir, precision, device, chat=True):
    from specstream_core.decoding.engine import Engine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Engine.load(base, streams_dir, precision=precision, device=device, fresh_streams=False, chat=chat)


def ss_config(ctx: dict, precision: str) -> DecodeConfig:
    """Speculative streaming's draft at one precision: the flags, else the stream set's record for it."""
    from specstream_core.kernels.linears import rowinv

    return ctx["ss_given"].settled(decode_fields(ctx["ss_stored"], rowinv.draft_precision(precision)))


def build_methods(names, engine, precision, ctx, shared_engine=None) -> list:
    """Benchmark methods on one engine (one precision)."""
    from specstream_core.bench.runner import engine_method, hf_method
    from specstream_core.decoding.drafters import PromptLookupDrafter

    max_new, ar_cfg = ctx["max_new"], ctx["ar_cfg"]
    ss_cfg = ss_config(ctx, engine.precision)
    hf_model = ctx.get("hf_model") or engine.model  # transformers' side: fp32 beside bf16 weights (_hf_model)
    built = []
    for name in names:
        if name == "ar":
            built.append(engine_method("ar", engine, ar_cfg))
        elif name == "hf-greedy":
            built.append(hf_method("hf-greedy", hf_model, max_new))
        elif name == "hf-pld":
            built.append(hf_method("hf-pld", hf_model, max_new, prompt_lookup_num_tokens=10))
        elif name == "hf-assisted":
            draft = ctx.get("draft_model")
            if draft is None:
                continue
            built.append(hf_method("hf-assisted", hf_model, max_new, extra_params=ctx["draft_params"],
                                   assistant_model=draft))
        elif name == "pld":
            built.append(engine_method("pld", engine, ss_cfg, lambda: PromptLookupDrafter(),
                                       tree_nodes=11))
        elif name == "medusa":
            if not ctx.get("medusa_dir"):
                continue
            from specstream_core.decoding.drafters.medusa import MedusaDrafter
            from specstream_core.model.medusa_heads import MedusaHeads, recommended_topk

            heads = MedusaHeads.load(ctx["medusa_dir"], engine.model)
            topk = recommended_topk(ctx["medusa_dir"]) or ss_cfg.tree_topk
            budget = NODE_BUDGET  # the heads' own tree, not the streams' (lookup) budget
            built.append(engine_method("medusa", engine, ss_cfg,
                                       lambda heads=heads, topk=topk: MedusaDrafter(heads, engine.logits, topk, budget),
                                       extra_params=heads.extra_parameter_count(), tree_nodes=tree_nodes(topk, budget)))
        elif name == "ss-lossless":
            if engine.streams is None:
                continue
            built.append(engine_method("ss-lossless", engine, ss_cfg, extra_params=engine.streams.extra_parameter_count(),
                                       tree_nodes=tree_nodes(ss_cfg.tree_topk, ss_cfg.node_budget)))
        elif name == "ss-shared" and shared_engine is not None:
            scfg = ctx["shared_cfg"]
            built.append(engine_method("ar-shared", shared_engine, ar_cfg))
            lora = lora_parameter_count(ctx["shared_dir"])  # merged into the weights on load: count the file
            built.append(engine_method("ss-shared", shared_engine, scfg, reference="ar-shared",
                                       extra_params=shared_engine.streams.extra_parameter_count() + lora,
                                       tree_nodes=tree_nodes(scfg.tree_topk, scfg.node_budget)))
    return built


def run(args) -> int:
    if getattr(args, "bench_command", None) == "ab":
        return bench_ab.run(args)
    import torch

    from specstream_core.bench.runner import markdown_table, summarize, summary_table

    t_start = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
    pl = plan(args)
    ctx = _context(args, pl)
    print(f"bench: {len(pl['categories'])} categories × {pl['n']} prompts × ≤{ctx['max_new']} tokens; precisions "
          f"{', '.join(pl['precisions'])}; ablations {', '.join(pl['ablations']) or 'none'}; ss tree "
          f"{list(ctx['ss_cfg'].tree_topk)}, prune {ctx['ss_cfg'].prune_threshold}, budget {ctx['ss_cfg'].node_budget}; torch threads "
          f"{torch.get_num_threads()}", flush=True)
    rows, ablation_rows = _measure(args, pl, ctx)
    summary = summarize(rows)
    table = markdown_table(rows, pl["baseline"])
    overview = summary_table(summary, pl["baseline"])
    abl_table = markdown_table(ablation_rows, pl["baseline"]) if ablation_rows else ""
    wall = time.time() - t_start
    print(overview)
    print(table)
    if abl_table:
        print(abl_table)
    print(f"bench took {wall / 60:.1f} min")
    data = {"rows": [asdict(r) for r in rows], "ablations": [asdict(r) for r in ablation_rows], "summary": summary,
            "settings": _settings(args, pl, ctx, wall, torch.get_num_threads())}
    _write(args, data, overview, table, abl_table)
    return 0


def _context(args, pl: dict) -> dict:
    """What every method needs: models, stream sets, decode settings (the stream set's recommendation
    unless given)."""
    base, lossless = defaults.resolve(args.base, args.streams)
    bundled = not args.base
    shared = args.shared_streams or (defaults.default_streams("shared") if bundled else None)
    draft_dir = args.draft or (DRAFT_DIR if bundled and os.path.isdir(DRAFT_DIR) else None)
    medusa_dir = args.medusa or (MEDUSA_DIR if bundled and os.path.isdir(MEDUSA_DIR) else None)
    for name, have, what in (("hf-assisted", draft_dir, "--draft (a draft model)"), ("medusa", medusa_dir, "--medusa"),
                             ("ss-shared", shared, "--shared-streams")):
        if name in pl["methods"] and not have:
            print(f"skipping {name}: no {what}")
    max_new = pl["max_new"]
    given = DecodeConfig(mode="ss", max_new_tokens=max_new, tree_topk=parse_topk(args.topk) if args.topk else None,
                         prune_threshold=args.prune_threshold, node_budget=args.node_budget, lookup=args.lookup,
                         ngrams=args.ngrams)
    ctx = {"max_new": max_new, "base": base, "device": args.device, "ablation_streams": args.ablation_streams,
           "ss_given": given, "ss_stored": recommended(lossless), "ar_cfg": DecodeConfig(mode="ar", max_new_tokens=max_new), "medusa_dir": medusa_dir,
           "shared_dir": shared, "lossless_dir": lossless, "draft_dir": draft_dir}
    ss_cfg = ctx["ss_cfg"] = ss_config(ctx, pl["precisions"][0])  # the first precision's: ablations, settings
    if shared:  # its own recorded draft; what it does not record as the lossless one's, without prompt lookup
        ctx["shared_cfg"] = replace(ss_cfg, **{"lookup": 0, **decode_fields(recommended(shared))})
    if draft_dir and "hf-assisted" in pl["methods"]:
        from specstream_core.model.layer_draft import load_assistant

        ctx["draft_model"], ctx["draft_params"] = load_assistant(draft_dir, base, args.device)
    return ctx


def _hf_model(engine, engines: dict, base: str, device: str):
    """The model transformers' methods run on: the engine's own, except beside bf16 or int4 weights on the
    kernel, where transformers runs in fp32 as it ships, the baseline every figure is against. (On bf16
    weights it would widen every weight to fp32 on every call, half its fp32 speed: `speed`'s "hf-greedy
    bf16"; on int4 it would run torch's int4 kernel, which rounds activations to bf16, another model than
    the one the kernel computes: on the default model that is the fp32 model itself.)"""
    from specstream_core.kernels.linears import rowinv

    if engine.precision not in ("bf16", *INT4) or not rowinv.uses_kernel(engine.model):
        return None
    if "fp32" in engines:
        return engines["fp32"].model
    return load_model(LoadConfig(base, precision="fp32", device=device))


def _measure(args, pl: dict, ctx: dict) -> tuple[list, list]:
    """(rows per precision and method, ablation rows)."""
    from specstream_core.bench.runner import run_benchmark
    from specstream_core.kernels.linears import rowinv

    base, lossless, shared, max_new = ctx["base"], ctx["lossless_dir"], ctx["shared_dir"], ctx["max_new"]
    rows, ablation_rows, engines, prompts = [], [], {}, None
    for precision in pl["precisions"]:
        engine = _load_engine(base, lossless, precision, args.device, chat=not args.raw)
        engines[precision] = engine
        ctx.setdefault("linears", {})[precision] = rowinv.linears_label(engine.model)
        shared_engine = (_load_engine(base, shared, precision, args.device, chat=not args.raw)
                         if shared and "ss-shared" in pl["methods"] else None)
        if prompts is None:
            examples = {c: suite_examples(args.suite, c, pl["n"]) for c in pl["categories"]}
            prompts = {c: [engine.encode(ex["prompt"], max_new) for ex in exs] for c, exs in examples.items()}
            scorer = suite_scorer(args.suite, examples, engine)
        ctx["hf_model"] = _hf_model(engine, engines, base, args.device)
        ctx.setdefault("transformers", {})[precision] = "fp32" if ctx["hf_model"] is not None else precision
        built = build_methods(pl["methods"], engine, precision, ctx, shared_engine)
        baseline = pl["baseline"] if pl["baseline"] in [m.name for m in built] else "ar"
        rows += run_benchmark(prompts, built, baseline=baseline, precision=precision, desc=f"bench {precision}",
                              score=scorer)
    if pl["ablations"]:  # on the first precision listed (the default precision first when none is given)
        engine = engines[pl["precisions"][0]]
        ctx["hf_model"] = _hf_model(engine, engines, base, args.device)
        if engine.streams is None:
            print("skipping ablations: no lossless streams")
        else:
            cats = pl["categories"][: args.ablation_categories]
            sub = {c: prompts[c][: args.ablation_n] for c in cats}
            variants = ablation_methods(pl["ablations"], engine, ctx, pl, _load_engine)
            baseline = pl["baseline"] if pl["baseline"] in [m.name for m in variants] else "ar"
            ablation_rows = [r for r in run_benchmark(sub, variants, baseline=baseline, precision=engine.precision,
                                                      desc="ablations") if r.ablation]
    return rows, ablation_rows


def _settings(args, pl: dict, ctx: dict, wall: float, threads: int) -> dict:
    draft_dir, medusa_dir = ctx["draft_dir"], ctx["medusa_dir"]
    return {"suite": args.suite, "chat": not args.raw, "topk": list(ctx["ss_cfg"].tree_topk), "prune_threshold": ctx["ss_cfg"].prune_threshold,
            "node_budget": ctx["ss_cfg"].node_budget, "lookup": ctx["ss_cfg"].lookup,
            "ngrams": bool(ctx["ss_cfg"].ngrams), "n": pl["n"], "max_new_tokens": ctx["max_new"],
            "precisions": pl["precisions"], "baseline": pl["baseline"], "categories": pl["categories"],
            "ablations": pl["ablations"], "ablation_categories": pl["categories"][: args.ablation_categories],
            "ablation_n": args.ablation_n, "device": args.device, "threads": threads, "wall_s": round(wall, 1),
            "draft": draft_dir and os.path.relpath(draft_dir, defaults.ROOT),
            "medusa": medusa_dir and os.path.relpath(medusa_dir, defaults.ROOT), "quick": bool(args.quick),
            "date": time.strftime("%Y-%m-%d %H:%M"), "device_name": _device_name(args.device),
            "linears": ctx.get("linears"), "transformers": ctx.get("transformers")}


def _write(args, data: dict, overview: str, table: str, abl_table: str) -> None:
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if args.markdown:
        os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
        with open(args.markdown, "w") as f:
            f.write(f"## Summary\n\n{overview}\n\n## Per category\n\n{table}\n")
            if abl_table:
                f.write(f"\n## Ablations ({data['settings']['precisions'][0]}, lossless streams)\n\n{abl_table}\n")
    if args.plots:
        from specstream_core.bench.plots import write_plots

        written = write_plots(json.loads(json.dumps(data)), args.plots)
        print(f"wrote {len(written)} figure files to {args.plots}")
    if args.doc:
        update_doc(args.doc, json.loads(json.dumps(data)), command_line(), args.plots)
        print(f"updated {args.doc}")


def command_line() -> str:
    import shlex
    import sys

    argv = sys.argv[1:] if sys.argv and sys.argv[0].endswith(("__main__.py", "specstream_core")) else []
    return "python -m specstream_core " + (shlex.join(argv) if argv else "bench")


def _device_name(device: str) -> str:
    import platform

    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"

"""The machinery of `bench` (the command module, cli/commands/bench.py, parses its flags and calls `run`)."""

from __future__ import annotations

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
from specstream_core.bench.ablations import ABLATIONS, ablation_methods, tree_nodes
from specstream_core.bench.bench_doc import update_doc
from specstream_core.bench.suites import suite_categories, suite_examples, suite_scorer
from specstream_core.cli.bench_settings import (ABLATION_CATEGORIES, ABLATION_N, ALL_METHODS, DEFAULT_MAX_NEW,  # noqa: F401
                                                DEFAULT_N, DRAFT_DIR, MEDUSA_DIR, OLD_METHODS, PRECISIONS, QUICK,
                                                ROW_LABELS, SUITES)
from specstream_core.cli import vocab


def run(args) -> int:
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
    methods = [ROW_LABELS.get(m, m) for m in vocab.names(args.methods, "--methods", ALL_METHODS, OLD_METHODS)]
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
        precisions = vocab.precisions(args.precisions, "--precisions", PRECISIONS)
    else:
        # the default precision first (int4-a8 on the default model, the checkpoint's own dtype elsewhere:
        # `resolve_precision`), then fp32 and nf4
        precisions = (_csv(QUICK["precisions"]) if args.quick
                      else list(dict.fromkeys([_default_precision(args), "fp32", "nf4"])))
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
    baseline = vocab.names(args.baseline, "--baseline", ALL_METHODS, OLD_METHODS)[0]
    baseline = ROW_LABELS.get(baseline, baseline)
    baseline = baseline if baseline in methods else "ar"
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
        from specstream_core.bench.provenance import stamp

        with open(args.json, "w") as f:
            json.dump(stamp(data, getattr(args, "_command", None) or command_line()), f, indent=1)
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

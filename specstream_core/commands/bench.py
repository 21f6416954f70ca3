"""`bench`: speculative streaming vs plain decoding and other methods, per task category."""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import asdict

from .. import defaults
from ..decode import DecodeConfig, parse_topk
from ..errors import SpecstreamError

ALL_METHODS = ("ar", "hf-greedy", "hf-pld", "pld", "ss-lossless", "ss-shared")


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model (default: the bundled one)")
    p.add_argument("--streams", help="lossless stream directory (default: bundled)")
    p.add_argument("--shared-streams", help="shared-mode stream directory (default: bundled)")
    p.add_argument("--methods", default=",".join(ALL_METHODS), help=f"comma-separated subset of {', '.join(ALL_METHODS)}")
    p.add_argument("--baseline", default="hf-greedy", help="method the speedup column is relative to")
    p.add_argument("--categories", default="", help="comma-separated task categories (default: all)")
    p.add_argument("--n", type=int, default=20, help="eval prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--topk", default="", help="draft tree per depth (default: the streams' recommended)")
    p.add_argument("--prune-threshold", type=float, default=None)
    p.add_argument("--node-budget", type=int, default=None)
    p.add_argument("--quantize", choices=("none", "nf4"), default="none")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="2 categories × 3 prompts × 48 tokens (a smoke test)")
    p.add_argument("--json", metavar="FILE", help="write rows as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the Markdown table")


def lora_parameter_count(streams_dir: str) -> int:
    from safetensors import safe_open

    path = os.path.join(streams_dir, "lora", "adapter_model.safetensors")
    if not os.path.isfile(path):
        return 0
    with safe_open(path, "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def recommended(streams_dir: str | None) -> dict:
    """Decoding settings stored with trained streams (chosen by the bundled model's build)."""
    if not streams_dir:
        return {}
    path = os.path.join(streams_dir, "streams_config.json")
    try:
        with open(path) as f:
            return json.load(f).get("extra", {}).get("decode", {}) or {}
    except (OSError, ValueError):
        return {}


def run(args) -> int:
    import torch

    from ..bench import engine_method, hf_method, markdown_table, run_benchmark, summarize
    from ..engine import Engine
    from ..loading import precision_from_flags
    from ..tasks import CATEGORIES, load_split

    if args.threads:
        torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise SpecstreamError(f"unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}")
    if "ar" not in methods:
        methods.insert(0, "ar")
    if args.baseline not in methods:
        args.baseline = "ar"
    categories = [c for c in args.categories.split(",") if c] or list(CATEGORIES)
    bad = [c for c in categories if c not in CATEGORIES]
    if bad:
        raise SpecstreamError(f"unknown categories {bad}; choose from {', '.join(CATEGORIES)}")
    n, max_new = args.n, args.max_new_tokens
    if args.quick:
        categories, n, max_new = categories[:2], 3, 48
    base, lossless = defaults.resolve(args.base, args.streams)
    shared = args.shared_streams or (defaults.SHARED_DIR if not args.base and os.path.isdir(defaults.SHARED_DIR) else None)
    precision = precision_from_flags(args.quantize)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = Engine.load(base, lossless, precision=precision, device=args.device)
    rec = recommended(lossless)
    topk = parse_topk(args.topk) if args.topk else tuple(rec.get("topk", (4, 3, 2, 1)))
    prune = args.prune_threshold if args.prune_threshold is not None else rec.get("prune_threshold", 0.0)
    budget = args.node_budget if args.node_budget is not None else rec.get("node_budget", 64)
    ss_cfg = DecodeConfig(mode="ss", max_new_tokens=max_new, tree_topk=topk, prune_threshold=prune, node_budget=budget)
    ar_cfg = DecodeConfig(mode="ar", max_new_tokens=max_new)
    prompts = {c: [engine.encode(ex["prompt"], max_new) for ex in load_split("eval", c, n=n)] for c in categories}

    built = []
    for name in methods:
        if name == "ar":
            built.append(engine_method("ar", engine, ar_cfg))
        elif name == "hf-greedy":
            built.append(hf_method("hf-greedy", engine.model, max_new))
        elif name == "hf-pld":
            built.append(hf_method("hf-pld", engine.model, max_new, prompt_lookup_num_tokens=10))
        elif name == "pld":
            from ..drafters import PromptLookupDrafter

            built.append(engine_method("pld", engine, ss_cfg, lambda: PromptLookupDrafter()))
        elif name == "ss-lossless":
            extra = engine.streams.extra_parameter_count() if engine.streams else 0
            built.append(engine_method("ss-lossless", engine, ss_cfg, extra_params=extra))
        elif name == "ss-shared":
            if not shared:
                print("skipping ss-shared: no shared-mode streams")
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                shared_engine = Engine.load(base, shared, precision=precision, device=args.device)
            srec = recommended(shared)
            scfg = DecodeConfig(mode="ss", max_new_tokens=max_new, tree_topk=tuple(srec.get("topk", topk)),
                                prune_threshold=srec.get("prune_threshold", prune), node_budget=srec.get("node_budget", budget))
            built.append(engine_method("ar-shared", shared_engine, ar_cfg))
            lora = lora_parameter_count(shared)  # merged into the weights on load, so count the adapter file
            built.append(engine_method("ss-shared", shared_engine, scfg, reference="ar-shared",
                                       extra_params=shared_engine.streams.extra_parameter_count() + lora))
    print(f"bench: {len(categories)} categories × {n} prompts × ≤{max_new} tokens; methods: "
          f"{', '.join(m.name for m in built)}; ss tree {list(topk)}, prune {prune}, budget {budget}; "
          f"torch threads {torch.get_num_threads()}")
    rows = run_benchmark(prompts, built, baseline=args.baseline)
    table = markdown_table(rows, args.baseline)
    summary = summarize(rows)
    print(table)
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": [asdict(r) for r in rows], "summary": summary,
                       "settings": {"topk": list(topk), "prune_threshold": prune, "node_budget": budget,
                                    "n": n, "max_new_tokens": max_new, "precision": precision,
                                    "device": args.device, "threads": torch.get_num_threads()}}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    return 0

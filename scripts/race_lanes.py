"""Race every lane of the lab on the default model over its presets, as the lab races them, and record each lane's τ,
tokens/s, speedup over plain decoding and its check against plain decoding.

    .venv/bin/python scripts/race_lanes.py [--max-new 64] [--threads 1] [--out build/lab-lanes.json]

One race per preset (app/presets.py: one chat-corpus eval prompt per category), the lanes interleaved pass by pass
in a rotating order (app/race.py), no attention capture; the lab's default draft settings for the fastest draft. Per
lane: the median over prompts of its tokens/s ÷ plain decoding's in the same race, the mean τ, and in how many races
its tokens were plain decoding's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> int:
    import torch

    from app import limits
    from app.lanes import LABELS
    from app.models import EngineCache, available_specs, recommended_for
    from app.presets import presets
    from app.race import race, tau

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-new", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=os.path.join(ROOT, "build", "lab-lanes.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    specs = available_specs()
    name = next(iter(specs))
    spec = specs[name]
    engine, lock = EngineCache({name: spec}).get(name, spec.modes[0])
    rec = recommended_for(spec, spec.modes[0])
    cfg = limits.lab_decode_config(",".join(map(str, rec["topk"])), rec["prune_threshold"], rec["node_budget"],
                                   rec["lookup"], 0.0, 0, args.max_new)
    lanes = [k for k in LABELS if k != "plain"]
    rows = {k: {"speedups": [], "taus": [], "identical": 0} for k in LABELS}
    races = 0
    for label, prompt in presets().items():
        final = list(race(engine, prompt, cfg, lock, lanes=lanes))[-1]
        races += 1
        plain = final.ar.stats["tokens_per_s"]
        for key, side in final.lanes.items():
            rows[key]["speedups"].append(side.stats["tokens_per_s"] / plain)
            rows[key]["taus"].append(tau(side.stats))
            rows[key]["identical"] += bool(side.identical)
        print(label, {k: round(v.stats["tokens_per_s"] / plain, 2) for k, v in final.lanes.items()}, flush=True)
    out = {"command": f"python scripts/race_lanes.py --max-new {args.max_new} --threads {args.threads}",
           "host": f"{cpu_name()}, {os.cpu_count()} cores, {args.threads} thread(s)",
           "date": time.strftime("%Y-%m-%d"), "model": name, "precision": engine.precision, "races": races,
           "max_new_tokens": args.max_new, "equals": final.plain_equals,
           "lanes": {k: {"label": LABELS[k], "speedup_median": round(statistics.median(r["speedups"]), 3),
                         "tau_mean": round(statistics.fmean(r["taus"]), 3), "identical": f"{r['identical']}/{races}"}
                     for k, r in rows.items() if r["taus"]}}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["lanes"], indent=1))
    return 0


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())

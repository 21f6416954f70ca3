"""Benchmarks: speculative streaming against plain decoding and other methods, per task category.

Every method decodes the same prompts to the same length, greedy. Per prompt the methods run back to
back in a rotating order (so none always runs first on a warm cache), after a warm-up pass of each.
Speedup is the median over prompts of (baseline wall time / method wall time), measured in this
process; τ and call reduction follow SPECSTREAM.md §6.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .decode import DecodeConfig
from .drafters import PromptLookupDrafter


@dataclass
class Method:
    name: str
    run: Callable[[list[int]], tuple[list[int], float, int]]  # ids -> (tokens, wall_s, forward passes)
    reference: str = "ar"  # the method whose output this one must equal
    extra_params: int = 0


@dataclass
class Row:
    category: str
    method: str
    tau: float
    call_reduction: float
    speedup: float  # over the baseline method (median of per-prompt ratios)
    speedup_vs_ar: float
    identical: bool
    identical_count: int
    prompts: int
    tokens: int
    extra_params: int
    tokens_per_s: float
    per_prompt_speedups: list[float] = field(default_factory=list)


def engine_method(name: str, engine, cfg: DecodeConfig, drafter_factory=None, reference="ar", extra_params=0) -> Method:
    def run(ids):
        dec = engine.start(ids, cfg, drafter_factory() if drafter_factory else None)
        result = dec.run()
        return result.token_ids, result.stats["wall_s"], result.stats["forward_passes"]

    return Method(name, run, reference, extra_params)


def hf_method(name: str, model, max_new_tokens: int, **generate_kwargs) -> Method:
    """transformers' own generate (greedy, prompt lookup or assisted), timed around the call."""

    def run(ids):
        inp = torch.tensor([ids], device=model.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                 max_new_tokens=max_new_tokens, **generate_kwargs)
        wall = time.perf_counter() - t0
        tokens = out[0, len(ids):].tolist()
        return tokens, wall, 0  # transformers exposes no forward-pass count

    return Method(name, run, "ar")


def prompt_lookup_method(engine, cfg: DecodeConfig) -> Method:
    return engine_method("prompt-lookup (ours)", engine, cfg, lambda: PromptLookupDrafter())


def run_benchmark(prompts: dict[str, list[list[int]]], methods: list[Method], baseline: str = "ar",
                  progress: bool = True) -> list[Row]:
    """prompts: category -> token-id prompts. Returns one row per (category, method)."""
    from tqdm.auto import tqdm

    names = [m.name for m in methods]
    assert baseline in names and "ar" in names
    first = next(iter(prompts.values()))[0]
    for m in methods:  # warm-up: allocator, kernels, caches
        m.run(first)
    total = sum(len(v) for v in prompts.values()) * len(methods)
    bar = tqdm(total=total, disable=not progress, desc="bench", unit="run")
    rows = []
    turn = 0
    for category, items in prompts.items():
        results = {m.name: [] for m in methods}
        for ids in items:
            order = methods[turn % len(methods):] + methods[: turn % len(methods)]  # rotate who goes first
            turn += 1
            for m in order:
                results[m.name].append(m.run(ids))
                bar.update(1)
        for m in methods:
            rows.append(_row(category, m, results, baseline))
    bar.close()
    return rows


def _row(category, m: Method, results, baseline) -> Row:
    mine, base, ar = results[m.name], results[baseline], results["ar"]
    ref = results[m.reference]
    identical = [a[0] == r[0] for a, r in zip(mine, ref)]
    tokens = sum(len(r[0]) for r in mine)
    passes = sum(r[2] for r in mine)
    ar_passes = sum(r[2] for r in ar)
    ratios = [b[1] / max(1e-9, r[1]) for b, r in zip(base, mine)]
    ratios_ar = [b[1] / max(1e-9, r[1]) for b, r in zip(ar, mine)]
    wall = sum(r[1] for r in mine)
    return Row(category, m.name, tau=tokens / passes if passes else float("nan"),
               call_reduction=ar_passes / passes if passes else float("nan"),
               speedup=statistics.median(ratios), speedup_vs_ar=statistics.median(ratios_ar),
               identical=all(identical), identical_count=sum(identical), prompts=len(mine), tokens=tokens,
               extra_params=m.extra_params, tokens_per_s=tokens / wall if wall else 0.0,
               per_prompt_speedups=[round(x, 3) for x in ratios])


def summarize(rows: list[Row]) -> dict[str, dict]:
    """Per method: mean τ over categories, median speedup over categories, all identical?"""
    out = {}
    for name in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == name]
        taus = [r.tau for r in mine if r.tau == r.tau]
        out[name] = {"tau_mean": sum(taus) / len(taus) if taus else float("nan"),
                     "speedup_median": statistics.median(r.speedup for r in mine),
                     "speedup_vs_ar_median": statistics.median(r.speedup_vs_ar for r in mine),
                     "identical": all(r.identical for r in mine)}
    return out


def markdown_table(rows: list[Row], baseline: str) -> str:
    lines = [f"| category | method | speedup vs {baseline} | speedup vs ar | τ | call reduction | identical | extra params |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tau = f"{r.tau:.2f}" if r.tau == r.tau else "–"
        cr = f"{r.call_reduction:.2f}" if r.call_reduction == r.call_reduction else "–"
        lines.append(f"| {r.category} | {r.method} | {r.speedup:.2f}× | {r.speedup_vs_ar:.2f}× | {tau} | {cr} | "
                     f"{'yes' if r.identical else f'{r.identical_count}/{r.prompts}'} | {r.extra_params:,} |")
    return "\n".join(lines)

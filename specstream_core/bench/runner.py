"""Benchmarks: speculative streaming against plain decoding and other methods, per task category.

Every method decodes the same prompts to the same length, greedy. Per prompt the methods run back to
back in a rotating order (so none always runs first on a warm cache), after a warm-up pass of each.
Speedup is the median over prompts of (baseline wall time / method wall time), measured in this
process; τ and call reduction follow docs/METHOD.md §6. transformers' `generate` methods count the
target model's forward calls with a hook (a draft model's calls are not counted), so they get τ and
call reduction too. Rows carry the precision and, for ablations, the varied setting.
"""

from __future__ import annotations

import contextlib

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from specstream_core.decoding.config import DecodeConfig
from specstream_core.kernels.linears import rowinv


@dataclass
class Method:
    name: str
    run: Callable[[list[int]], tuple[list[int], float, int]]  # ids -> (tokens, wall_s, forward passes)
    reference: str = "ar"  # the method whose output this one must equal
    extra_params: int = 0
    ablation: str = ""  # the varied setting (gamma, topk, ns, prune) for ablation rows
    value: str = ""  # its value
    tree_nodes: int = 0  # most draft-tree nodes per pass (0: not a tree drafter)


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
    precision: str = "fp32"
    ablation: str = ""
    value: str = ""
    tree_nodes: int = 0
    speedup_per_tau: float = float("nan")  # how close the speedup comes to the bound τ
    wall_s: float = 0.0
    task_score: float = float("nan")  # mean task score of this method's answers (when a scorer is given)


def engine_method(name: str, engine, cfg: DecodeConfig, drafter_factory=None, reference="ar", extra_params=0,
                  **tags) -> Method:
    def run(ids):
        dec = engine.start(ids, cfg, drafter_factory() if drafter_factory else None)
        result = dec.run()
        return result.token_ids, result.stats["wall_s"], result.stats["forward_passes"]

    return Method(name, run, reference, extra_params, **tags)


def hf_method(name: str, model, max_new_tokens: int, extra_params: int = 0, reference: str = "ar",
              as_it_ships: bool = True, **generate_kwargs) -> Method:
    """transformers' own generate (greedy, prompt lookup or assisted), timed around the call; the
    target model's forward calls are counted with a hook (assistant models are separate modules). Its
    Linears run through torch (`rowinv.torch_linears`): the baseline is transformers as it ships.
    as_it_ships=False: they run as the model's modules are (int4 on the row-invariant kernel), a
    reference for our loop's output on the same Linears, not a peer."""

    def run(ids):
        inp = torch.tensor([ids], device=model.device)
        calls = [0]

        def count(module, args, kwargs):
            calls[0] += 1

        handle = model.register_forward_pre_hook(count, with_kwargs=True)
        try:
            t0 = time.perf_counter()
            with torch.inference_mode(), rowinv.torch_linears() if as_it_ships else contextlib.nullcontext():
                out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                     max_new_tokens=max_new_tokens, **generate_kwargs)
            if out.is_cuda:
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        finally:
            handle.remove()
        tokens = out[0, len(ids):].tolist()
        eos = model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) if eos is not None else set()
        for i, tok in enumerate(tokens):  # generate pads finished rows; our loops stop at EOS
            if tok in eos:
                tokens = tokens[: i + 1]
                break
        return tokens, wall, calls[0]

    return Method(name, run, reference, extra_params)


def run_benchmark(prompts: dict[str, list[list[int]]], methods: list[Method], baseline: str = "ar",
                  progress: bool = True, precision: str = "fp32", desc: str = "bench",
                  score: Callable[[str, int, list[int]], float] | None = None) -> list[Row]:
    """prompts: category -> token-id prompts. Returns one row per (category, method).

    score(category, prompt index, output tokens) -> task score in [0, 1] (optional, per method)."""
    from tqdm.auto import tqdm

    names = [m.name for m in methods]
    assert baseline in names and len(set(names)) == len(names)
    first = next(iter(prompts.values()))[0]
    total = (sum(len(v) for v in prompts.values()) + 1) * len(methods)
    bar = tqdm(total=total, disable=not progress, desc=desc, unit="run")
    for m in methods:  # warm-up: allocator, kernels, caches
        m.run(first)
        bar.update(1)
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
            row = _row(category, m, results, baseline, precision)
            if score is not None:
                row.task_score = statistics.fmean(score(category, i, r[0]) for i, r in enumerate(results[m.name]))
            rows.append(row)
    bar.close()
    return rows


def _row(category, m: Method, results, baseline, precision="fp32") -> Row:
    mine, base = results[m.name], results[baseline]
    ar = results.get("ar", base)  # without a plain loop among the methods (A/B runs), "vs ar" is vs the baseline
    ref = results[m.reference]
    identical = [a[0] == r[0] for a, r in zip(mine, ref)]
    tokens = sum(len(r[0]) for r in mine)
    passes = sum(r[2] for r in mine)
    ar_passes = sum(r[2] for r in ar)
    ratios = [b[1] / max(1e-9, r[1]) for b, r in zip(base, mine)]
    ratios_ar = [b[1] / max(1e-9, r[1]) for b, r in zip(ar, mine)]
    wall = sum(r[1] for r in mine)
    tau = tokens / passes if passes else float("nan")
    speedup = statistics.median(ratios)
    return Row(category, m.name, tau=tau,
               call_reduction=ar_passes / passes if passes else float("nan"),
               speedup=speedup, speedup_vs_ar=statistics.median(ratios_ar),
               identical=all(identical), identical_count=sum(identical), prompts=len(mine), tokens=tokens,
               extra_params=m.extra_params, tokens_per_s=tokens / wall if wall else 0.0,
               per_prompt_speedups=[round(x, 3) for x in ratios], precision=precision, ablation=m.ablation,
               value=m.value, tree_nodes=m.tree_nodes, speedup_per_tau=speedup / tau if passes else float("nan"),
               wall_s=round(wall, 4))


def summarize(rows: list[Row]) -> dict[str, dict]:
    """Per method (and precision, when several): mean τ over categories, median speedup over
    categories, all identical?"""
    out = {}
    several = len({r.precision for r in rows}) > 1
    for key in dict.fromkeys((r.method, r.precision) for r in rows):
        mine = [r for r in rows if (r.method, r.precision) == key]
        taus = [r.tau for r in mine if r.tau == r.tau]
        tau = sum(taus) / len(taus) if taus else float("nan")
        speedup = statistics.median(r.speedup for r in mine)
        out[f"{key[0]} [{key[1]}]" if several else key[0]] = {
            "method": key[0], "precision": key[1], "tau_mean": tau, "speedup_median": speedup,
            "speedup_vs_ar_median": statistics.median(r.speedup_vs_ar for r in mine),
            "speedup_per_tau": speedup / tau if taus else float("nan"),
            "identical": all(r.identical for r in mine), "extra_params": mine[0].extra_params,
            "task_score": statistics.fmean(r.task_score for r in mine)}
    return out


def _num(x: float, suffix: str = "") -> str:
    return f"{x:.2f}{suffix}" if x == x else "–"


def markdown_table(rows: list[Row], baseline: str) -> str:
    ablation = any(r.ablation for r in rows)
    lines = [f"| {'setting | ' if ablation else ''}category | method | precision | speedup vs {baseline} | speedup vs ar | "
             "τ | call reduction | speedup ÷ τ | identical | task score | extra params |",
             f"|{'---|' if ablation else ''}---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        setting = f"{r.ablation}={r.value} | " if ablation else ""
        lines.append(f"| {setting}{r.category} | {r.method} | {r.precision} | {r.speedup:.2f}× | {r.speedup_vs_ar:.2f}× | "
                     f"{_num(r.tau)} | {_num(r.call_reduction)} | {_num(r.speedup_per_tau)} | "
                     f"{'yes' if r.identical else f'{r.identical_count}/{r.prompts}'} | {_num(r.task_score)} | "
                     f"{r.extra_params:,} |")
    return "\n".join(lines)


def summary_table(summary: dict, baseline: str) -> str:
    lines = [f"| method | precision | mean τ | median speedup vs {baseline} | speedup ÷ τ | identical everywhere | "
             "mean task score | extra params |",
             "|---|---|---|---|---|---|---|---|"]
    for s in summary.values():
        lines.append(f"| {s['method']} | {s['precision']} | {_num(s['tau_mean'])} | {s['speedup_median']:.2f}× | "
                     f"{_num(s['speedup_per_tau'])} | {'yes' if s['identical'] else 'no'} | "
                     f"{_num(s.get('task_score', float('nan')))} | {s['extra_params']:,} |")
    return "\n".join(lines)

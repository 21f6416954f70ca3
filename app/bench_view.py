"""The lab's Benchmarks panel: the latest `bench --json` results as a table and figures (pure: JSON in,
Markdown / Plotly out; no model involved).

The results file is SPECSTREAM_BENCH_JSON when set, else docs/bench/peers-int4-a8.json in the repository
(every method at the default precision, 10 eval prompts per category, with the n-gram store; docs/BENCHMARKS.md
shows it too); the
pass-cost file (`pass-cost --json`) is SPECSTREAM_PASS_COST_JSON, else docs/bench/pass-cost.json; the draft τ
file (`draft-tau --json`) SPECSTREAM_DRAFT_TAU_JSON, else docs/bench/draft-tau.json.
"""

from __future__ import annotations

import os

from specstream_core.model import defaults
from specstream_core.bench.plots import (ablation_figure, ablation_params, baseline, bound_figure, load_results,
                                         method_summary, precisions, speedup_figure, tau_figure)
from specstream_core.errors import SpecstreamError

DEFAULT_PATH = os.path.join(defaults.ROOT, "docs", "bench", "peers-int4-a8.json")
PASS_COST_PATH = os.path.join(defaults.ROOT, "docs", "bench", "pass-cost.json")
PASS_COST_COMMAND = ("python -m specstream_core pass-cost --precisions int4-a8,bf16,fp32 --stream-weights same,int4-a8 "
                     "--threads 1 --repeats 20 "
                     "--json docs/bench/pass-cost.json --markdown docs/bench/pass-cost.md --plots docs/bench/")
DRAFT_TAU_PATH = os.path.join(defaults.ROOT, "docs", "bench", "draft-tau.json")
DRAFT_TAU_COMMAND = ("python -m specstream_core draft-tau --dtype fp32 --n 20 --check 3 --drafts streams,streams/k1111,"
                     "b3l2n,default,b5l4n,b6l5n,b8l7n,b12l11n,b16l15n,b6l5n/k2,b8l6n/k21 --json docs/bench/draft-tau.json "
                     "--markdown docs/bench/draft-tau.md")
COMMAND = ("python -m specstream_core bench --methods hf-greedy,hf-pld,hf-assisted,pld,medusa,ss-lossless "
           "--baseline hf-greedy --n 10 --max-new-tokens 64 --threads 1 --ablations none --precisions int4-a8 "
           "--json docs/bench/peers-int4-a8.json --markdown docs/bench/peers-int4-a8.md "
           "--plots docs/bench/peers-int4-a8/")
NONE_YET = ("No benchmark results yet. Run\n\n```bash\n" + COMMAND + "\n```\n\n"
            "and reload: the lab shows the latest results file ({path}).")


def results_path() -> str:
    return os.environ.get("SPECSTREAM_BENCH_JSON", "") or DEFAULT_PATH


def latest(path: str | None = None) -> tuple[dict | None, str]:
    """(results or None, a Markdown message describing them or why there are none)."""
    path = path or results_path()
    try:
        data = load_results(path)
    except SpecstreamError as exc:
        return None, f"**Cannot show benchmark results:** {exc}"
    if data is None:
        return None, NONE_YET.format(path=path)
    return data, summary_markdown(data)


def _fmt(x, suffix=""):
    return f"{x:.2f}{suffix}" if isinstance(x, (int, float)) and x == x else "–"


def summary_markdown(data: dict) -> str:
    s = data.get("settings", {})
    head = (f"**Latest benchmark** ({s.get('date', '?')}, {s.get('device_name') or s.get('device', '?')}, "
            f"{s.get('threads', '?')} threads): {len(s.get('categories', []))} categories × {s.get('n', '?')} prompts × "
            f"≤ {s.get('max_new_tokens', '?')} tokens, greedy; speedup = median over prompts of "
            f"{baseline(data)} time ÷ method time.\n\n")
    extra = {(r["method"], r.get("precision", "fp32")): r for r in data["rows"]}
    lines = [f"| method | precision | median speedup vs {baseline(data)} | mean τ | speedup ÷ τ | identical to greedy | extra params |",
             "|---|---|---|---|---|---|---|"]
    for m in method_summary(data):
        rows = [r for r in data["rows"] if r["method"] == m["method"] and r.get("precision", "fp32") == m["precision"]]
        same = sum(r["identical_count"] for r in rows), sum(r["prompts"] for r in rows)
        lines.append(f"| {m['method']} | {m['precision']} | {_fmt(m['speedup'], '×')} | {_fmt(m['tau'])} | "
                     f"{_fmt(m['bound'])} | {same[0]}/{same[1]} | "
                     f"{extra[(m['method'], m['precision'])].get('extra_params', 0):,} |")
    return head + "\n".join(lines)


def figures(data: dict | None, precision: str | None = None) -> list:
    """[speedup, τ, speedup÷τ, ablations…] figures; empty when there are no results."""
    if data is None:
        return []
    precision = precision if precision in precisions(data) else precisions(data)[0]
    out = [speedup_figure(data, precision), tau_figure(data, precision), bound_figure(data)]
    out += [ablation_figure(data, p) for p in ablation_params(data)]
    return out


def _read(loader, path: str, what: str, name: str, command: str) -> tuple[object | None, str | None]:
    """(a results file's contents, None), or (None, the Markdown line saying why there are none to show)."""
    try:
        data = loader(path)
    except SpecstreamError as exc:
        return None, f"**Cannot show {what}:** {exc}"
    return (None, f"No {name} measurement yet: `{command}`") if data is None else (data, None)


def pass_cost(path: str | None = None) -> tuple[object | None, str]:
    """(figure or None, Markdown): what one pass costs here, and the τ a method needs (speedup ≈ τ ÷ cost)."""
    from specstream_core.bench.plots import pass_cost_figure
    from specstream_core.bench.pass_cost import load_runs

    runs, why = _read(load_runs, path or os.environ.get("SPECSTREAM_PASS_COST_JSON", "") or PASS_COST_PATH,
                      "pass costs", "pass-cost", PASS_COST_COMMAND)
    if why:
        return None, why
    lines = ["**Why speedup is below τ.** Every speculative pass carries more rows than a plain one and costs "
             "more; speedup ≈ τ ÷ (speculative pass ÷ plain pass). Measured by "
             f"`{PASS_COST_COMMAND}`:", "",
             "| run | Speculative Streaming pass (γ 4) | τ needed for 2× | verification-only pass (5 rows) |",
             "|---|---|---|---|"]
    for run in runs:
        ss = max((p for p in run["passes"] if p.get("kind") == "ss"), key=lambda p: p.get("nodes", 0), default=None)
        v5 = next((p for p in run["passes"] if p["label"] == "verify 5"), None)
        lines.append(f"| {run['label']} | {_fmt(ss['ratio'], '×') if ss else '–'} | "
                     f"{_fmt(2 * ss['ratio']) if ss else '–'} | {_fmt(v5['ratio'], '×') if v5 else '–'} |")
    return pass_cost_figure(runs), "\n".join(lines)


def draft_tau(path: str | None = None) -> tuple[object | None, str]:
    """(figure or None, Markdown): the τ each draft reaches, replayed over decoded answers (`draft-tau --json`)."""
    from specstream_core.bench.draft_replay import load_results
    from specstream_core.bench.plots import draft_tau_figure

    data, why = _read(load_results, path or os.environ.get("SPECSTREAM_DRAFT_TAU_JSON", "") or DRAFT_TAU_PATH,
                      "draft τ", "draft τ", DRAFT_TAU_COMMAND)
    if why:
        return None, why
    best = max(data["drafts"], key=lambda d: data["mean_tau"][d])
    top1 = data.get("stream_top1") or {}
    first = top1.get("1", top1.get(1))
    text = ("**How far drafting can take τ.** Each draft replayed over the same decoded answers (the tokens "
            f"decoding with it would give, so no timing): the most τ here is {_fmt(data['mean_tau'][best])} with "
            f"`{best}` at {_fmt(data['nodes_per_step'][best])} nodes a step"
            + (f"; the first stream guesses right {100 * first:.0f} % of the time" if isinstance(first, (int, float)) else "")
            + f". Measured by `{DRAFT_TAU_COMMAND}`.")
    return draft_tau_figure(data), text

"""Markdown tables of the benchmark page, one function per kind of result file (`report_sources.KINDS`).

Each takes a `Source` and returns the lines of its table(s); every figure comes from the file's JSON."""

from __future__ import annotations

import os
import statistics

from specstream_core.bench.report_generation import generation_table
from specstream_core.bench.report_sources import Source
from specstream_core.bench.speed_methods import METHODS

PAGE = "docs/BENCHMARKS.md"  # where the page's links start from

# what a `speed` row's first word is, in words
WHO = {"hf-greedy": "transformers greedy", "ar": "our plain loop", "ss": "**speculative streaming**",
       "llama.cpp": "llama.cpp (llama-cpp-python)", "llama-bench": "llama.cpp (llama-bench)"}


def _x(v) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _f(v, digits: int = 2) -> str:
    return "–" if v is None or v != v else f"{v:.{digits}f}"


def provenance(src: Source) -> list[str]:
    """The command that made a file and its host, as the page shows them above the file's table."""
    link = os.path.relpath(src.path, os.path.dirname(PAGE)).replace(os.sep, "/")
    return [f"From [`{src.path}`]({link}), on {src.host or 'a host the file does not name'}:",
            "```bash", src.command or "# the file does not record its command", "```", ""]


def speed_label(method: str) -> str:
    """'hf-greedy int4-a8 kernel' -> 'transformers greedy on our kernel'; 'ss int4' -> speculative streaming."""
    who = WHO.get(method.split()[0], method.split()[0])
    return who + (" on our kernel" if method.endswith(" kernel") else "")


def method_gain(rows: list[dict], row: dict) -> float | None:
    """Median over prompts of a speculative row's speed over our plain loop's at the same precision and threads."""
    if not row["method"].startswith("ss"):
        return 1.0 if row["method"].startswith("ar") else None
    plain = next((r for r in rows if r["method"] == "ar" + row["method"][2:]
                  and r.get("threads") == row.get("threads")), None)
    if plain is None:
        return None
    return statistics.median(a / b for a, b in zip(row["per_prompt_speedups"], plain["per_prompt_speedups"]))


def same_tokens(row: dict) -> str:
    ref = METHODS.get(row["method"], ("", row["method"]))[1]
    if ref == row["method"]:
        return "itself (the baseline)" if row["method"] == "hf-greedy" else "itself"
    return (f"{speed_label(ref).strip('*')}, {METHODS[ref][0]}, {row['identical_count']}/{row['prompts']}"
            if ref in METHODS else f"{ref}, {row['identical_count']}/{row['prompts']}")


def speed_table(src: Source, threads: int | None = None) -> list[str]:
    """Peers at each precision: tokens/s, × transformers fp32 greedy (all gains together), × our plain loop at
    the same precision (the method's gain alone), τ and whose tokens the output equals."""
    rows = [r for r in src.data["rows"] if threads is None or r.get("threads") == threads]
    out = ["| method | precision | threads | tokens/s | × transformers fp32 greedy | "
           "× our plain loop, same precision | τ | same tokens as (prompts) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {speed_label(r['method'])} | {r['precision']} | {r.get('threads', '–')} | "
                   f"{r['tokens_per_s']:.1f} | {_x(r['speedup'])} | {_x(method_gain(rows, r))} | {_f(r['tau'])} | "
                   f"{same_tokens(r)} |")
    return out


def speed_section(src: Source) -> list[str]:
    d = src.data
    prompts = d["n_per_category"] * 8
    return [f"### {src.title}", "", f"{prompts} eval prompts (the chat corpus, {d['n_per_category']} per category), "
            f"≤ {d['max_new_tokens']} new tokens, greedy, the methods alternating per prompt; tokens/s over all "
            "prompts, × columns medians of per-prompt ratios.", ""] + provenance(src) + speed_table(src) + \
        generation_table(src, speed_label) + [""]


def _category_cells(rows: list[dict], methods: list[str], category: str) -> list[str]:
    cells = []
    for m in methods:
        r = next((r for r in rows if r["method"] == m and r["category"] == category), None)
        cells.append("–" if r is None else f"{r['speedup']:.2f}× ({_f(r['tau'])})" +
                     ("" if r["identical"] else f" ≠{r['prompts'] - r['identical_count']}"))
    return cells


def _gain(rows: list[dict], category: str | None, ss: str) -> float | None:
    """Median over prompts of speculative streaming's speed over our plain loop's (the method's gain)."""
    pick = [r for r in rows if category is None or r["category"] == category]
    a = [x for r in pick if r["method"] == ss for x in r["per_prompt_speedups"]]
    b = [x for r in pick if r["method"] == "ar" for x in r["per_prompt_speedups"]]
    return statistics.median(x / y for x, y in zip(a, b)) if a and len(a) == len(b) else None


def bench_section(src: Source) -> list[str]:
    """Per category: each method's median speed over the baseline (τ), speculative streaming over our plain loop
    where both ran (the method's gain alone), a median row, and the prompts whose output differs."""
    s, rows = src.data["settings"], src.data["rows"]
    if src.data.get("ablations"):
        return []  # a run for its ablations: `ablation_section` shows it
    found = list(dict.fromkeys(r["method"] for r in rows))
    methods = [m for m in (s["baseline"], "ar") if m in found] + [m for m in found if m not in (s["baseline"], "ar")]
    ss = next((m for m in methods if m.startswith("ss")), None) if "ar" in methods else None
    precision = ", ".join(s.get("precisions", []))
    out = [f"### {src.title}", "", f"{len(s['categories'])} categories × {s['n']} eval prompts, ≤ "
           f"{s['max_new_tokens']} new tokens, greedy, {s.get('threads', 1)} thread(s), precision {precision}; "
           f"each cell: median over the category's prompts of the method's speed over {s['baseline']} "
           f"(transformers greedy in fp32), and τ; ≠N: N prompts whose output differs from our plain loop's (`ar`) "
           "at the table's precision" + (f"; the last column: {ss} over `ar`, prompt by prompt, the method's gain "
                                         "alone." if ss else "."), ""] + provenance(src)
    head = methods + ([f"{ss} ÷ ar"] if ss else [])
    out += ["| category | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for c in s["categories"]:
        cells = _category_cells(rows, methods, c) + ([_x(_gain(rows, c, ss))] if ss else [])
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    medians = []
    for m in methods:
        vals = [r["speedup"] for r in rows if r["method"] == m]
        medians.append(f"**{statistics.median(vals):.2f}×**" if vals else "–")
    out.append("| median | " + " | ".join(medians + ([f"**{_x(_gain(rows, None, ss))}**"] if ss else [])) + " |")
    return out + ["", _not_ahead(rows, s["categories"], methods), ""]


def _not_ahead(rows: list[dict], categories: list[str], methods: list[str]) -> str:
    """Where speculative streaming is not the fastest method of a category, or not ahead of our plain loop."""
    ss = next((m for m in methods if m.startswith("ss")), None)
    if ss is None:
        return ""
    behind = []
    for c in categories:
        speed = {r["method"]: r["speedup"] for r in rows if r["category"] == c}
        gain = _gain(rows, c, ss) if "ar" in speed else None
        faster = [f"{m} {v:.2f}×" for m, v in speed.items() if m != ss and ss in speed and v >= speed[ss]]
        if faster or (gain is not None and gain < 1.005):
            what = ", ".join(faster) if faster else f"level with `ar` ({_x(gain)})"
            behind.append(f"{c} ({ss} {speed.get(ss, 0):.2f}×; {what})")
    return f"Where {ss} is not ahead: " + ("; ".join(behind) if behind else "nowhere in this run") + "."


def ablation_section(src: Source) -> list[str]:
    """A `bench` file's ablation rows: one line per value, medians over its categories."""
    s, rows = src.data["settings"], src.data.get("ablations") or []
    if not rows:
        return []
    out = [f"### {src.title}", "", f"{', '.join(s.get('ablation_categories', []))} × {s.get('ablation_n')} eval "
           f"prompts, precision {', '.join(s.get('precisions', []))}; median over categories of the speed over "
           f"{s['baseline']} (transformers greedy in fp32), mean τ, and the tree's nodes.", ""] + provenance(src)
    out += ["| ablation | value | tree nodes | mean τ | speed vs baseline | speed ÷ τ | same tokens (prompts) |",
            "|---|---|---|---|---|---|---|"]
    keys = list(dict.fromkeys((r["ablation"], str(r["value"])) for r in rows))
    for ablation, value in keys:
        pts = [r for r in rows if r["ablation"] == ablation and str(r["value"]) == value]
        speed = statistics.median(r["speedup"] for r in pts)
        tau = statistics.fmean(r["tau"] for r in pts)
        same = f"{sum(r['identical_count'] for r in pts)}/{sum(r['prompts'] for r in pts)}"
        out.append(f"| {ablation} | {value} | {pts[0]['tree_nodes']} | {_f(tau)} | {speed:.2f}× | "
                   f"{_x(speed / tau if tau else None)} | {same} |")
    return out + [""]


def draft_tau_section(src: Source) -> list[str]:
    """τ each draft reaches, replayed over the decoded answers (no timing)."""
    d = src.data
    cats = list(next(iter(d["tau"].values())).keys())
    out = [f"### {src.title}", "", f"{d['prompts']} eval prompts, ≤ {d['max_new_tokens']} new tokens, "
           f"{d['precision']}: the τ each draft reaches over the same decoded answers, and the nodes a step's "
           "draft holds. `bNlMn`: one stream token plus up to M tokens copied from the context or the n-gram store "
           "within N nodes; `/kA,B`: the streams' tree widths.", ""] + provenance(src)
    out += ["| draft | nodes a step | mean τ | " + " | ".join(cats) + " |", "|---" * (len(cats) + 3) + "|"]
    for name in d["drafts"]:
        out.append(f"| {name} | {_f(d['nodes_per_step'][name], 1)} | {_f(d['mean_tau'][name])} | " +
                   " | ".join(_f(d["tau"][name][c]) for c in cats) + " |")
    top1 = ", ".join(f"stream {k}: {v:.0%}" for k, v in d.get("stream_top1", {}).items())
    return out + (["", f"How often each stream's first choice is the next token: {top1}."] if top1 else []) + [""]


def pass_cost_section(src: Source) -> list[str]:
    """One column per run: a plain pass's time beside the roofline's, then each pass as × a plain pass (the τ it
    needs to break even with plain decoding) and as × the roofline's time for that same pass."""
    runs = src.data["runs"]
    s0 = runs[0].get("settings", {})
    m = s0.get("machine") or {}
    roofs = ", ".join(f"{label} {m[key]:.1f}" for key, label in (
        ("bandwidth_gbs", "memory GB/s"), ("fma_gflops", "fp32 FMA GFLOP/s"), ("int8_gops", "int8 GOP/s")) if key in m)
    out = [f"### {src.title}", "", f"{s0.get('threads')} thread(s), {s0.get('context')}-token prefix, median of "
           f"{s0.get('repeats')} passes" + (f"; the roofs measured on this host: {roofs}" if roofs else "") + ". "
           "Each cell: the pass's time × a plain pass's (the τ it needs to break even), and × the roofline's time "
           "for the same pass (what the weights' and cache's bytes and the multiply-adds need at those roofs).",
           ""] + provenance(src)
    out += ["| pass | nodes | " + " | ".join(r.get("label", "?") for r in runs) + " |", "|---" * (len(runs) + 2) + "|"]
    labels = list(dict.fromkeys(p["label"] for r in runs for p in r.get("passes", [])
                                if not _fresh_random(r) or p.get("kind") in ("plain", "verify")))
    if any(_fresh_random(r) for r in runs):
        out[2] += (" A random model at a real shape has fresh streams, so only its plain and verification passes are "
                   "shown: what the kernel does at that shape (τ needs trained streams).")
    for label in labels:
        cells, nodes = [], "–"
        for r in runs:
            p = next((p for p in r.get("passes", []) if p["label"] == label), None)
            if p is None:
                cells.append("–")
                continue
            nodes = p.get("nodes", nodes)
            roof = p.get("roofline_ms")
            over = f", {p['median_ms'] / roof:.2f}× roofline" if roof else ""
            cells.append(f"{p['median_ms']:.2f} ms{over}" if p.get("kind") == "plain" else f"{_x(p.get('ratio'))}{over}")
        out.append(f"| {label} | {nodes} | " + " | ".join(cells) + " |")
    return out + [""]


def _fresh_random(run: dict) -> bool:
    """A run on a random model built at a real shape (`pass-cost --random-shape`)."""
    return str(run.get("settings", {}).get("model", "")).startswith("random ")


def batch_section(src: Source) -> list[str]:
    """Samples/s per method and batch size, × the sequential plain loop, and how many outputs equal it."""
    meta, rows = src.data.get("meta", {}), src.data["throughput"]
    sizes = sorted({r["batch_size"] for r in rows})
    out = [f"### {src.title}", "", f"Model `{meta.get('model')}` with `{meta.get('streams')}`, {meta.get('prompts')} "
           f"prompts × ≤ {meta.get('max_new_tokens')} new tokens, {meta.get('threads')} thread(s), median of "
           f"{meta.get('repeats')}; each cell: samples/s (× `ar-seq`, our plain loop one prompt at a time); "
           "≠N: N outputs that differ from `ar-seq`'s.", ""] + provenance(src)
    out += ["| method | " + " | ".join(f"batch {b}" for b in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for m in dict.fromkeys(r["method"] for r in rows):
        cells = []
        for b in sizes:
            r = next((r for r in rows if r["method"] == m and r["batch_size"] == b), None)
            cells.append("–" if r is None else f"{r['samples_per_s']:.2f} ({r['speedup_vs_ar_seq']:.2f}×)" +
                         ("" if r["identical"] == r["samples"] else f" ≠{r['samples'] - r['identical']}"))
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out + [""]


def footprint_section(src: Source) -> list[str]:
    """Per precision, each in a fresh process: imports, load, a short decode, peak resident memory."""
    rows = src.data if isinstance(src.data, list) else src.data["rows"]
    out = [f"### {src.title}", "", "Each row its own process: import time, load time (to a ready engine, started as "
           "`generate` starts it), a short decode, and the process's peak resident memory. The cached start leaves "
           "the engine's image; the next starts from it, without transformers' modeling modules.", ""] + provenance(src)
    out += ["| precision (asked) | imports s | load s | decode s (new tokens) | peak RSS MB | wall s |",
            "|---|---|---|---|---|---|"]
    for r in rows:
        name = r.get("precision") or r.get("asked", "?")
        asked = f"{name} ({r['asked']})" if r.get("asked") and r.get("asked") != name else name
        asked += {"first": ", first start (packs, fills the cache)", "cached": ", cached start",
                  "image": ", from its image (no modeling import)"}.get(r.get("start"), "")
        if "error" in r:
            out.append(f"| {asked} | not measured: {r['error']} | | | | |")
            continue
        answer = (f"{_f(r.get('decode_s'))} ({r.get('new_tokens', '–')})" if "decode_s" in r else
                  f"{_f(r.get('tokens_per_s'), 1)} tokens/s" if "tokens_per_s" in r else "–")
        out.append(f"| {asked} | {_f(r.get('imports_s'))} | {_f(r.get('load_s'))} | {answer} | "
                   f"{_f(r.get('peak_rss_mb'), 1)} | {_f(r.get('wall_s'))} |")
    return out + [""]


def train_curve_section(src: Source) -> list[str]:
    """Training runs' τ estimate against training minutes (`train-curve`): each run's settings, where it started,
    where it ended and its best, a sentence a run, and the figure where one lies beside the file."""
    out = [f"### {src.title}"]  # (a list may follow a heading directly)
    for c in src.data["curves"]:
        pts, t = c["points"], c["training"]
        first, last = pts[0], pts[-1]
        best = max(pts, key=lambda p: p["tau_estimate"])
        acc = [_f(p["stream_top1"][0] if p["stream_top1"] else None, 3) for p in (first, last)]
        tree = f" (tree {','.join(map(str, last['tree']))})" if last.get("tree") else ""
        out += [f"- **{c['label']}** (γ {t.get('gamma', '?')}, {t.get('n_stream_layers', '?')} stream layers, adapter "
                f"rank {t.get('adapter_rank', '?')}, draft vocabulary {t.get('draft_vocab_size') or 'whole'}, batch "
                f"{t.get('batch_size', '?')} × {t.get('seq_len', '?')}, lr {t.get('lr', '?')}"
                + (f", from `{t['init_from']}`" if t.get("init_from") else "") +
                f"): τ estimate{tree} {first['tau_estimate']:.3f} at step {first['step']} → {last['tau_estimate']:.3f} at "
                f"step {last['step']} after {last['minutes'] - first['minutes']:.0f} training minutes (best "
                f"{best['tau_estimate']:.3f}, step {best['step']}); stream 1 top-1 {acc[0]} → {acc[1]}, on "
                f"{last.get('rows') or 'the'} held-out answers."]
    out += [""] + provenance(src)
    if src.figure:
        out += [f"![{src.title}]({os.path.relpath(src.figure, os.path.dirname(PAGE)).replace(os.sep, '/')})", ""]
    return out


def llama_bench_section(src: Source) -> list[str]:
    """llama.cpp's own benchmark (`llama-bench -o json`): tokens/s per test."""
    out = [f"### {src.title}", ""] + provenance(src)
    out += ["| model file | threads | prompt tokens | generated tokens | tokens/s |", "|---|---|---|---|---|"]
    for r in src.data:
        out.append(f"| {str(r.get('model_filename', '')).split('/')[-1]} | {r.get('n_threads', '–')} | "
                   f"{r.get('n_prompt', '–')} | {r.get('n_gen', '–')} | {_f(r['avg_ts'], 1)} |")
    return out + [""]

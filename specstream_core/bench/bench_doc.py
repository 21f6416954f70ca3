"""`bench --doc FILE`: the generated part of a Markdown page of your own (between its markers): settings, tables,
figures and the command that made them, from one `bench` run. (The project's own docs/BENCHMARKS.md is made by
`python -m specstream_core report` from every result file in docs/bench/.)"""

from __future__ import annotations

import os

from specstream_core.bench.plots import ablation_params, ablation_series, method_summary, precisions
from specstream_core.bench.runner import _num
from specstream_core.bench.names import DOC_BEGIN, DOC_END  # noqa: F401 - re-exported



def doc_section(data: dict, command: str, plots_dir: str | None, doc_dir: str) -> str:
    """The generated part of the page: settings, tables, figures (with the command), and where
    speculative streaming (lossless) is not ahead."""
    # long: the document section top to bottom (settings, tables, figures, caveats), as it reads
    s = data["settings"]
    base = s["baseline"]
    out = [f"Measured {s['date']} on {s['device_name']} ({s['device']}, {s['threads']} torch threads), "
           f"{len(s['categories'])} categories × {s['n']} eval prompts × ≤ {s['max_new_tokens']} new tokens, greedy; "
           f"ablations on {', '.join(s['ablation_categories'])} × {s['ablation_n']} prompts ({s['precisions'][0]}). The run took "
           f"{s['wall_s'] / 60:.1f} min. Every figure and table below comes from this one command:",
           "", "```bash", command, "```", "",
           f"Speedup: median over prompts of {base} wall time ÷ method wall time, measured in the same process with "
           "the methods alternating per prompt after a warm-up. τ: tokens per forward pass of the target model "
           "(transformers' methods: counted with a hook; the draft model's own passes are not counted). "
           "speedup ÷ τ near 1 means a speculative pass costs what a plain pass costs.", "",
           "### Summary (median over categories)", ""]
    out.append(f"| method | precision | speedup vs {base} | mean τ | speedup ÷ τ | identical to greedy | extra params |")
    out.append("|---|---|---|---|---|---|---|")
    for m in method_summary(data):
        rows = [r for r in data["rows"] if r["method"] == m["method"] and r["precision"] == m["precision"]]
        same = f"{sum(r['identical_count'] for r in rows)}/{sum(r['prompts'] for r in rows)}"
        out.append(f"| {m['method']} | {m['precision']} | {m['speedup']:.2f}× | {_num(m['tau'] or float('nan'))} | "
                   f"{_num(m['bound'] or float('nan'))} | {same} | {rows[0]['extra_params']:,} |")
    for p in precisions(data):
        names = list(dict.fromkeys(r["method"] for r in data["rows"] if r["precision"] == p))
        out += ["", f"### Per category, {p}: speedup vs {base} (τ)", "",
                "| category | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for c in s["categories"]:
            cells = []
            for n in names:
                r = next((r for r in data["rows"] if r["precision"] == p and r["method"] == n and r["category"] == c), None)
                cells.append("–" if r is None else f"{r['speedup']:.2f}× ({_num(r['tau'])})" +
                             ("" if r["identical"] else f" ≠{r['prompts'] - r['identical_count']}"))
            out.append(f"| {c} | " + " | ".join(cells) + " |")
    out += ["", "### Where speculative streaming is not ahead", "",
            "Categories where a method other than speculative streaming is faster (median speedups above):", ""]
    behind = []
    for mode in ("ss-lossless", "ss-shared"):
        for p in precisions(data):
            for c in s["categories"]:
                rows = {r["method"]: r for r in data["rows"] if r["precision"] == p and r["category"] == c}
                ss = rows.get(mode)
                if ss is None:
                    continue
                better = sorted(((r["speedup"], n) for n, r in rows.items()
                                 if not n.startswith(("ss-", "ar-shared")) and r["speedup"] > ss["speedup"]), reverse=True)
                if better:
                    behind.append(f"- {mode}, {c} ({p}): {ss['speedup']:.2f}× (τ {_num(ss['tau'])}) behind " +
                                  ", ".join(f"{n} {v:.2f}× (τ {_num(rows[n]['tau'])})" for v, n in better))
    out += behind or ["- nowhere in this run."]
    if data.get("ablations"):
        out += ["", f"### Ablations ({s['precisions'][0]}, lossless streams)", "",
                f"| ablation | value | tree nodes | mean τ | median speedup vs {base} | speedup ÷ τ |", "|---|---|---|---|---|---|"]
        for param in ablation_params(data):
            for pt in ablation_series(data, param):
                out.append(f"| {param} | {pt['value']} | {pt['tree_nodes']} | {_num(pt['tau'] or float('nan'))} | "
                           f"{pt['speedup']:.2f}× | {_num(pt['bound'] or float('nan'))} |")
        out += ["", "γ here is the depth of the draft built from the first g streams of the γ = 4 trained streams "
                "(the streams were not retrained per γ)."]
    if plots_dir:
        rel = os.path.relpath(os.path.abspath(plots_dir), os.path.abspath(doc_dir))
        out += ["", "### Figures", "", f"All made by the command above (`--plots {plots_dir}`); interactive versions: "
                "the `.html` files beside them, and the lab's Benchmarks panel.", ""]
        names = [f"speedup-{p}" for p in precisions(data)] + [f"tau-{p}" for p in precisions(data)] + ["bound"]
        names += [f"ablation-{a}" for a in ablation_params(data)]
        for n in names:
            out += [f"![{n}]({rel}/{n}.svg)", ""]
    return "\n".join(out).rstrip() + "\n"


def update_doc(path: str, data: dict, command: str, plots_dir: str | None) -> None:
    text = open(path).read() if os.path.isfile(path) else f"# Benchmarks\n\n{DOC_BEGIN}\n{DOC_END}\n"
    if DOC_BEGIN not in text or DOC_END not in text:
        text = text.rstrip() + f"\n\n{DOC_BEGIN}\n{DOC_END}\n"
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    section = doc_section(data, command, plots_dir, os.path.dirname(os.path.abspath(path)))
    with open(path, "w") as f:
        f.write(f"{head}{DOC_BEGIN}\n{section}{DOC_END}{tail}")

"""Benchmark figures from the JSON that `bench --json` writes: Plotly figures (the lab, HTML files)
and dependency-free SVG files (`bench --plots DIR`; no kaleido needed).

    data = load_results("docs/bench/latest.json")
    speedup_figure(data, "fp32"); tau_figure(data, "fp32"); bound_figure(data); ablation_figure(data, "gamma")
    write_plots(data, "docs/bench/")   # speedup-fp32.svg/.html, tau-fp32..., bound..., ablation-<param>...
"""

from __future__ import annotations

import html
import os
import statistics

from specstream_core.bench.pass_cost import figure_series
from specstream_core.bench.results import read_json
from specstream_core.errors import SpecstreamError

PALETTE = ["#7f7f7f", "#bcbd22", "#17becf", "#9467bd", "#8c564b", "#e377c2", "#1f77b4", "#aec7e8", "#d62728",
           "#2ca02c", "#ff7f0e"]
ABLATION_TITLES = {"gamma": "draft depth γ (first g streams)", "topk": "per-depth top-k (tree size)",
                   "ns": "Ns (stream sets)", "prune": "pruning threshold",
                   "lookup": "prompt-lookup tokens on the tree (node budget)"}


def load_results(path: str) -> dict | None:
    """The benchmark JSON, or None when there is none yet; SpecstreamError when it is unreadable."""
    data = read_json(path, "benchmark results")
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise SpecstreamError(f"{path} is not a benchmark result (no 'rows')")
    return data


def precisions(data: dict) -> list[str]:
    return list(dict.fromkeys(r.get("precision", "fp32") for r in data["rows"]))


def methods(data: dict, precision: str) -> list[str]:
    return list(dict.fromkeys(r["method"] for r in data["rows"] if r.get("precision", "fp32") == precision))


def categories(data: dict) -> list[str]:
    return list(dict.fromkeys(r["category"] for r in data["rows"]))


def _value(data, precision, method, category, key):
    for r in data["rows"]:
        if r.get("precision", "fp32") == precision and r["method"] == method and r["category"] == category:
            v = r.get(key)
            return v if isinstance(v, (int, float)) and v == v else None
    return None


def baseline(data: dict) -> str:
    return data.get("settings", {}).get("baseline", "hf-greedy")


def per_category(data: dict, precision: str, key: str) -> tuple[list[str], dict[str, list]]:
    cats = categories(data)
    return cats, {m: [_value(data, precision, m, c, key) for c in cats] for m in methods(data, precision)}


def method_summary(data: dict) -> list[dict]:
    """Per (method, precision): median speedup over categories, mean τ, speedup ÷ τ."""
    out = []
    for p in precisions(data):
        for m in methods(data, p):
            rows = [r for r in data["rows"] if r["method"] == m and r.get("precision", "fp32") == p]
            taus = [r["tau"] for r in rows if isinstance(r.get("tau"), (int, float)) and r["tau"] == r["tau"]]
            sp = statistics.median(r["speedup"] for r in rows)
            tau = sum(taus) / len(taus) if taus else None
            out.append({"method": m, "precision": p, "speedup": sp, "tau": tau, "bound": sp / tau if tau else None})
    return out


def ablation_series(data: dict, param: str) -> list[dict]:
    """Per value of one ablation: mean τ and median speedup over its categories."""
    rows = [r for r in data.get("ablations", []) if r.get("ablation") == param]
    out = []
    for value in dict.fromkeys(r["value"] for r in rows):
        mine = [r for r in rows if r["value"] == value]
        taus = [r["tau"] for r in mine if r["tau"] == r["tau"]]
        tau = sum(taus) / len(taus) if taus else None
        sp = statistics.median(r["speedup"] for r in mine)
        out.append({"value": str(value), "tau": tau, "speedup": sp, "bound": sp / tau if tau else None,
                    "tree_nodes": mine[0].get("tree_nodes", 0), "method": mine[0]["method"]})
    return out


def ablation_params(data: dict) -> list[str]:
    return list(dict.fromkeys(r["ablation"] for r in data.get("ablations", []) if r.get("ablation")))


# ---- Plotly ------------------------------------------------------------------------------------
def _bars(title: str, x: list[str], series: dict[str, list], ytitle: str, ref: float | None = 1.0):
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (name, ys) in enumerate(series.items()):
        fig.add_bar(name=name, x=x, y=ys, marker_color=PALETTE[i % len(PALETTE)],
                    hovertemplate=f"{name}<br>%{{x}}: %{{y:.2f}}<extra></extra>")
    if ref is not None:
        fig.add_hline(y=ref, line_dash="dash", line_color="#444")
    fig.update_layout(title=title, barmode="group", yaxis_title=ytitle, height=420, margin=dict(l=50, r=20, t=60, b=40),
                      legend=dict(orientation="h", y=-0.15))
    return fig


def speedup_figure(data: dict, precision: str = "fp32"):
    cats, series = per_category(data, precision, "speedup")
    return _bars(f"Speedup over {baseline(data)} per category ({precision})", cats, series, "speedup (×)")


def tau_figure(data: dict, precision: str = "fp32"):
    cats, series = per_category(data, precision, "tau")
    series = {m: v for m, v in series.items() if any(x is not None for x in v)}
    return _bars(f"τ (tokens per forward pass of the target) per category ({precision})", cats, series, "τ", ref=1.0)


def bound_figure(data: dict):
    rows = method_summary(data)
    series = {}
    for p in precisions(data):
        series[p] = [next((r["bound"] for r in rows if r["method"] == m and r["precision"] == p), None)
                     for m in methods(data, precisions(data)[0])]
    return _bars("Speedup ÷ τ (1.0 = every forward pass as cheap as a plain one)", methods(data, precisions(data)[0]),
                 series, "speedup ÷ τ")


def ablation_figure(data: dict, param: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pts = ablation_series(data, param)
    if not pts:
        raise SpecstreamError(f"no '{param}' ablation in these results")
    x = [p["value"] for p in pts]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("τ", f"speedup over {baseline(data)}"))
    fig.add_trace(go.Scatter(x=x, y=[p["tau"] for p in pts], mode="lines+markers", name="τ",
                             marker_color=PALETTE[6]), 1, 1)
    fig.add_trace(go.Scatter(x=x, y=[p["speedup"] for p in pts], mode="lines+markers", name="speedup",
                             marker_color=PALETTE[9]), 1, 2)
    fig.update_xaxes(type="category", title_text=ABLATION_TITLES.get(param, param))
    fig.update_layout(title=f"Ablation: {ABLATION_TITLES.get(param, param)}", height=380, showlegend=False,
                      margin=dict(l=50, r=20, t=70, b=50))
    return fig


# ---- SVG (for Markdown) ---------------------------------------------------------------------------
def svg_bars(title: str, x: list[str], series: dict[str, list], ytitle: str, ref: float | None = 1.0,
             width: int = 860, height: int = 360) -> str:
    left, right, top, bottom = 56, 16, 40, 92
    vals = [v for ys in series.values() for v in ys if v is not None]
    ymax = max(vals + [ref or 0, 1e-9]) * 1.12
    pw, ph = width - left - right, height - top - bottom
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
           f'<text transform="translate(14,{top + ph / 2}) rotate(-90)" text-anchor="middle">{html.escape(ytitle)}</text>']
    for i in range(6):  # grid
        v = ymax * i / 5
        y = top + ph - ph * v / ymax
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    n, k = max(1, len(x)), max(1, len(series))
    group = pw / n
    bw = group * 0.8 / k
    for gi, label in enumerate(x):
        out.append(f'<text x="{left + group * (gi + 0.5):.1f}" y="{top + ph + 14}" text-anchor="middle">{html.escape(label)}</text>')
        for si, ys in enumerate(series.values()):
            v = ys[gi] if gi < len(ys) else None
            if v is None:
                continue
            h = ph * v / ymax
            bx = left + group * gi + group * 0.1 + bw * si
            out.append(f'<rect x="{bx:.1f}" y="{top + ph - h:.1f}" width="{max(bw - 1, 1):.1f}" height="{h:.1f}" '
                       f'fill="{PALETTE[si % len(PALETTE)]}"><title>{html.escape(list(series)[si])}: {v:.2f}</title></rect>')
    if ref is not None:
        y = top + ph - ph * ref / ymax
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#333" stroke-dasharray="5,4"/>')
    lx, ly = left, top + ph + 34
    for si, name in enumerate(series):  # legend
        if lx + 12 + 7 * len(name) > width:
            lx, ly = left, ly + 16
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{PALETTE[si % len(PALETTE)]}"/>'
                   f'<text x="{lx + 14}" y="{ly}">{html.escape(name)}</text>')
        lx += 30 + 7 * len(name)
    out.append("</svg>")
    return "\n".join(out)


def svg_ablation(data: dict, param: str, width: int = 860, height: int = 300) -> str:
    pts = ablation_series(data, param)
    x = [p["value"] for p in pts]
    tau = svg_bars("τ", x, {"τ": [p["tau"] for p in pts]}, "τ", ref=1.0, width=width // 2, height=height)
    sp = svg_bars(f"speedup over {baseline(data)}", x, {"speedup": [p["speedup"] for p in pts]}, "speedup (×)",
                  ref=1.0, width=width // 2, height=height)

    def inner(svg):
        return svg.split(">", 1)[1].rsplit("</svg>", 1)[0]

    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 24}" font-family="sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/><text x="{width / 2}" y="16" text-anchor="middle" '
            f'font-size="14">Ablation: {html.escape(ABLATION_TITLES.get(param, param))}</text>'
            f'<g transform="translate(0,24)">{inner(tau)}</g><g transform="translate({width // 2},24)">{inner(sp)}</g></svg>')


def write_plots(data: dict, out_dir: str) -> list[str]:
    """Every figure as SVG (for Markdown) and Plotly HTML (interactive); returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    written = []

    def put(name: str, svg: str, fig) -> None:
        path = os.path.join(out_dir, name + ".svg")
        with open(path, "w") as f:
            f.write(svg)
        written.append(path)
        path = os.path.join(out_dir, name + ".html")
        fig.write_html(path, include_plotlyjs="cdn", full_html=True)
        written.append(path)

    for p in precisions(data):
        cats, series = per_category(data, p, "speedup")
        put(f"speedup-{p}", svg_bars(f"Speedup over {baseline(data)} per category ({p})", cats, series, "speedup (×)"),
            speedup_figure(data, p))
        cats, series = per_category(data, p, "tau")
        series = {m: v for m, v in series.items() if any(x is not None for x in v)}
        put(f"tau-{p}", svg_bars(f"τ per category ({p})", cats, series, "τ"), tau_figure(data, p))
    rows = method_summary(data)
    ms = methods(data, precisions(data)[0])
    series = {p: [next((r["bound"] for r in rows if r["method"] == m and r["precision"] == p), None) for m in ms]
              for p in precisions(data)}
    put("bound", svg_bars("Speedup ÷ τ per method", ms, series, "speedup ÷ τ"), bound_figure(data))
    for param in ablation_params(data):
        put(f"ablation-{param}", svg_ablation(data, param), ablation_figure(data, param))
    return written


def pass_cost_figure(runs: list[dict]):
    """`pass-cost` runs: each pass kind's cost relative to a plain pass (Plotly), one bar colour per run."""
    labels, series = figure_series(runs)
    fig = _bars("Cost of one forward pass ÷ a plain pass (speedup ≈ τ ÷ this)", labels, series, "× plain pass")
    fig.update_traces(hovertemplate="%{fullData.name}<br>%{x}: %{y:.2f}× a plain pass<br>"
                                    "τ needed for 2×: %{customdata:.2f}<extra></extra>",
                      selector=dict(type="bar"))
    for trace, ys in zip(fig.data, series.values()):
        trace.customdata = [2 * y if y is not None else None for y in ys]
    return fig


def draft_tau_figure(data: dict):
    """`draft-tau` results: τ against draft nodes a step, the mean over categories and each category (Plotly)."""
    import plotly.graph_objects as go

    drafts = sorted(data["drafts"], key=lambda d: data["nodes_per_step"][d])
    x = [data["nodes_per_step"][d] for d in drafts]
    fig = go.Figure()
    categories = list(data["tau"][drafts[0]])
    for i, c in enumerate(categories):
        fig.add_scatter(x=x, y=[data["tau"][d].get(c) for d in drafts], name=c, mode="markers", opacity=0.55,
                        marker=dict(size=6, color=PALETTE[i % len(PALETTE)]), customdata=drafts,
                        hovertemplate=f"{html.escape(c)}<br>%{{customdata}}: τ %{{y:.2f}}<extra></extra>")
    # drafts of different kinds do not lie on one curve: points, named (labels alternate above and below)
    fig.add_scatter(x=x, y=[data["mean_tau"][d] for d in drafts], name="mean over categories", mode="markers+text",
                    text=[html.escape(d) for d in drafts], customdata=drafts, marker=dict(size=11, color="#222"),
                    textposition=["top center" if i % 2 == 0 else "bottom center" for i in range(len(drafts))],
                    hovertemplate="%{customdata}: %{x:.1f} nodes a step, mean τ %{y:.2f}<extra></extra>")
    fig.update_layout(title="How far drafting takes τ (replayed over decoded answers)", xaxis_title="draft nodes a step",
                      yaxis_title="τ (tokens per pass)", height=440, margin=dict(l=50, r=20, t=60, b=40),
                      legend=dict(orientation="h", y=-0.18))
    return fig

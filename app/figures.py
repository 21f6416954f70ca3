"""Pure figure functions: a trace (the engine's JSON schema, see specstream_core/decoding/trace.py; reading it: traces.py) in, a Plotly
figure out. No model, no Gradio, no global state — the lab calls these both after a live run and when
replaying an uploaded trace, and the tests call them without a browser.

    tree_figure(trace, step)                 draft tree of one pass: accepted / rejected / pruned, bonus
    acceptance_figure(trace, selected)       accepted length histogram, per-depth acceptance, τ (the selected
                                             pass marked), time split
    attention_figure(trace, step, layer, head)  stream rows × (context tokens + sibling streams)
    mask_figure(trace, step)                 the multi-stream attention mask of that pass (from tree + γ)

Bad input raises SpecstreamError with a one-line reason (the UI shows it as a message).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from specstream_core.decoding.tree import Tree
from specstream_core.errors import SpecstreamError
from specstream_core.model import masks

from .traces import checked, decode_steps, is_speculative, node_status, plot_label, step_of, trace_gamma

ACCEPTED, REJECTED, PRUNED, BONUS = "#2ca02c", "#d62728", "#b8b8b8", "#ff9f1c"
SELECTED = "#1f5fa8"  # the pass the visitor selected (the same blue outlines its tokens in the text)
COPIED_SYMBOL = "diamond"  # a node copied from the context by prompt lookup
TIME_COLOURS = {"draft": "#9467bd", "verify": "#1f77b4", "accept": "#8c564b"}
FONT = dict(family="Inter, system-ui, sans-serif", size=13)
_GRID = "#EBF0F8"
_AXIS = dict(gridcolor=_GRID, linecolor=_GRID, zerolinecolor=_GRID, zerolinewidth=2, ticks="", automargin=True,
             title=dict(standoff=15))
# plotly_white's look, only the parts these 2-D figures use: Plotly deep-copies and re-validates the whole
# template on every figure, and plotly_white (3-D scenes, maps, polar axes, every trace type's defaults) took
# a fifth of the CPU time of replaying the largest upload
TEMPLATE = go.layout.Template(layout=dict(
    colorway=["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880"],
    font=dict(color="#2a3f5f"), hovermode="closest", hoverlabel=dict(align="left"), paper_bgcolor="white",
    plot_bgcolor="white", xaxis=_AXIS, yaxis=_AXIS, title=dict(x=0.05), shapedefaults=dict(line_color="#2a3f5f"),
    annotationdefaults=dict(arrowcolor="#2a3f5f", arrowhead=0, arrowwidth=1)))


def _empty(title: str, message: str, height: int = 360) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=15, color="#666"))
    fig.update_layout(title=title, height=height, xaxis_visible=False, yaxis_visible=False,
                      template=TEMPLATE, font=FONT, margin=dict(l=30, r=30, t=60, b=30))
    return fig


# ---- draft tree ---------------------------------------------------------------------------------
def tree_layout(parents: list[int]) -> list[float]:
    """Vertical position of each node: leaves in depth-first order, a parent centred on its children.
    Iterative (an explicit stack), so a chain of any length is fine."""
    children: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    y = [0.0] * len(parents)
    next_leaf = 0
    for root in (i for i, p in enumerate(parents) if p < 0):
        stack = [(root, False)]  # (node, its children already placed)
        while stack:
            node, placed = stack.pop()
            if not children[node]:
                y[node] = float(next_leaf)
                next_leaf += 1
            elif placed:
                y[node] = sum(y[c] for c in children[node]) / len(children[node])
            else:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(children[node]))
    return y


def tree_figure(trace: dict, index: int) -> go.Figure:
    """Draft tree of pass `index`: x = depth (stream), colour = accepted / rejected / pruned, the accepted
    path drawn thick, the bonus token (the base model's own next token) as a star after it."""
    # long: one figure's traces (edges, nodes by status, bonus) and its layout, built in drawing order
    trace = checked(trace)
    step = step_of(trace, index)
    nodes = step["nodes"]
    parents = [n["parent"] for n in nodes]
    depths = [n["depth"] for n in nodes]
    ys = tree_layout(parents)
    accepted = set(step["accepted"])
    title = f"Draft tree · pass {index}"
    if index == 0 and is_speculative(trace):
        title += " (prefill: the prompt's last token; no draft yet)"
    fig = go.Figure()
    # edges: one trace per style, segments separated by None
    for style, colour, width, dash in (("rejected", REJECTED, 1.2, "solid"), ("pruned", PRUNED, 1.0, "dot"),
                                       ("accepted", ACCEPTED, 4.5, "solid")):
        xs, yy = [], []
        for i, p in enumerate(parents):
            if p >= 0 and node_status(nodes[i]) == style:
                xs += [depths[p], depths[i], None]
                yy += [ys[p], ys[i], None]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=yy, mode="lines", line=dict(color=colour, width=width, dash=dash),
                                     hoverinfo="skip", showlegend=False))
    for status, colour, symbol in (("accepted", ACCEPTED, "circle"), ("rejected", REJECTED, "circle"),
                                   ("pruned", PRUNED, "x")):
        ids = [i for i, n in enumerate(nodes) if node_status(n) == status]
        if not ids:
            continue
        hover = [_node_hover(nodes[i], i == 0) for i in ids]
        fig.add_trace(go.Scatter(
            x=[depths[i] for i in ids], y=[ys[i] for i in ids], mode="markers+text", name=status,
            text=[plot_label(nodes[i].get("text")) for i in ids], textposition="middle right",
            textfont=dict(size=13, color="#222" if status != "pruned" else "#999"),
            marker=dict(size=[22 if i in accepted else 14 for i in ids], color=colour,
                        symbol=[COPIED_SYMBOL if nodes[i].get("copied") is True and symbol == "circle" else symbol
                                for i in ids],
                        line=dict(width=1, color="#333")),
            hovertext=hover, hoverinfo="text"))
    bonus = step.get("bonus") or {}
    if isinstance(bonus, dict) and "text" in bonus and step["accepted"]:
        last = step["accepted"][-1]
        fig.add_trace(go.Scatter(
            x=[depths[last] + 1], y=[ys[last]], mode="markers+text", name="bonus token",
            text=[plot_label(bonus.get("text"))], textposition="middle right",
            marker=dict(size=24, color=BONUS, symbol="star", line=dict(width=1, color="#333")),
            hovertext=[f"bonus token {plot_label(bonus.get('text'))} (id {bonus.get('token')})<br>"
                       "the base model's own choice after the accepted path — always correct"],
            hoverinfo="text"))
        fig.add_trace(go.Scatter(x=[depths[last], depths[last] + 1], y=[ys[last], ys[last]], mode="lines",
                                 line=dict(color=BONUS, width=3, dash="dash"), hoverinfo="skip", showlegend=False))
    max_depth = max(depths) + 1
    n_pruned = sum(1 for n in nodes if n.get("pruned"))
    n_copied = sum(1 for n in nodes if n.get("copied") is True)
    source = "the context or the n-gram store" if (trace.get("meta") or {}).get("ngrams") else "the context"
    copied = f" ({n_copied} copied from {source}: ◆)" if n_copied else ""
    sub = (f"{len(nodes)} drafted nodes{copied} · {n_pruned} pruned · accepted {len(step['accepted']) - 1} "
           f"draft token(s) + 1 bonus")
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{sub}</sup>"), template=TEMPLATE, font=FONT,
        height=max(360, min(900, 26 * (max(ys) + 1) + 140)), margin=dict(l=40, r=40, t=80, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        xaxis=dict(title="depth = speculative stream (0 = main stream's token)", tickmode="array",
                   tickvals=list(range(max_depth + 1)), range=[-0.4, max_depth + 0.9], zeroline=False),
        yaxis=dict(visible=False, autorange="reversed"))
    return fig


def _node_hover(node: dict, is_root: bool) -> str:
    label = plot_label(node.get("text"))
    status = node_status(node)
    prob = node.get("prob")
    parts = [f"<b>{label}</b> (id {node.get('token')})", f"depth {node.get('depth')} · {status}"]
    if is_root:
        parts.append("root: the main stream's token, already verified")
    elif node.get("copied") is True:
        parts.append("copied from the context (prompt lookup) or the n-gram store, not drafted by a stream")
    elif isinstance(prob, (int, float)):
        parts.append(f"stream probability p = {prob:.3f}")
    return "<br>".join(parts)


# ---- acceptance ---------------------------------------------------------------------------------
def acceptance_stats(trace: dict) -> dict:
    """Numbers behind the acceptance figure (also used for the meters of a replayed run)."""
    trace = checked(trace)
    steps = trace["steps"]
    verify = decode_steps(trace)
    lengths = [len(s["accepted"]) for s in verify]  # tokens a pass produced: accepted drafts + bonus
    max_depth = max([n["depth"] for s in verify for n in s["nodes"]] + [0])
    if trace_gamma(trace):
        max_depth = max(max_depth, min(len(trace["meta"].get("topk") or []), trace_gamma(trace)))
    if not is_speculative(trace):
        max_depth = 0
    depth_rate = [sum(1 for L in lengths if L - 1 >= j) / len(lengths) if lengths else 0.0
                  for j in range(1, max_depth + 1)]
    emitted, tau = 0, []
    for i, s in enumerate(steps, start=1):
        emitted += len(s["emitted"])
        tau.append(emitted / i)
    times = {k: [float((s.get("time_ms") or {}).get(k, 0.0) or 0.0) for s in steps] for k in TIME_COLOURS}
    return {"lengths": lengths, "depth_rate": depth_rate, "tau": tau, "times": times,
            "passes": len(steps), "tokens": emitted}


def acceptance_figure(trace: dict, selected: int | None = None) -> go.Figure:
    """The acceptance panels; `selected` (a pass index) is marked on the τ chart: a vertical line and a
    ringed marker named "selected pass". None, or an index outside the run, marks nothing."""
    trace = checked(trace)
    st = acceptance_stats(trace)
    if not trace["steps"]:
        return _empty("Acceptance", "no steps recorded")
    first, time_title = time_passes(trace, st)
    fig = make_subplots(rows=2, cols=2, vertical_spacing=0.2, horizontal_spacing=0.1, subplot_titles=(
        "Tokens per verification pass (accepted drafts + bonus)", "Per-depth acceptance rate",
        "τ (mean tokens per forward pass) over the run", time_title))
    lengths = st["lengths"]
    if lengths:
        top = max(lengths)
        fig.add_trace(go.Bar(x=list(range(1, top + 1)), y=[lengths.count(v) for v in range(1, top + 1)],
                             marker_color=ACCEPTED, name="passes", showlegend=False,
                             hovertemplate="%{y} passes produced %{x} token(s)<extra></extra>"), 1, 1)
    if st["depth_rate"]:
        fig.add_trace(go.Bar(x=[f"depth {j}" for j in range(1, len(st["depth_rate"]) + 1)], y=st["depth_rate"],
                             marker_color="#17becf", showlegend=False,
                             hovertemplate="%{x}: accepted in %{y:.0%} of passes<extra></extra>"), 1, 2)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=2)
    xs = list(range(len(st["tau"])))
    fig.add_trace(go.Scatter(x=xs, y=st["tau"], mode="lines+markers", line=dict(color="#ff7f0e"), showlegend=False,
                             hovertemplate="after pass %{x}: τ = %{y:.2f}<extra></extra>"), 2, 1)
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"), row=2, col=1)
    if isinstance(selected, int) and not isinstance(selected, bool) and 0 <= selected < len(xs):
        fig.add_vline(x=selected, line=dict(color=SELECTED, width=2, dash="dash"), row=2, col=1)
        fig.add_trace(go.Scatter(x=[selected], y=[st["tau"][selected]], mode="markers", name="selected pass",
                                 marker=dict(size=14, color="rgba(0,0,0,0)", line=dict(width=3, color=SELECTED)),
                                 showlegend=False,
                                 hovertemplate="selected pass %{x}: τ = %{y:.2f}<extra></extra>"), 2, 1)
    for key, colour in TIME_COLOURS.items():
        fig.add_trace(go.Bar(x=xs[first:], y=st["times"][key][first:], name=key, marker_color=colour,
                             hovertemplate=f"pass %{{x}}: {key} %{{y:.2f}} ms<extra></extra>"), 2, 2)
    fig.update_layout(barmode="stack", template=TEMPLATE, font=FONT, height=620,
                      margin=dict(l=50, r=30, t=60, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.08, xanchor="right", x=1.0))
    fig.update_xaxes(title_text="tokens", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="pass", row=2, col=1)
    fig.update_xaxes(title_text="pass", row=2, col=2)
    return fig


def time_passes(trace: dict, st: dict) -> tuple[int, str]:
    """(first pass the time chart shows, its title). A speculative run's pass 0 is the prefill: it runs the
    whole prompt and takes many times a verification pass, which would squash every other bar; it is left
    out, its time named in the title."""
    title = "Time per pass: draft / verify / accept (ms)"
    if not is_speculative(trace) or len(trace["steps"]) < 2:
        return 0, title
    prefill = sum(st["times"][k][0] for k in TIME_COLOURS)
    return 1, f"{title}<br><sup>pass 0, the prefill ({prefill:.1f} ms), left out</sup>"


# ---- stream attention ---------------------------------------------------------------------------
def attention_choices(trace: dict, index: int) -> tuple[list[str], list[str]]:
    """(layers, heads) recorded for a pass; heads include 'mean'. Empty when nothing was recorded."""
    trace = checked(trace)
    att = step_of(trace, index).get("attention")
    if not isinstance(att, dict) or not isinstance(att.get("layers"), dict) or not att["layers"]:
        return [], []
    heads = att.get("heads") or []
    return sorted(att["layers"], key=lambda s: int(s) if str(s).isdigit() else s), ["mean"] + [str(h) for h in heads]


def attention_matrix(trace: dict, index: int, layer=None, head="mean") -> tuple[list[list[float]], list[str], int]:
    """(z [stream][column], column labels, context length) of one pass, layer and head (or 'mean')."""
    trace = checked(trace)
    att = step_of(trace, index).get("attention")
    layers, _ = attention_choices(trace, index)
    if not layers:
        raise SpecstreamError(f"pass {index} recorded no stream attention")
    layer = layers[-1] if layer in (None, "") else str(layer)
    if layer not in att["layers"]:
        raise SpecstreamError(f"layer {layer} was not recorded; this pass has layers {', '.join(layers)}")
    maps = att["layers"][layer]  # [head][stream][column]
    heads = [str(h) for h in att.get("heads") or range(len(maps))]
    if not isinstance(maps, list) or not maps or not all(isinstance(h, list) and h for h in maps):
        raise SpecstreamError(f"pass {index}: attention of layer {layer} is malformed")
    if head in (None, "", "mean"):
        n_rows, n_cols = len(maps[0]), len(maps[0][0])
        z = [[sum(h[r][c] for h in maps) / len(maps) for c in range(n_cols)] for r in range(n_rows)]
    else:
        if str(head) not in heads:
            raise SpecstreamError(f"head {head} was not recorded; choose among {', '.join(heads)} or mean")
        z = maps[heads.index(str(head))]
    columns = att.get("columns") or [str(c) for c in range(len(z[0]))]
    if len(columns) != len(z[0]):
        raise SpecstreamError(f"pass {index}: {len(columns)} column labels for {len(z[0])} attention columns")
    return z, [str(c) for c in columns], int(att.get("context_len", len(columns)))


def attention_figure(trace: dict, index: int, layer=None, head="mean") -> go.Figure:
    """Where each speculative stream of the accepted node looks: rows = streams s1..sγ, columns = the
    latest context tokens it sees (cached prefix + accepted path) then its sibling streams."""
    trace = checked(trace)
    step_of(trace, index)
    title = f"Stream attention · pass {index}"
    if not attention_choices(trace, index)[0]:
        why = ("plain decoding has no streams" if not is_speculative(trace) else
               "no stream attention recorded for this pass")
        return _empty(title, why)
    z, columns, context_len = attention_matrix(trace, index, layer, head)
    layer = attention_choices(trace, index)[0][-1] if layer in (None, "") else layer
    rows = [f"s{j + 1}" for j in range(len(z))]
    xs = list(range(len(columns)))
    hover = [[f"stream {rows[r]} → {plot_label(columns[c])}<br>weight {z[r][c]:.3f}" for c in xs]
             for r in range(len(z))]
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=rows, colorscale="Blues", zmin=0, hovertext=hover, hoverinfo="text",
                               colorbar=dict(title="weight", thickness=12)))
    fig.add_vline(x=context_len - 0.5, line=dict(color=BONUS, width=2, dash="dash"))
    fig.add_annotation(x=context_len - 0.5, y=1.06, yref="paper", text="context │ sibling streams", showarrow=False,
                       font=dict(size=11, color="#a0660b"))
    fig.update_layout(
        title=dict(text=html.escape(f"{title} · layer {layer} · head {head if head not in (None, '') else 'mean'}",
                                   quote=False)),
        template=TEMPLATE, font=FONT, height=max(300, 60 * len(rows) + 200),
        margin=dict(l=50, r=30, t=80, b=110),
        xaxis=dict(tickmode="array", tickvals=xs, ticktext=[plot_label(c) for c in columns], tickangle=-60,
                   title="key: context tokens (latest) then the node's own streams"),
        yaxis=dict(title="query: stream", autorange="reversed"))
    return fig


# ---- multi-stream attention mask ----------------------------------------------------------------
def step_mask(trace: dict, index: int, max_nodes: int | None = None) -> tuple[list[list[int]], list[str], list[str]]:
    """The multi-stream attention mask of one pass (top, stream-carrying layers) as the engine builds it
    (`specstream_core.model.masks.local_visibility` on the recorded tree and γ): 1 = may attend. Rows:
    surviving tree nodes (main rows), then γ stream rows per carrier. Columns: the cached prefix (one
    column), then the same rows as keys.

    Main row i sees the prefix and its ancestors-or-self, never a stream; stream j of carrier c sees
    the prefix, the main rows c sees and streams 1..j of c (docs/METHOD.md §2).
    `max_nodes` keeps the first surviving nodes only (breadth-first, so still a tree) for legibility."""
    trace = checked(trace)
    step = step_of(trace, index)
    gamma = trace_gamma(trace) if is_speculative(trace) else 0
    nodes = [n for n in step["nodes"] if not n.get("pruned")][:max_nodes]
    old_to_new = {n["id"]: i for i, n in enumerate(nodes)}
    n = len(nodes)
    tree = Tree([0] * n, [old_to_new.get(x["parent"], -1) for x in nodes], [0] * n, [1.0] * n)
    visible = tree.visibility()[None]  # [1, n, n]
    carriers = torch.arange(n)[None] if gamma else None  # every surviving node carries streams in a verify pass
    local = masks.local_visibility(visible, carriers, gamma)[0]  # [q, q]
    labels = [f"{plot_label(x.get('text'))} ·n{x['id']}" for x in nodes]
    labels += [f"{plot_label(nodes[c].get('text'))} ·s{j + 1}" for c in range(n if gamma else 0) for j in range(gamma)]
    mask = [[1] + [int(v) for v in row] for row in local.tolist()]  # the cached prefix is visible to every row
    columns = [f"prefix ({step.get('prefix_len', '?')} tok)"] + labels
    return mask, labels, columns


def mask_figure(trace: dict, index: int, max_nodes: int | None = 10) -> go.Figure:
    """The mask of `step_mask`, drawn for the first `max_nodes` surviving nodes (None = all)."""
    trace = checked(trace)
    survivors = sum(1 for n in step_of(trace, index)["nodes"] if not n.get("pruned"))
    mask, rows, columns = step_mask(trace, index, max_nodes)
    gamma = trace_gamma(trace) if is_speculative(trace) else 0
    n_main = len(rows) // (1 + gamma) if gamma else len(rows)
    ys, xs = list(range(len(rows))), list(range(len(columns)))
    fig = go.Figure(go.Heatmap(
        z=mask, x=xs, y=ys, colorscale=[[0, "#f4f4f4"], [1, "#1f77b4"]], zmin=0, zmax=1, showscale=False,
        xgap=1, ygap=1, hovertext=[[f"{rows[r]} → {columns[c]}: {'attends' if mask[r][c] else 'masked'}"
                                    for c in xs] for r in ys], hoverinfo="text"))
    if gamma:
        fig.add_hline(y=n_main - 0.5, line=dict(color=BONUS, width=2))
        fig.add_vline(x=n_main + 0.5, line=dict(color=BONUS, width=2))
    dense = len(rows) > 60
    sub = (f"{n_main} main rows + {len(rows) - n_main} stream rows (γ = {gamma}) · blue = may attend"
           if gamma else f"{n_main} main row(s) · plain causal attention")
    if n_main < survivors:
        sub += f" · first {n_main} of {survivors} tree nodes shown"
    size = max(360, min(1000, 14 * len(rows) + 220))
    fig.update_layout(
        title=dict(text=f"Multi-stream attention mask · pass {index} (stream layers)<br><sup>{sub}</sup>"),
        template=TEMPLATE, font=FONT, height=size, margin=dict(l=120, r=30, t=80, b=120),
        xaxis=dict(tickmode="array", tickvals=xs, ticktext=columns, tickangle=-60, showticklabels=not dense,
                   title="key"),
        yaxis=dict(tickmode="array", tickvals=ys, ticktext=rows, autorange="reversed", showticklabels=not dense,
                   title="query"))
    return fig

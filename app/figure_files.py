"""The lab's Plotly figures drawn on a `drawing.Canvas`, for files (SVG and PNG) that open anywhere without a
browser or Plotly's image exporter. It reads the figure's own data and layout, and draws what app/figures.py
uses: scatter lines, markers and text, stacked bars, heatmaps with a colour bar, subplots, line shapes
(hline / vline), annotations, titles and a legend.

    canvas = draw(fig)              # then canvas.to_svg(), canvas.to_png()
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field

import plotly.graph_objects as go

from .drawing import Canvas, rgba, text_width

GRID, AXIS_TEXT, TITLE = "#EBF0F8", "#2a3f5f", "#2a3f5f"
BASE = 13.0  # the figures' font size (figures.FONT)
WIDTH = 1000  # the lab's plots fill the page's width; a file gets this
ROOM = 60  # px added under the layout's height: Plotly grows its margins to fit labels, a file grows this way
_TAG = re.compile(r"<[^>]+>")


def plain(text) -> str:
    """A Plotly label as plain text: tags dropped, entities decoded (the figures escape token text)."""
    return html.unescape(_TAG.sub("", str(text if text is not None else "")))


def lines_of(text) -> list[tuple[str, bool]]:
    """A Plotly title's lines, each with whether it is a `<sup>` subtitle."""
    parts = re.split(r"<br\s*/?>", str(text or ""))
    return [(plain(p), "<sup>" in p) for p in parts if plain(p).strip()]


@dataclass
class Axis:
    lo: float = 0.0  # pixel ends of the axis (left/top first)
    hi: float = 1.0
    letter: str = "x"
    spec: dict = field(default_factory=dict)
    categories: list = field(default_factory=list)
    values: list = field(default_factory=list)  # numbers the data reach (categories as their index)
    start: float = 0.0
    end: float = 1.0

    def number(self, v) -> float | None:
        if v is None or isinstance(v, bool):
            return None
        if isinstance(v, str):
            if v not in self.categories:
                self.categories.append(v)
            return float(self.categories.index(v))
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    def px(self, v) -> float | None:
        n = self.number(v)
        if n is None or self.end == self.start:
            return None
        t = (n - self.start) / (self.end - self.start)
        return self.lo + t * (self.hi - self.lo) if self.letter == "x" else self.hi - t * (self.hi - self.lo)

    def fix_range(self, pad: float) -> None:
        given = self.spec.get("range")
        if given and len(given) == 2 and all(isinstance(g, (int, float)) for g in given):
            self.start, self.end = float(given[0]), float(given[1])
        elif self.values:
            lo, hi = min(self.values), max(self.values)
            span = (hi - lo) or 1.0
            self.start, self.end = lo - pad * span, hi + pad * span
        if self.spec.get("autorange") == "reversed":
            self.start, self.end = self.end, self.start


def _axes(layout: dict, width: float, height: float, margin: dict) -> dict[str, Axis]:
    x0, x1 = margin["l"], width - margin["r"]
    y0, y1 = margin["t"], height - margin["b"]
    axes = {}
    for name in sorted({"xaxis", "yaxis", *(k for k in layout if re.fullmatch(r"[xy]axis\d*", k))}):
        spec = layout.get(name) or {}
        d0, d1 = (spec.get("domain") or [0.0, 1.0])[:2]
        if name[0] == "x":
            axes[name] = Axis(x0 + d0 * (x1 - x0), x0 + d1 * (x1 - x0), "x", spec)
        else:
            axes[name] = Axis(y1 - d1 * (y1 - y0), y1 - d0 * (y1 - y0), "y", spec)
    return axes


def _axis_of(trace: dict, letter: str) -> str:
    ref = trace.get(f"{letter}axis") or letter
    return f"{letter}axis{ref[1:]}"


def _gather(data: list[dict], axes: dict[str, Axis], stacked: bool) -> None:
    """Feed each axis the values its traces reach (bars from 0, stacked bars to their sums, heatmap cell edges)."""
    sums: dict[tuple, float] = {}
    for t in data:
        ax, ay = axes.setdefault(_axis_of(t, "x"), Axis()), axes.setdefault(_axis_of(t, "y"), Axis(letter="y"))
        if t.get("type") == "heatmap":
            z = t.get("z") or [[]]
            xs = t.get("x") or list(range(len(z[0]) if z else 0))
            ys = t.get("y") or list(range(len(z)))
            for a, vals in ((ax, xs), (ay, ys)):
                nums = [a.number(v) for v in vals]
                a.values += [n + d for n in nums if n is not None for d in (-0.5, 0.5)]
            continue
        xs, ys = list(t.get("x") or []), list(t.get("y") or [])
        ax.values += [n for n in map(ax.number, xs) if n is not None]
        if t.get("type") == "bar":
            ax.values += [n + d for n in map(ax.number, xs) if n is not None for d in (-0.5, 0.5)]
            ay.values.append(0.0)
            for x, y in zip(xs, ys):
                if isinstance(y, (int, float)):
                    key = (_axis_of(t, "x"), ax.number(x)) if stacked else (id(t), x)
                    sums[key] = sums.get(key, 0.0) + y
                    ay.values.append(sums[key])
        else:
            ay.values += [n for n in map(ay.number, ys) if n is not None]


def _nice_ticks(a: Axis, length: float) -> list[float]:
    lo, hi = sorted((a.start, a.end))
    if a.categories and not a.spec.get("dtick"):
        every = max(1, math.ceil(len(a.categories) / max(1.0, length / 16)))
        return [float(i) for i in range(0, len(a.categories), every) if lo <= i <= hi]
    step = a.spec.get("dtick")
    if not isinstance(step, (int, float)) or step <= 0:
        raw = (hi - lo) / max(2.0, length / 90) or 1.0
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [first + k * step for k in range(int((hi - first) / step + 1e-9) + 1)][:200]


def _tick_text(a: Axis, v: float) -> str:
    if a.categories:
        i = int(round(v))
        return plain(a.categories[i]) if 0 <= i < len(a.categories) else ""
    if a.spec.get("tickformat") == ".0%":
        return f"{v * 100:.0f}%"
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.3g}"


def _ticks(a: Axis) -> list[tuple[float, str]]:
    if a.spec.get("tickmode") == "array" and a.spec.get("tickvals") is not None:
        texts = a.spec.get("ticktext") or a.spec["tickvals"]
        return [(a.px(v), plain(s)) for v, s in zip(a.spec["tickvals"], texts) if a.px(v) is not None]
    return [(a.px(v), _tick_text(a, v)) for v in _nice_ticks(a, abs(a.hi - a.lo))]


def _draw_axis(c: Canvas, a: Axis, other: Axis | None, grid: bool, size: float) -> None:
    # long: an axis is its grid, ticks (straight or turned), their labels and its title, for x and y alike
    if a.spec.get("visible") is False or other is None:
        return
    ticks = _ticks(a)
    show = a.spec.get("showticklabels") is not False
    angle = -float(a.spec.get("tickangle") or 0) if a.letter == "x" else 0.0
    extent = 0.0
    for pos, label in ticks:
        if grid:
            if a.letter == "x":
                c.line([(pos, other.lo), (pos, other.hi)], GRID, 1)
            else:
                c.line([(other.lo, pos), (other.hi, pos)], GRID, 1)
        if not show:
            continue
        if a.letter == "x" and angle:
            c.text(pos, other.hi + 8, label, size, AXIS_TEXT, "end", angle=angle)
            extent = max(extent, text_width(label, size) * math.sin(math.radians(abs(angle))) + size)
        elif a.letter == "x":
            c.text(pos, other.hi + 6 + size / 2, label, size, AXIS_TEXT, "middle")
            extent = max(extent, size + 6)
        else:
            c.text(other.lo - 6, pos, label, size, AXIS_TEXT, "end")
            extent = max(extent, text_width(label, size) + 6)
    title = a.spec.get("title") or {}
    text = plain(title.get("text") if isinstance(title, dict) else title)
    if text and a.letter == "x":
        c.text((a.lo + a.hi) / 2, other.hi + extent + 18, text, size + 1, AXIS_TEXT, "middle")
    elif text:
        c.text(other.lo - extent - 16, (a.lo + a.hi) / 2, text, size + 1, AXIS_TEXT, "middle", angle=90)


def _colour_at(scale, t: float) -> str:
    """The colour of a Plotly colour scale [[0, c0], ..., [1, c1]] at t in [0, 1]."""
    t = min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in zip(scale, scale[1:]):
        if t <= t1:
            f = (t - t0) / ((t1 - t0) or 1)
            a, b = rgba(c0), rgba(c1)
            return "#" + "".join(f"{round(a[k] + f * (b[k] - a[k])):02x}" for k in range(3))
    return scale[-1][1]


def _heatmap(c: Canvas, t: dict, ax: Axis, ay: Axis, colourbar_x: float) -> None:
    z = t.get("z") or []
    if not z or not z[0]:
        return
    flat = [v for row in z for v in row if isinstance(v, (int, float))]
    zmin = t.get("zmin", min(flat, default=0.0))
    zmax = t.get("zmax", max(flat, default=1.0))
    scale = t.get("colorscale") or [[0, "#f7fbff"], [1, "#08306b"]]
    xs = t.get("x") or list(range(len(z[0])))
    ys = t.get("y") or list(range(len(z)))
    gx, gy = float(t.get("xgap") or 0), float(t.get("ygap") or 0)
    for r, row in enumerate(z):
        for k, v in enumerate(row):
            if not isinstance(v, (int, float)):
                continue
            xa, xb = ax.px(ax.number(xs[k]) - 0.5), ax.px(ax.number(xs[k]) + 0.5)
            ya, yb = ay.px(ay.number(ys[r]) - 0.5), ay.px(ay.number(ys[r]) + 0.5)
            left, top = min(xa, xb) + gx / 2, min(ya, yb) + gy / 2
            c.rect(left, top, abs(xb - xa) - gx, abs(yb - ya) - gy,
                   _colour_at(scale, (v - zmin) / ((zmax - zmin) or 1)))
    if t.get("showscale") is False:
        return
    top, bottom, steps = ay.lo, ay.hi, 40
    for i in range(steps):
        c.rect(colourbar_x, bottom - (i + 1) * (bottom - top) / steps, 12, (bottom - top) / steps + 0.5,
               _colour_at(scale, (i + 0.5) / steps))
    for v in (zmin, (zmin + zmax) / 2, zmax):
        y = bottom - (v - zmin) / ((zmax - zmin) or 1) * (bottom - top)
        c.text(colourbar_x + 16, y, f"{v:.2g}", BASE - 1, AXIS_TEXT)
    title = ((t.get("colorbar") or {}).get("title") or {})
    c.text(colourbar_x, top - 18, plain(title.get("text") if isinstance(title, dict) else title), BASE - 1, AXIS_TEXT)


def _bars(c: Canvas, t: dict, ax: Axis, ay: Axis, stacks: dict) -> None:
    colour = (t.get("marker") or {}).get("color") or "#636efa"
    for x, y in zip(t.get("x") or [], t.get("y") or []):
        n = ax.number(x)
        if n is None or not isinstance(y, (int, float)):
            continue
        key = (id(ax), n)
        base = stacks.get(key, 0.0)
        stacks[key] = base + y
        xa, xb = ax.px(n - 0.4), ax.px(n + 0.4)
        ya, yb = ay.px(base), ay.px(base + y)
        c.rect(min(xa, xb), min(ya, yb), abs(xb - xa), abs(yb - ya), colour)


def _each(value, i, default):
    if isinstance(value, (list, tuple)):
        return value[i] if i < len(value) else default
    return default if value is None else value


def _scatter(c: Canvas, t: dict, ax: Axis, ay: Axis) -> None:
    mode = t.get("mode") or "lines+markers"
    xs, ys = list(t.get("x") or []), list(t.get("y") or [])
    pts = [(ax.px(x), ay.px(y)) if x is not None and y is not None else None for x, y in zip(xs, ys)]
    if "lines" in mode:
        line = t.get("line") or {}
        run = []
        for p in pts + [None]:
            if p is None or None in p:
                c.line(run, line.get("color") or "#636efa", float(line.get("width") or 2), line.get("dash"))
                run = []
            else:
                run.append(p)
    m = t.get("marker") or {}
    tf = t.get("textfont") or {}
    fill = m.get("color") or (t.get("line") or {}).get("color") or "#636efa"
    for i, p in enumerate(pts):
        if p is None or None in p:
            continue
        size = float(_each(m.get("size"), i, 6))
        if "markers" in mode:
            edge = m.get("line") or {}
            c.marker(p[0], p[1], _each(m.get("symbol"), i, "circle"), size, _each(fill, i, "#636efa"),
                     _each(edge.get("color"), i, "#444"), float(_each(edge.get("width"), i, 0)))
        if "text" in mode and t.get("text") is not None:
            c.text(p[0] + size / 2 + 4, p[1], plain(_each(t.get("text"), i, "")), float(tf.get("size") or BASE),
                   tf.get("color") or "#222")


def _place(ref: str, v: float, axes: dict[str, Axis], box: tuple, letter: str) -> float | None:
    """A shape's or annotation's coordinate: 'paper' (the plot area), '<axis> domain' or data."""
    x0, y0, x1, y1 = box
    if ref == "paper":
        return x0 + v * (x1 - x0) if letter == "x" else y1 - v * (y1 - y0)
    a = axes.get(f"{letter}axis{ref.split()[0][1:]}")
    if a is None:
        return None
    if ref.endswith("domain"):
        return a.lo + v * (a.hi - a.lo) if letter == "x" else a.hi - v * (a.hi - a.lo)
    return a.px(v)


def _legend(c: Canvas, data: list[dict], legend: dict, box: tuple, size: float) -> None:
    items = [t for t in data if t.get("showlegend") is not False and t.get("name") and t.get("type") != "heatmap"]
    if len(items) < 2:
        return
    widths = [28 + text_width(plain(t["name"]), size) + 14 for t in items]
    x0, y0, x1, y1 = box
    lx = x0 + float(legend.get("x", 1.0)) * (x1 - x0)
    ly = y1 - float(legend.get("y", 1.0)) * (y1 - y0)
    lx -= {"right": sum(widths), "center": sum(widths) / 2}.get(legend.get("xanchor"), 0)
    ly += {"bottom": -size, "top": size + 4}.get(legend.get("yanchor"), 0)
    ly = min(ly, c.height - size)
    for t, w in zip(items, widths):
        m = t.get("marker") or {}
        colour = m.get("color") if isinstance(m.get("color"), str) else "#636efa"
        symbol = m.get("symbol") if isinstance(m.get("symbol"), str) else ("square" if t.get("type") == "bar"
                                                                           else "circle")
        c.marker(lx + 10, ly, symbol, 11, colour, "#333", 0.8)
        c.text(lx + 22, ly, plain(t["name"]), size, AXIS_TEXT)
        lx += w


def draw(fig: go.Figure, width: int = WIDTH) -> Canvas:
    """The figure on a canvas `width` px wide (or the layout's width) and the layout's height."""
    # long: the figure drawn back to front (axes, data, shapes, text, legend), each piece a few lines
    d = fig.to_dict()
    layout, data = d.get("layout") or {}, d.get("data") or []
    w, h = int(layout.get("width") or width), int(layout.get("height") or 450)
    margin = {"l": 80, "r": 80, "t": 100, "b": 80, **(layout.get("margin") or {})}
    scale_room = 70 if any(t.get("type") == "heatmap" and t.get("showscale") is not False for t in data) else 0
    margin["r"] += scale_room
    size = float((layout.get("font") or {}).get("size") or BASE)
    c = Canvas(w, h + ROOM)  # room below for turned tick labels, the axis title and a legend under the plot
    axes = _axes(layout, w, h, margin)
    _gather(data, axes, layout.get("barmode") == "stack")
    pairs = {(_axis_of(t, "x"), _axis_of(t, "y")) for t in data}
    heat = {p for t in data if t.get("type") == "heatmap" for p in [(_axis_of(t, "x"), _axis_of(t, "y"))]}
    exact = {name for pair in heat for name in pair}  # heatmap cells fill their axes to the edge
    for name, a in axes.items():
        a.fix_range(0.0 if a.categories or name in exact else 0.06)
    for xa, ya in sorted(pairs):
        _draw_axis(c, axes[xa], axes[ya], (xa, ya) not in heat, size)
        _draw_axis(c, axes[ya], axes[xa], (xa, ya) not in heat, size)
    stacks: dict = {}
    for t in data:
        ax, ay = axes[_axis_of(t, "x")], axes[_axis_of(t, "y")]
        if t.get("type") == "heatmap":
            _heatmap(c, t, ax, ay, w - margin["r"] + 16)
        elif t.get("type") == "bar":
            _bars(c, t, ax, ay, stacks if layout.get("barmode") == "stack" else {})
        else:
            _scatter(c, t, ax, ay)
    box = (margin["l"], margin["t"], w - margin["r"], h - margin["b"])
    for s in layout.get("shapes") or []:
        if s.get("type", "line") != "line":
            continue
        p0 = (_place(s.get("xref", "x"), s.get("x0", 0), axes, box, "x"),
              _place(s.get("yref", "y"), s.get("y0", 0), axes, box, "y"))
        p1 = (_place(s.get("xref", "x"), s.get("x1", 0), axes, box, "x"),
              _place(s.get("yref", "y"), s.get("y1", 0), axes, box, "y"))
        if None not in p0 + p1:
            line = s.get("line") or {}
            c.line([p0, p1], line.get("color") or "#444", float(line.get("width") or 1), line.get("dash"))
    for a in layout.get("annotations") or []:
        x = _place(a.get("xref", "x"), a.get("x", 0.5), axes, box, "x")
        y = _place(a.get("yref", "y"), a.get("y", 0.5), axes, box, "y")
        if x is None or y is None:
            continue
        font = a.get("font") or {}
        sz = float(font.get("size") or size + 2)
        rows = lines_of(a.get("text"))
        y -= (len(rows) - 0.5) * sz * 1.2 if a.get("yanchor") == "bottom" else (len(rows) - 1) * sz * 0.6
        for k, (text, sup) in enumerate(rows):
            c.text(x, y + k * sz * 1.2, text, sz * (0.75 if sup else 1), font.get("color") or TITLE,
                   {"left": "start", "right": "end"}.get(a.get("xanchor"), "middle"))
    title = (layout.get("title") or {}).get("text")
    for k, (text, sup) in enumerate(lines_of(title)):
        c.text(w * 0.05, 26 + k * 24, text, size * (0.9 if sup else 1.35), "#555" if sup else TITLE, bold=not sup)
    _legend(c, data, layout.get("legend") or {}, box, size)
    return c

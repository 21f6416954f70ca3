"""The figure pack: the selected pass's draft tree, acceptance (τ) chart, stream attention and attention mask,
each as SVG and PNG, in one zip for slides. Pure: a trace in, zip bytes out (`figure_pack`); the figures are
app/figures.py's, drawn to files by app/figure_files.py.

    blob = figure_pack(trace, index=7, layer="29", head="mean")
"""

from __future__ import annotations

import io
import json
import zipfile

from . import figures
from .figure_files import draw
from .lanes import LABELS
from .traces import checked, step_of

FIGURES = ("tree", "acceptance", "attention", "mask")


def pass_figures(trace: dict, index: int, layer=None, head=None) -> dict:
    """{name: Plotly figure} of one pass, as the lab shows them (the attention at `layer`/`head`, or its
    defaults: the last recorded layer, the heads' mean)."""
    layers, heads = figures.attention_choices(trace, index)
    layer = layer if layer in layers else (layers[-1] if layers else None)
    head = head if head in heads else "mean"
    return {"tree": figures.tree_figure(trace, index),
            "acceptance": figures.acceptance_figure(trace, selected=index),
            "attention": figures.attention_figure(trace, index, layer, head),
            "mask": figures.mask_figure(trace, index)}


def about(trace: dict, index: int, layer, head) -> dict:
    """What the pack holds and where it came from (about.json in the zip)."""
    meta = trace.get("meta") or {}
    lane = lane_of(trace)
    return {"pass": index, "passes": len(trace["steps"]), "lane": LABELS[lane] if lane else None,
            "attention_layer": layer, "attention_head": head,
            "model": meta.get("model"), "precision": meta.get("precision"), "device": meta.get("device"),
            "gamma": meta.get("gamma"), "figures": {name: [f"{name}.svg", f"{name}.png"] for name in FIGURES},
            "made_by": "the Speculative Streaming lab's figure pack (app/export.py)"}


def figure_pack(trace: dict, index: int, layer=None, head=None, scale: float = 2.0) -> bytes:
    """A zip of `pass-<index>/<figure>.svg` and `.png` for the four figures of pass `index`, and about.json.
    Raises SpecstreamError (a one-line reason) for a bad trace or index."""
    trace = checked(trace)
    step_of(trace, index)  # checks the index
    index = int(index)
    layers, heads = figures.attention_choices(trace, index)
    layer = layer if layer in layers else (layers[-1] if layers else None)
    head = head if head in heads else ("mean" if heads else None)
    buf = io.BytesIO()
    folder = f"pass-{index:03d}"
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, fig in pass_figures(trace, index, layer, head).items():
            canvas = draw(fig)
            z.writestr(f"{folder}/{name}.svg", canvas.to_svg())
            z.writestr(f"{folder}/{name}.png", canvas.to_png(scale))
        z.writestr(f"{folder}/about.json", json.dumps(about(trace, index, layer, head), indent=1))
    return buf.getvalue()


def lane_of(trace: dict) -> str | None:
    """The lane of a multi-lane race whose trace this is (a known lane's key only), else None."""
    lane = ((trace.get("meta") or {}).get("lab") or {}).get("lane")
    return lane if lane in LABELS else None


def pack_name(trace: dict, index: int) -> str:
    model = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in str((trace.get("meta") or {}).get("model")
                                                                             or "trace"))[:40]
    lane = lane_of(trace)
    return f"specstream-figures-{model}{f'-{lane}' if lane else ''}-pass{int(index)}.zip"

"""τ against training time: the evaluation records stream training runs leave every `--eval-every` steps
(`training.loop.TrainLoop.evaluate`), as one result file and one figure, a curve per run.

    run = read_run("/runs/streams")               # its checkpoint (a run still going or stopped), else train_log.json
    data = curves([("rank 32", run), ...], command, title)   # {"title", "command", "host", "curves": [...]}
    svg(data)                                     # τ estimate (solid) and stream 1's top-1 accuracy (dashed)

A point is the streams at one step: the training minutes so far (the steps' own time, every resumed run's
together), the τ estimate of the draft tree the trainer evaluates (`training.evaluate`: top-k 4,3,2,1 down the
streams, on held-out answers) and each stream's top-1 accuracy there. Runs that start from the same streams and
train for the same minutes on the same host compare settings by τ per minute of training."""

from __future__ import annotations

import html
import json
import math
import os

from specstream_core.bench.provenance import stamp
from specstream_core.errors import SpecstreamError
from specstream_core.training import checkpoint

SETTINGS = ("mode", "gamma", "n_stream_layers", "adapter_rank", "draft_vocab_size", "batch_size", "seq_len", "lr",
            "steps", "init_from", "eval_rows")
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b")


def read_run(run_dir: str) -> dict:
    """{"settings": the run's settings, "history": its records} from a training output folder: its checkpoint where
    there is one at least as new as its train_log.json (a run still going, or stopped by its time budget), else the
    log the finished run wrote."""
    ckpt = os.path.join(run_dir, "checkpoint", "checkpoint.pt")
    log = os.path.join(run_dir, "train_log.json")
    if os.path.isfile(ckpt) and (not os.path.isfile(log) or os.path.getmtime(ckpt) >= os.path.getmtime(log)):
        state = checkpoint.load(ckpt, "training checkpoint")
        if not isinstance(state, dict) or "history" not in state:
            raise SpecstreamError(f"{ckpt} is not a stream training checkpoint (no history)")
        return {"settings": dict(state.get("identity", {}).get("settings", {})), "history": list(state["history"])}
    if not os.path.isfile(log):
        raise SpecstreamError(f"{run_dir} holds no stream training run (neither checkpoint/checkpoint.pt nor "
                              "train_log.json)")
    try:
        with open(log) as f:
            saved = json.load(f)
        return {"settings": dict(saved.get("config", {})), "history": list(saved["history"])}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpecstreamError(f"{log} is not a training log ({type(exc).__name__}: {exc})") from None


def points(history: list[dict]) -> list[dict]:
    """The evaluation records, in step order: step, minutes, τ estimate (of the tree `tree`: top-k per stream), each
    stream's top-1 accuracy, rows."""
    out = []
    for r in history:
        ev = r.get("eval") if isinstance(r, dict) else None
        if not isinstance(ev, dict) or "tau_estimate" not in ev:
            continue
        out.append({"step": int(r["step"]), "minutes": round(float(r.get("seconds", 0.0)) / 60, 2),
                    "tau_estimate": round(float(ev["tau_estimate"]), 4),
                    "stream_top1": [round(float(a), 4) for a in ev.get("stream_top1", [])],
                    "rows": ev.get("rows"), "tree": ev.get("topk")})
    return sorted(out, key=lambda p: p["step"])


def curves(runs: list[tuple[str, dict]], command: str, title: str = "") -> dict:
    """The result file's content (`train-curve --json`): a curve per (label, run); SpecstreamError where a run has
    no evaluation record."""
    out = []
    for label, run in runs:
        pts = points(run["history"])
        if not pts:
            raise SpecstreamError(f"{label}: the run has no evaluation records: train with --eval-every N (and "
                                  "held-out data) to leave them")
        out.append({"label": label, "training": {k: run["settings"][k] for k in SETTINGS if k in run["settings"]},
                    "points": pts})
    return stamp({"title": title or "τ against training time", "curves": out}, command)


def svg(data: dict, width: int = 760, height: int = 340) -> str:
    """Each run's τ estimate (left axis, solid) and stream 1's top-1 accuracy (right axis, dashed) against training
    minutes, a colour per run."""
    runs = data["curves"]
    every = [p for c in runs for p in c["points"]]
    left, right, top, bottom = 56, 56, 40, 64
    pw, ph = width - left - right, height - top - bottom
    xs = [p["minutes"] for p in every]
    ticks = _minute_ticks(max(xs))
    x0, x1 = 0.0, ticks[-1]
    t0, t1 = _span([p["tau_estimate"] for p in every])
    a0, a1 = _span([p["stream_top1"][0] for p in every if p["stream_top1"]] or [0.0, 1.0])

    def x(v):
        return left + pw * (v - x0) / (x1 - x0)

    def y_tau(v):
        return top + ph - ph * (v - t0) / (t1 - t0)

    def y_acc(v):
        return top + ph - ph * (v - a0) / (a1 - a0)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{html.escape(data["title"])}</text>',
           f'<text x="{left + pw / 2}" y="{top + ph + 30}" text-anchor="middle">training minutes</text>',
           f'<text transform="translate(14,{top + ph / 2}) rotate(-90)" text-anchor="middle">'
           'τ estimate, tree 4,3,2,1 (solid)</text>',
           f'<text transform="translate({width - 10},{top + ph / 2}) rotate(90)" text-anchor="middle">'
           'stream 1 top-1 accuracy (dashed)</text>']
    for i in range(6):
        tv, av = t0 + (t1 - t0) * i / 5, a0 + (a1 - a0) * i / 5
        yy = y_tau(tv)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{left - 4}" y="{yy + 4:.1f}" text-anchor="end">{tv:.2f}</text>'
                   f'<text x="{left + pw + 4}" y="{y_acc(av) + 4:.1f}">{av:.2f}</text>')
    out += [f'<text x="{x(xv):.1f}" y="{top + ph + 14}" text-anchor="middle">{xv:g}</text>' for xv in ticks]
    lx, ly = left, height - 7 - 15 * (sum(24 + 6 * len(r["label"]) for r in runs) > width - left)
    for n, run in enumerate(runs):
        colour = COLOURS[n % len(COLOURS)]
        pts = run["points"]
        for place, key, dash in ((y_tau, "tau_estimate", ""), (y_acc, "stream_top1", ' stroke-dasharray="5,4"')):
            line = [(x(p["minutes"]), place(p[key] if key == "tau_estimate" else p[key][0])) for p in pts
                    if key == "tau_estimate" or p[key]]
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="'
                       + " ".join(f"{a:.1f},{b:.1f}" for a, b in line) + '"/>')
            out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{colour}"/>' for a, b in line]
        label, wide = html.escape(run["label"]), 24 + 6 * len(run["label"])
        if lx > left and lx + wide > width:  # the legend's next line
            lx, ly = left, ly + 15
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="{ly}">{label}</text>')
        lx += wide
    out.append("</svg>")
    return "\n".join(out)


def _minute_ticks(v: float) -> list[float]:
    """Ticks from 0 past v, at most 6 steps of 1, 2 or 5 × 10^k."""
    steps = sorted(m * 10.0 ** k for k in range(-2, 7) for m in (1, 2, 5))
    step = next((st for st in steps if math.ceil(v / st) <= 6), steps[-1])
    return [round(i * step, 6) for i in range(max(1, math.ceil(v / step)) + 1)]


def _span(values: list[float]) -> tuple[float, float]:
    """An axis around `values` with a quarter of their range (at least 0.02) of margin each side, ends on 0.02s."""
    lo, hi = min(values), max(values)
    margin = max(0.02, (hi - lo) / 4)
    return round((lo - margin) * 50) / 50, round((hi + margin) * 50) / 50

"""The race: plain (AR) and speculative (SS) decoding of one prompt on the same engine, interleaved one
forward pass each in turn so neither has the machine to itself, each timed on its own (the engine's
per-decoding `wall_s` counts only its own `step()` calls).

    for view in race(engine, prompt, cfg, lock):   # a RaceView after every few passes
        show(view)

Rendering helpers turn a RaceView into HTML; `view_from_trace` rebuilds one from a recorded trace
(replay, no model needed). Nothing here touches Gradio.
"""

from __future__ import annotations

import html
import math
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from specstream_core.decode import DecodeConfig

from .figures import checked, is_speculative

STEP_TINTS = ("#cfe8ff", "#d7f5d0", "#ffe3c2", "#ead7ff", "#fff3b0", "#ffd6e0")
REPLACEMENT = "\ufffd"


@dataclass
class Piece:
    text: str
    step: int  # the forward pass that produced the token
    bonus: bool = False  # the pass's bonus token (the model's own choice after the accepted drafts)
    drafts: int = 0  # draft tokens that pass accepted


@dataclass
class SideView:
    pieces: list[Piece] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    done: bool = False

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


@dataclass
class RaceView:
    ar: SideView
    ss: SideView
    sampling: bool = False
    stream_mode: str = "lossless"
    elapsed_s: float = 0.0
    finished: bool = False
    replay: bool = False
    trace: dict | None = None  # the speculative run's trace, on the final view


class Detokenizer:
    """Incremental text of a growing token list: each token's piece is what it adds to the full decode,
    so the pieces concatenate to exactly the tokenizer's text. Incomplete UTF-8 is held back."""

    def __init__(self, decode: Callable[[list[int]], str]):
        self.decode = decode
        self.ids: list[int] = []
        self.text = ""

    def add(self, token: int, final: bool = False) -> str:
        self.ids.append(token)
        full = self.decode(self.ids)
        if full.endswith(REPLACEMENT) and not final:
            return ""
        common = len(self.text) if full.startswith(self.text) else _common_prefix(full, self.text)
        piece = full[common:]
        self.text = full
        return piece


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Side:
    def __init__(self, decoding, decode: Callable[[list[int]], str]):
        self.decoding = decoding
        self.detok = Detokenizer(decode)
        self.pieces: list[Piece] = []

    def step(self, lock) -> None:
        index = self.decoding.forward_passes
        with lock:  # the engine's model is shared by every session: one forward pass at a time
            tokens = self.decoding.step()
        drafts = max(0, len(tokens) - 1)
        for i, tok in enumerate(tokens):
            final = self.decoding.done and i == len(tokens) - 1
            self.pieces.append(Piece(self.detok.add(tok, final), index, bonus=i == len(tokens) - 1, drafts=drafts))

    def view(self) -> SideView:
        return SideView(list(self.pieces), self.decoding.stats(), self.decoding.done)


def race(engine, prompt, cfg: DecodeConfig, lock=None, min_interval: float = 0.1,
         attention_layers: tuple[int, ...] = ()) -> Iterator[RaceView]:
    """Run both decoders in turn, yielding a RaceView at most every `min_interval` seconds and at the
    end. The final view's `trace` attribute is the speculative run's trace, with the baseline's output
    and stats under meta.baseline."""
    lock = lock if lock is not None else nullcontext()
    ss_cfg = replace(cfg, mode="ss", trace=True, attention_layers=attention_layers)
    ar_cfg = replace(cfg, mode="ar", trace=False, attention_layers=())
    sides = {"ar": Side(engine.start(prompt, ar_cfg), engine.decode_text),
             "ss": Side(engine.start(prompt, ss_cfg), engine.decode_text)}
    stream_mode = getattr(getattr(engine.streams, "cfg", None), "mode", "lossless")
    t0, last = time.perf_counter(), 0.0
    order = ["ar", "ss"]

    def snapshot(finished=False) -> RaceView:
        return RaceView(sides["ar"].view(), sides["ss"].view(), sampling=cfg.temperature > 0,
                        stream_mode=stream_mode, elapsed_s=time.perf_counter() - t0, finished=finished)

    while not all(s.decoding.done for s in sides.values()):
        for name in order:  # alternate who goes first, so neither always runs on a warm cache
            if not sides[name].decoding.done:
                sides[name].step(lock)
        order.reverse()
        now = time.perf_counter() - t0
        if now - last >= min_interval:
            last = now
            yield snapshot()
    final = snapshot(finished=True)
    trace = sides["ss"].decoding.trace
    ar = sides["ar"].decoding
    trace["meta"]["baseline"] = {"mode": "ar", "output": {"text": engine.decode_text(ar.output),
                                                          "token_ids": list(ar.output)}, "stats": ar.stats()}
    trace["meta"]["lab"] = {"stream_mode": stream_mode, "elapsed_s": round(final.elapsed_s, 4),
                            "pieces": [p.text for p in final.ss.pieces]}
    final.trace = trace
    yield final


def view_from_trace(trace: dict) -> RaceView:
    """A finished RaceView rebuilt from a trace (speculative side from its steps, baseline from meta)."""
    trace = checked(trace)
    texts = (trace["meta"].get("lab") or {}).get("pieces")
    pieces = []
    for i, step in enumerate(trace["steps"]):
        emitted = step["emitted"]
        node_text = {n["token"]: n.get("text", "") for n in step["nodes"]}
        drafts = max(0, len(emitted) - 1)
        for k, tok in enumerate(emitted):
            is_bonus = k == len(emitted) - 1
            text = (step.get("bonus") or {}).get("text", "") if is_bonus else node_text.get(tok, "")
            pieces.append(Piece(str(text), i, bonus=is_bonus, drafts=drafts))
    if isinstance(texts, list) and len(texts) == len(pieces) and all(isinstance(t, str) for t in texts):
        for p, t in zip(pieces, texts):  # the live run's exact incremental detokenisation
            p.text = t
    ss = SideView(pieces, dict(trace["stats"]), True)
    base = trace["meta"].get("baseline")
    ar = SideView(done=True)
    if isinstance(base, dict) and isinstance(base.get("output"), dict):
        ar = SideView([Piece(str(base["output"].get("text", "")), 0)], dict(base.get("stats") or {}), True)
    temp = trace["meta"].get("temperature", 0)
    mode = trace["meta"].get("stream_mode") or (trace["meta"].get("lab") or {}).get("stream_mode") or "lossless"
    if not is_speculative(trace):  # a plain trace: show it on the baseline side
        ar, ss = SideView(pieces, dict(trace["stats"]), True), SideView(done=True)
    return RaceView(ar, ss, sampling=bool(temp and temp > 0), stream_mode=str(mode), finished=True, replay=True,
                    elapsed_s=float((trace["meta"].get("lab") or {}).get("elapsed_s", 0.0) or 0.0))


# ---- rendering -----------------------------------------------------------------------------
def render_text(side: SideView, tinted: bool, placeholder: str = "") -> str:
    if not side.pieces:
        return f'<div class="lab-text lab-empty">{html.escape(placeholder)}</div>'
    if not tinted:
        return f'<div class="lab-text">{html.escape(side.text)}</div>'
    spans = []
    for p in side.pieces:
        colour = STEP_TINTS[p.step % len(STEP_TINTS)]
        title = f"pass {p.step}: " + (f"{p.drafts} draft token(s) accepted + bonus" if p.drafts else "bonus only")
        cls = "tok bonus" if p.bonus and p.drafts else "tok"
        style = f"background:{colour}" + (";box-shadow:inset 0 -2px 0 #ff9f1c" if p.bonus and p.drafts else "")
        spans.append(f'<span class="{cls}" style="{style}" title="{html.escape(title)}" '
                     f'data-step="{p.step}">{html.escape(p.text)}</span>')
    return f'<div class="lab-text">{"".join(spans)}</div>'


def number(value) -> float:
    """A stat as a finite float (0 for anything else): what reaches the page is a number, never text
    from a trace."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)


def tau(stats: dict) -> float:
    passes = number(stats.get("forward_passes"))
    return number(stats.get("new_tokens")) / passes if passes else 0.0


def render_meters(view: RaceView) -> str:
    def cell(side: SideView, name: str) -> str:
        s = {k: number(side.stats.get(k)) for k in ("new_tokens", "forward_passes", "tokens_per_s", "wall_s")}
        return (f'<tr><th>{name}</th><td>{s["new_tokens"]:.0f}</td><td>{s["forward_passes"]:.0f}</td>'
                f'<td>{tau(side.stats):.2f}</td><td>{s["tokens_per_s"]:.1f}</td><td>{s["wall_s"]:.2f} s</td>'
                f'<td>{"done" if side.done else "running…"}</td></tr>')

    label = "replayed trace" if view.replay else f"elapsed {number(view.elapsed_s):.2f} s (both, interleaved)"
    return ('<table class="lab-meters"><tr><th></th><th>tokens</th><th>forward passes</th><th>τ</th>'
            '<th>tokens/s</th><th>own time</th><th></th></tr>'
            f'{cell(view.ar, "plain (AR)")}{cell(view.ss, "speculative (SS)")}</table>'
            f'<div class="lab-note">{label}</div>')


def speedup(view: RaceView) -> float | None:
    a = {k: number(view.ar.stats.get(k)) for k in ("wall_s", "new_tokens")}
    s = {k: number(view.ss.stats.get(k)) for k in ("wall_s", "new_tokens")}
    if not (a["wall_s"] and s["wall_s"] and a["new_tokens"] and s["new_tokens"]):
        return None
    if a["new_tokens"] == s["new_tokens"]:
        return a["wall_s"] / s["wall_s"]
    return (s["new_tokens"] / s["wall_s"]) / (a["new_tokens"] / a["wall_s"])  # tokens/s ratio


def render_speedup(view: RaceView) -> str:
    if not view.finished:
        return '<div class="lab-speedup pending">racing…</div>'
    x = speedup(view)
    if x is None:
        return '<div class="lab-speedup pending">no speedup: this trace has no baseline run</div>'
    a = {k: number(view.ar.stats.get(k)) for k in ("wall_s", "new_tokens", "forward_passes")}
    s = {k: number(view.ss.stats.get(k)) for k in ("wall_s", "new_tokens", "forward_passes")}
    cr = a["forward_passes"] / s["forward_passes"] if s["forward_passes"] else 0.0
    basis = ("wall-clock, same output length" if a["new_tokens"] == s["new_tokens"]
             else "tokens/s ratio (the outputs have different lengths)")
    return (f'<div class="lab-speedup"><span class="lab-big">{x:.2f}×</span> speedup'
            f'<div class="lab-note">AR {a["wall_s"]:.2f} s / SS {s["wall_s"]:.2f} s · {basis} · '
            f'call reduction {cr:.2f}× · τ = {tau(view.ss.stats):.2f} · same device, interleaved pass by pass'
            '</div></div>')


def outputs_equal(view: RaceView) -> bool:
    return view.ar.text == view.ss.text


def render_badge(view: RaceView) -> str:
    if not view.finished:
        return '<div class="lab-badge pending">comparing when both finish…</div>'
    if not view.ar.pieces or not view.ss.pieces:
        return '<div class="lab-badge pending">only one side recorded</div>'
    if outputs_equal(view):
        why = ("greedy decoding: speculative streaming is lossless — every token is the base model's own choice"
               if not view.sampling else "sampling, yet the same text this time")
        return f'<div class="lab-badge equal" data-equal="true">✔ identical outputs<div class="lab-note">{why}</div></div>'
    if view.sampling:
        why = ("expected in sampling mode: both decoders sample from exactly the base model's distribution, but "
               "tree rejection sampling consumes random numbers differently, so individual samples differ even "
               "with the same seed")
    else:
        why = "unexpected in greedy mode — please report this run's trace"
    return f'<div class="lab-badge differ" data-equal="false">≠ outputs differ<div class="lab-note">{why}</div></div>'


def new_lock() -> threading.Lock:
    return threading.Lock()

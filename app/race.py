"""The race: the lanes (`lanes.py`: plain decoding, speculative streaming at two drafts, prompt lookup, Medusa heads,
assisted generation) decode one prompt on the same engine, interleaved one forward pass each per round, the order
rotating, so none has the machine to itself, each timed on its own: a lane's `wall_s` counts only its own `step()`
calls, on a clock that waits for the device (`devices.SyncTimer`: on CUDA a pass's queued work is charged to the
lane that queued it, not to another one).

    for view in race(engine, prompt, cfg, lock, lanes=["fast", "medusa"]):   # a RaceView after every few passes
        show(view)

`render.py` and `lane_render.py` turn a RaceView into HTML; `view_from_trace` rebuilds one from a recorded trace
(replay, no model needed). Nothing here touches Gradio.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from specstream_core.decoding.config import DecodeConfig
from specstream_core.decoding.mismatch import difference_at, first_difference
from specstream_core.kernels.linears import rowinv
from specstream_core.errors import SpecstreamError
from specstream_core.model import compat, exactness
from specstream_core.model.devices import SyncTimer

from . import lanes as lanes_
from .traces import checked, is_speculative

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
    token_ids: list[int] = field(default_factory=list)
    identical: bool | None = None  # its tokens are plain decoding's (None: not known yet)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


@dataclass
class RaceView:
    ar: SideView  # plain decoding
    ss: SideView  # the lane the per-pass views follow (`shown`)
    sampling: bool = False
    stream_mode: str = "lossless"
    elapsed_s: float = 0.0
    finished: bool = False
    replay: bool = False
    trace: dict | None = None  # the shown lane's trace, on the final view
    precision: str = ""  # what actually ran (the engine's, or the trace's)
    device: str = ""
    exact: bool | None = None  # the engine's precision makes speculative output equal plain (None: unknown)
    difference: dict | None = None  # where greedy outputs part, and the margin there (`mismatch.difference_at`)
    linears: str = ""  # what the Linears run on: the C kernel's build, or torch (and why, on a CPU without it)
    lanes: dict[str, SideView] = field(default_factory=dict)  # every raced lane, plain first (ar and ss among them)
    shown: str = "fast"
    skipped: dict[str, str] = field(default_factory=dict)  # lanes left out of the race, and why
    plain_equals: str = ""  # what plain decoding's output equals at this precision (`exactness`)
    equals: str = ""  # a replayed trace's own label: what its lane's output equals
    traces: dict[str, dict] = field(default_factory=dict)  # final: every speculative lane's trace
    live: dict | None = None  # while racing: the shown lane's trace so far (`live_trace`)


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
    def __init__(self, decoding, decode: Callable[[list[int]], str], timer: SyncTimer | None = None):
        self.decoding = decoding
        self.detok = Detokenizer(decode)
        self.pieces: list[Piece] = []
        self.timer = timer or SyncTimer()
        self.wall_s = 0.0  # this side's steps, device work included

    def step(self, lock) -> None:
        index = self.decoding.forward_passes
        with lock:  # the engine's model is shared by every session: one forward pass at a time
            with self.timer:
                tokens = self.decoding.step()
        self.wall_s += self.timer.elapsed
        drafts = max(0, len(tokens) - 1)
        for i, tok in enumerate(tokens):
            final = self.decoding.done and i == len(tokens) - 1
            self.pieces.append(Piece(self.detok.add(tok, final), index, bonus=i == len(tokens) - 1, drafts=drafts))

    def stats(self) -> dict:
        """The decoding's stats, timed by the race's synchronizing clock."""
        stats = self.decoding.stats()
        stats["wall_s"] = self.wall_s
        stats["tokens_per_s"] = stats["new_tokens"] / self.wall_s if self.wall_s else 0.0
        return stats

    def view(self) -> SideView:
        return SideView(list(self.pieces), self.stats(), self.decoding.done, list(self.decoding.output))


def race(engine, prompt, cfg: DecodeConfig, lock=None, min_interval: float = 0.1,
         attention_layers: tuple[int, ...] = (), lanes=lanes_.DEFAULT) -> Iterator[RaceView]:
    """Run the lanes (`app/lanes.py`; plain decoding always among them) in turn, one forward pass each per round,
    the order rotating every round, yielding a RaceView at most every `min_interval` seconds and at the end. The
    final view's `traces` are the speculative lanes' traces, each with plain decoding's output and stats under
    meta.baseline and every lane's result under meta.lab.lanes; the stream lanes' carry the stream attention maps
    of `attention_layers` (`_graft_attention`: captured after the race, so that capturing them does not slow a
    lane down). `trace` is the shown lane's (`lanes.shown_lane`)."""
    lock = lock if lock is not None else nullcontext()
    runs, skipped = lanes_.start_lanes(engine, prompt, cfg, lanes)
    device = getattr(engine, "device", "cpu")
    sides = {k: Side(dec, engine.decode_text, SyncTimer(device)) for k, (_, dec) in runs.items()}
    shown = lanes_.shown_lane(sides)
    if shown is None:
        raise SpecstreamError("no lane besides plain decoding can race here: "
                              + "; ".join(f"{lanes_.LABELS[k]}: {why}" for k, why in skipped.items()))
    common = {"sampling": cfg.temperature > 0, "precision": str(getattr(engine, "precision", "")),
              "stream_mode": getattr(getattr(engine.streams, "cfg", None), "mode", "lossless"),
              "device": str(device), "exact": getattr(engine, "exact", None), "linears": linears_shown(engine),
              "shown": shown, "skipped": skipped, "plain_equals": exactness.for_engine(engine, runs["plain"][0])}
    t0, last, turn = time.perf_counter(), 0.0, 0
    order = list(sides)

    def snapshot(finished=False) -> RaceView:
        views = {k: s.view() for k, s in sides.items()}
        return RaceView(views["plain"], views[shown], elapsed_s=time.perf_counter() - t0, finished=finished,
                        lanes=views, live=None if finished else live_trace(sides[shown].decoding), **common)

    while not all(s.decoding.done for s in sides.values()):
        first = turn % len(order)  # rotate who goes first, so none always runs on a warm cache
        for name in order[first:] + order[:first]:
            if not sides[name].decoding.done:
                sides[name].step(lock)
        turn += 1
        now = time.perf_counter() - t0
        if now - last >= min_interval:
            last = now
            yield snapshot()
    final = snapshot(finished=True)
    plain = final.ar.token_ids
    for view in final.lanes.values():
        view.identical = view.token_ids == plain
    if cfg.temperature == 0:
        final.difference = _difference(engine, prompt, plain, final.ss.token_ids, lock)
    _finish_traces(engine, prompt, final, sides, runs, attention_layers, lock)
    yield final


def live_trace(decoding) -> dict | None:
    """The trace of a running decoding as it stands (its passes so far), for the live tree and τ views."""
    trace = decoding.trace
    if trace is None:
        return None
    stats = decoding.stats()
    return {**trace, "steps": list(trace["steps"]), "output": {"text": "", "token_ids": list(decoding.output)},
            "stats": {k: stats[k] for k in ("forward_passes", "new_tokens")}}


def _finish_traces(engine, prompt, final: RaceView, sides: dict, runs: dict, attention_layers, lock) -> None:
    """Each speculative lane's trace, completed: the synchronized times, plain decoding's output and stats
    (meta.baseline), every lane's result (meta.lab.lanes) and, on the stream lanes, the attention maps."""
    plain = sides["plain"]
    baseline = {"mode": "ar", "output": {"text": engine.decode_text(plain.decoding.output),
                                         "token_ids": list(plain.decoding.output)}, "stats": plain.stats()}
    table = [{"lane": k, "stats": {n: v.stats.get(n) for n in ("forward_passes", "new_tokens", "wall_s",
                                                                "tokens_per_s")}, "identical": v.identical}
             for k, v in final.lanes.items()]
    for key, side in sides.items():
        if key == "plain":
            continue
        trace = side.decoding.trace
        trace["stats"].update({k: final.lanes[key].stats[k] for k in ("wall_s", "tokens_per_s")})
        if key in lanes_.STREAM_LANES:
            _graft_attention(engine, prompt, replace(runs[key][0], attention_layers=attention_layers), lock, trace)
        trace["meta"]["baseline"] = baseline
        trace["meta"]["lab"] = {"stream_mode": final.stream_mode, "elapsed_s": round(final.elapsed_s, 4),
                                "pieces": [p.text for p in side.pieces], "lane": key, "lanes": table}
        final.traces[key] = trace
    final.trace = final.traces[final.shown]


def linears_shown(engine) -> str:
    """'rowinv-avx512' (the C kernel), 'torch' on a GPU, or 'torch (…why the kernel is not here…)' on a CPU
    (a Space without a C compiler runs this path: the lab says so)."""
    model = getattr(engine, "model", None)
    if model is None or not hasattr(model, "config"):
        return ""
    label = rowinv.linears_label(model)
    if label == "torch" and str(getattr(engine, "device", "cpu")) == "cpu" and not rowinv.available():
        label += f" ({rowinv.unavailable_reason() or 'no C kernel on this host'})"
    if not hasattr(compat.causal_lm(model), "model"):
        return label
    path = compat.layer_path(model)  # the decoder layers: the kernel's whole-layer steps, or the modules and why
    return label + f" · layers: {path['path']}" + (f" ({path['why']})" if path["path"] == "modules" else "")


def _difference(engine, prompt, plain: list[int], spec: list[int], lock) -> dict | None:
    """Where greedy plain and speculative outputs part, with the plain pass's logit margin there."""
    if first_difference(plain, spec) is None:
        return None
    with lock:
        return difference_at(engine, engine.encode(prompt) if isinstance(prompt, str) else prompt, plain, spec)


def _graft_attention(engine, prompt, cfg: DecodeConfig, lock, trace: dict) -> None:
    """Put the attention maps of cfg.attention_layers into the race's speculative trace, from a second,
    untimed run of the same decoding. Capturing hooks the layers, which takes them off their fast path: in
    the race it would make speculative decoding look slower than it is, and in a pass it rounds differently,
    enough to change later drafts (a rerun capturing in its passes left the race's drafts at the 7th of 42
    passes of a story prompt on the default model). So the rerun captures apart (`Decoding.capture_apart`): each pass
    runs as in the race, the maps come from a capturing pass of its own just before it. A greedy or seeded
    run then repeats the race's steps exactly; a step that differs all the same gets no maps."""
    if not cfg.attention_layers:
        return
    again = engine.start(prompt, cfg)
    again.capture_apart = True
    while not again.done:
        with lock:
            again.step()
    steps = again.trace["steps"]
    if len(steps) != len(trace["steps"]):
        return
    for mine, theirs in zip(trace["steps"], steps):
        if ((mine["emitted"], mine["accepted"]) == (theirs["emitted"], theirs["accepted"])
                and (theirs["attention"] or {}).get("layers")):
            mine["attention"] = theirs["attention"]


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
    view = RaceView(ar, ss, sampling=bool(temp and temp > 0), stream_mode=str(mode), finished=True, replay=True,
                    elapsed_s=float((trace["meta"].get("lab") or {}).get("elapsed_s", 0.0) or 0.0),
                    precision=str(trace["meta"].get("precision", "")), device=str(trace["meta"].get("device", "")))
    plain = (base or {}).get("output", {}).get("token_ids") if isinstance(base, dict) else None
    spec = (trace.get("output") or {}).get("token_ids")
    if isinstance(plain, list) and isinstance(spec, list) and (at := first_difference(plain, spec)) is not None:
        view.difference = {"position": at, "plain_token": plain[at], "speculative_token": spec[at]}
    _lanes_from_trace(view, trace, plain, spec)
    return view


def _lanes_from_trace(view: RaceView, trace: dict, plain, spec) -> None:
    """The lanes of a recorded race (meta.lab.lanes: every lane's stats and check; this trace's own lane in
    full); a two-lane trace: plain decoding and speculative streaming."""
    lab = trace["meta"].get("lab") or {}
    lane = lab.get("lane")  # a trace's text: only a known lane's key is kept
    view.shown = lane if lane in lanes_.LABELS else ("fast" if is_speculative(trace) else "plain")
    view.equals = trace["meta"].get("equals", "")
    if isinstance(plain, list) and isinstance(spec, list):
        view.ss.identical = plain == spec
    view.lanes = {"plain": view.ar}
    for row in lab.get("lanes") or []:
        if row["lane"] in lanes_.LABELS and row["lane"] not in view.lanes:
            view.lanes[row["lane"]] = SideView(stats=dict(row["stats"]), done=True, identical=row.get("identical"))
    if view.shown != "plain":
        view.lanes[view.shown] = view.ss

def number(value) -> float:
    """A stat as a finite float (0 for anything else): what reaches the page is a number, never text
    from a trace."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)


def tau(stats: dict) -> float:
    passes = number(stats.get("forward_passes"))
    return number(stats.get("new_tokens")) / passes if passes else 0.0


def speedup(view: RaceView) -> float | None:
    a = {k: number(view.ar.stats.get(k)) for k in ("wall_s", "new_tokens")}
    s = {k: number(view.ss.stats.get(k)) for k in ("wall_s", "new_tokens")}
    if not (a["wall_s"] and s["wall_s"] and a["new_tokens"] and s["new_tokens"]):
        return None
    if a["new_tokens"] == s["new_tokens"]:
        return a["wall_s"] / s["wall_s"]
    return (s["new_tokens"] / s["wall_s"]) / (a["new_tokens"] / a["wall_s"])  # tokens/s ratio


def outputs_equal(view: RaceView) -> bool:
    return view.ar.text == view.ss.text



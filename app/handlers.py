"""The lab's event handlers, at module level: each takes the `Lab` (its components, engine cache and
admission gates) first, then what Gradio passes. `ui.build_demo` lays the page out and wires these.

The views are built as {component name: value} (plain, picklable data) and keyed by the components at
the edge (`_keyed`): the race itself runs in `run_race`, which takes and yields plain data only, so that
ZeroGPU can run it in its GPU worker (app/zerogpu.py); the admission gates stay in this process.

Every handler catches everything: a visitor sees one line (`render.message`), the log keeps the rest.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import weakref
from dataclasses import dataclass
from types import SimpleNamespace

import gradio as gr

from specstream_core.decoding.config import DecodeConfig
from specstream_core.decoding.trace import Trace, load_trace, save_trace, validate
from specstream_core.errors import SpecstreamError

from . import figures, lanes, limits, zerogpu
from .admission import Admission, client_keys
from .explain import explain_step, most_telling_step
from .models import EngineCache, ModelSpec, recommended_for, spec_gamma
from .presets import trace_path
from .race import RaceView, SideView, race, view_from_trace
from .lane_render import lanes_note, render_lane_badge, render_lane_table, render_lane_texts
from .render import message, mode_help, model_info, render_speedup, render_text, selection_html

log = logging.getLogger("specstream.lab")

# engine caches by Lab.key: what the GPU worker reaches without it crossing the process boundary (a forked
# worker inherits this module's globals; the cache holds locks, which cannot be pickled). Weak: a lab's
# demo keeps its cache alive, and a discarded demo frees its engines.
CACHES: weakref.WeakValueDictionary[str, EngineCache] = weakref.WeakValueDictionary()


@dataclass(repr=False)
class Lab:
    """One demo's server-side pieces: components (`c.<name>`), engines, admission gates."""
    specs: dict[str, ModelSpec]
    cache: EngineCache
    races: Admission
    uploads: Admission
    c: SimpleNamespace
    demo: gr.Blocks | None = None
    presets: dict[str, str] | None = None  # label -> prompt
    key: str = ""  # this lab's engine cache in CACHES

    def __post_init__(self):
        self.key = self.key or f"lab-{id(self.cache):x}"
        CACHES[self.key] = self.cache


# the outputs of a race, an upload, a shared link and a recorded run, in the page's order: ui.py wires these names
# (`outputs_all`), `all_views` gives each a value
RACE_VIEWS = ("ar_out", "ss_out", "meters", "speed", "badge", "lanes_out", "ss_head")
STEP_VIEWS = ("tree_plot", "attn_plot", "mask_plot", "explain", "layer_dd", "head_dd")
OUTPUTS_ALL = (*RACE_VIEWS, *STEP_VIEWS, "accept_plot", "trace_state", "step", "msg", "download", "view_lane",
               "lane_traces")
SELECTION = ("ar_out", "ss_out", "accept_plot")  # the selected pass, marked in both texts and on the τ chart


def _keyed(lab: Lab, views: dict) -> dict:
    """{component name: value} -> {component: value}, what Gradio takes."""
    return {getattr(lab.c, name): value for name, value in views.items()}


def _check(deadline: float | None) -> None:
    """The per-event time limit of a replay, checked between its phases (each is bounded by the
    trace Limits)."""
    if deadline is not None and time.monotonic() > deadline:
        raise SpecstreamError(f"showing this trace took longer than this host's limit of {limits.UPLOAD_TIME_LIMIT_S:g} s")


def _index(value) -> int:
    """The step slider's value as a pass index (a client may send anything)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecstreamError("the forward pass must be a whole number") from None


def views_of_step(trace, index, layer=None, head=None, deadline=None, ss: SideView | None = None) -> dict:
    """The views of the selected pass, the speculative text and the acceptance chart with that pass marked
    included. ss: the speculative side to render (a live race's own), else rebuilt from the trace."""
    layers, heads = figures.attention_choices(trace, index)
    layer = layer if layer in layers else (layers[-1] if layers else None)
    head = head if head in heads else ("mean" if heads else None)
    out = {"tree_plot": figures.tree_figure(trace, index)}
    _check(deadline)
    out["attn_plot"] = figures.attention_figure(trace, index, layer, head)
    _check(deadline)
    out["mask_plot"] = figures.mask_figure(trace, index)
    _check(deadline)
    out.update({"explain": explain_step(trace, index), "layer_dd": gr.update(choices=layers, value=layer),
                "head_dd": gr.update(choices=heads, value=head)})
    shown = view_from_trace(trace)  # the selected pass outlined in both texts
    out.update(selection_html(shown.ar, shown.ss if ss is None else ss, index))
    out["accept_plot"] = figures.acceptance_figure(trace, selected=index)
    _check(deadline)
    return out


def race_html(view: RaceView) -> dict:
    return {"ar_out": render_text(view.ar, False, "…"), "ss_out": render_text(view.ss, True, "…"),
            "meters": render_lane_table(view), "speed": render_speedup(view), "badge": render_lane_badge(view),
            "lanes_out": render_lane_texts(view), "ss_head": lane_heading(view.shown)}


def lane_heading(lane: str) -> str:
    """The heading over the speculative text: the lane's name (a known lane only: a trace's text never reaches it)."""
    return f"### {lanes.LABELS.get(lane, 'Speculative streaming')}"


def live_views(view: RaceView) -> dict:
    """The shown lane's tree and τ chart as its passes arrive (its latest pass selected)."""
    if not view.live or len(view.live["steps"]) < 2:
        return {}
    trace = validate(view.live)
    last = len(trace["steps"]) - 1
    return {"tree_plot": figures.tree_figure(trace, last), "accept_plot": figures.acceptance_figure(trace, selected=last),
            "step": gr.update(minimum=0, maximum=last, value=last, interactive=False)}


def lane_choice(view: RaceView) -> dict:
    """The pass views' lane picker after a race: its speculative lanes, the shown one chosen."""
    choices = [(lanes.LABELS[k], k) for k in view.traces if k in lanes.LABELS] or [
        (lanes.LABELS.get(view.shown, "Speculative streaming"), view.shown)]
    return {"view_lane": gr.update(choices=choices, value=view.shown, interactive=len(choices) > 1)}


def all_views(trace: Trace, view: RaceView, note: str, download, deadline=None, traces: dict | None = None) -> dict:
    """A value for every name in OUTPUTS_ALL (the one place that builds them: a finished race, an upload, a shared
    link, a recorded run), the most telling pass selected. download: the trace download's update; traces: every
    lane's packed trace (by default this trace's own lane only)."""
    index = most_telling_step(trace)
    out = race_html(view)
    out.update(views_of_step(trace, index, deadline=deadline, ss=view.ss))
    out.update(lane_choice(view))
    out.update({"trace_state": trace.pack(), "msg": note, "download": download,
                "lane_traces": traces or {view.shown: trace.pack()},
                "step": gr.update(minimum=0, maximum=max(1, len(trace["steps"]) - 1), value=index, step=1,
                                  interactive=True)})
    return out


def on_run(lab: Lab, model_name, mode, text, topk_v, prune_v, budget_v, lookup_v, temp_v, seed_v, max_new_v,
           request: gr.Request = None, lanes_v=None):
    """Admission here (a race holds as many of its address's lane slots as it has lanes), the race in `run_race`
    (on ZeroGPU: in the GPU worker, with plain arguments only)."""
    try:
        chosen = limits.check_lanes(lanes_v, max_new_v)
        with lab.races.enter(client_keys(request, limits.TRUST_FORWARDED), weight=len(chosen)), \
                tempfile.TemporaryDirectory(prefix="specstream-race-") as tmp:
            # the trace file lives only until Gradio has copied it into its cache (delete_cache ages
            # that copy out): the generator resumes after each yield is sent, and the with-block ends
            for views in run_race(lab.key, model_name, mode, text, topk_v, prune_v, budget_v, lookup_v, temp_v,
                                  seed_v, max_new_v, tmp, chosen):
                yield _keyed(lab, views)
    except SpecstreamError as exc:
        yield {lab.c.msg: message(str(exc))}
    except gr.Error as exc:  # ZeroGPU's own refusals (quota, no GPU free) and worker errors
        yield {lab.c.msg: message(str(getattr(exc, "message", exc)))}
    except Exception as exc:  # never a stack trace in the page; the log keeps it
        log.exception("race failed")
        yield {lab.c.msg: message(f"internal error ({type(exc).__name__}); see the server log")}


def race_payloads(key: str, model_name, mode, text, topk_v, prune_v, budget_v, lookup_v, temp_v, seed_v,
                  max_new_v, tmp: str, chosen=lanes.DEFAULT):
    """The race as {component name: value} updates: plain arguments in, plain data out (`run_race`)."""
    try:
        yield from race_views(CACHES[key], model_name, mode, text, topk_v, prune_v, budget_v, lookup_v, temp_v,
                              seed_v, max_new_v, tmp, chosen)
    except SpecstreamError as exc:
        yield {"msg": message(str(exc))}
    except Exception as exc:  # never a stack trace in the page; the log keeps it
        log.exception("race failed")
        yield {"msg": message(f"internal error ({type(exc).__name__}); see the server log")}


# spaces.GPU on a ZeroGPU Space (a forked worker per race; app/zerogpu.py), the stand-in under
# SPECSTREAM_ZEROGPU_SIM, else race_payloads itself
run_race = zerogpu.gpu(duration=120)(race_payloads)


def race_views(cache: EngineCache, model_name, mode, text, topk_v, prune_v, budget_v, lookup_v, temp_v, seed_v,
               max_new_v, tmp, chosen=lanes.DEFAULT):
    limits.check_prompt(text)
    chosen = limits.check_lanes(chosen, max_new_v)
    cfg = limits.lab_decode_config(topk_v, prune_v, budget_v, lookup_v, temp_v, seed_v, max_new_v)
    engine, lock = cache.get(model_name, mode)
    layers = ()
    if engine.streams is not None:
        layers = tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))
    empty = RaceView(SideView(), SideView(), lanes={k: SideView() for k in chosen}, shown=lanes.shown_lane(chosen))
    yield {**race_html(empty), "msg": "", "download": gr.update(value=None, interactive=False),
           "view_lane": gr.update(choices=[(lanes.LABELS[k], k) for k in chosen if k != "plain"], value=empty.shown,
                                  interactive=False)}
    t0 = last_live = time.monotonic()
    for view in race(engine, text, cfg, lock, attention_layers=layers, lanes=chosen):
        if time.monotonic() - t0 > limits.EVENT_TIME_LIMIT_S:
            yield {"msg": message(f"The race was stopped at this host's time limit of "
                                  f"{limits.EVENT_TIME_LIMIT_S:.0f} s; try fewer new tokens.")}
            return
        if not view.finished:
            out = race_html(view)
            if time.monotonic() - last_live >= limits.LIVE_VIEWS_S:  # figures cost more than the texts
                last_live = time.monotonic()
                out.update(live_views(view))
            yield out
            continue
        trace = validate(view.trace)
        path = os.path.join(tmp, f"specstream-trace-{model_name}-{time.strftime('%Y%m%d-%H%M%S')}.json")
        save_trace(trace, path)
        traces = {k: (t if k == view.shown else validate(t)).pack() for k, t in {**view.traces, view.shown: trace}.items()}
        # an update, not a new DownloadButton: a component built here would copy the file into a
        # cache of its own that delete_cache never sweeps
        yield all_views(trace, view, "", gr.update(value=path, interactive=True), traces=traces)


def on_upload(lab: Lab, data, request: gr.Request = None):
    """data: the uploaded bytes (or a path, for direct calls)."""
    if not data:
        return {}
    c = lab.c
    try:
        with lab.uploads.enter(client_keys(request, limits.TRUST_FORWARDED)):
            deadline = time.monotonic() + limits.UPLOAD_TIME_LIMIT_S
            trace = load_trace(data, max_bytes=limits.MAX_UPLOAD_BYTES)
            _check(deadline)
            view = view_from_trace(trace)
            note = message(f"Replaying a trace of {trace['meta'].get('model', '?')} "
                           f"({len(trace['steps'])} passes) — no model involved.", "info")
            # the visitor has the file: no download
            return _keyed(lab, all_views(trace, view, note, gr.update(value=None, interactive=False), deadline))
    except SpecstreamError as exc:
        return {c.msg: message(f"Cannot replay this file: {exc}")}
    except Exception as exc:
        log.exception("replay failed")
        return {c.msg: message(f"Cannot replay this file: it does not follow the trace schema "
                               f"({type(exc).__name__})")}


def on_step(lab: Lab, blob, index, layer, head):
    if blob is None:
        return {}
    try:
        return _keyed(lab, views_of_step(Trace.unpack(blob), _index(index), layer, head))
    except SpecstreamError as exc:
        return {lab.c.msg: message(str(exc))}
    except Exception as exc:
        log.exception("step view failed")
        return {lab.c.msg: message(f"internal error ({type(exc).__name__}); see the server log")}


def on_step_by(lab: Lab, blob, index, layer, head, delta: int):
    """The previous or next pass (the presenter view's ← and →), kept within the trace's passes."""
    if blob is None:
        return {}
    try:
        trace = Trace.unpack(blob)
        new = min(max(_index(index) + delta, 0), len(trace["steps"]) - 1)
        return _keyed(lab, {**views_of_step(trace, new, layer, head), "step": gr.update(value=new)})
    except SpecstreamError as exc:
        return {lab.c.msg: message(str(exc))}
    except Exception as exc:
        log.exception("step view failed")
        return {lab.c.msg: message(f"internal error ({type(exc).__name__}); see the server log")}


def on_prev(lab: Lab, blob, index, layer, head):
    return on_step_by(lab, blob, index, layer, head, -1)


def on_next(lab: Lab, blob, index, layer, head):
    return on_step_by(lab, blob, index, layer, head, 1)


def on_view_lane(lab: Lab, blobs, lane, layer, head):
    """The per-pass views follow another lane of the race (its own trace, kept per session)."""
    if not isinstance(blobs, dict) or lane not in blobs:
        return {lab.c.msg: gr.update()}
    try:
        trace = Trace.unpack(blobs[lane])
        index = most_telling_step(trace)
        out = views_of_step(trace, index, layer, head)
        out.update({"trace_state": blobs[lane], "ss_head": lane_heading(lane), "msg": "",
                    "step": gr.update(minimum=0, maximum=max(1, len(trace["steps"]) - 1), value=index)})
        return _keyed(lab, out)
    except Exception as exc:
        log.exception("lane view failed")
        return {lab.c.msg: message(f"internal error ({type(exc).__name__}); see the server log")}


def on_attention(lab: Lab, blob, index, layer, head):
    if blob is None:
        return {}
    try:
        return {lab.c.attn_plot: figures.attention_figure(Trace.unpack(blob), _index(index), layer, head)}
    except SpecstreamError as exc:
        return {lab.c.msg: message(str(exc))}
    except Exception as exc:
        log.exception("attention view failed")
        return {lab.c.msg: message(f"internal error ({type(exc).__name__}); see the server log")}


def replay_recorded(lab: Lab, label):
    """The preset's recorded trace (assets/smollm2/traces/), replayed in every view: what a cold
    Space shows before any model has run. Validated like an upload."""
    path = trace_path(label) if label else None
    if path is None:
        return {lab.c.msg: gr.update()}  # nothing recorded: change nothing (an empty dict is not a valid return)
    try:
        trace = load_trace(path, max_bytes=limits.MAX_UPLOAD_BYTES)
        view = view_from_trace(trace)
        note = message(f"A recorded run of {trace['meta'].get('model', '?')} on this preset "
                       f"({len(trace['steps'])} passes). Press Run to race it live.", "info")
        return _keyed(lab, all_views(trace, view, note, gr.update(value=path, interactive=True),
                                     time.monotonic() + limits.UPLOAD_TIME_LIMIT_S))
    except Exception:  # a broken bundled file must not break the page
        log.exception("cannot replay the recorded trace %s", path)
        return {lab.c.msg: gr.update()}


def on_preset(lab: Lab, label):
    return {lab.c.prompt: (lab.presets or {}).get(label, ""), **replay_recorded(lab, label)}


def on_prompt(lab: Lab, text):
    """The visitor edited the prompt: the preset dropdown names the preset only while the prompt is its
    text, else it is cleared (a custom prompt)."""
    label = next((k for k, v in (lab.presets or {}).items() if v == text), None)
    return {lab.c.preset_dd: gr.update(value=label)}


def draft_settings(lab: Lab, spec, mode) -> dict:
    rec = recommended_for(spec, mode)  # the stream set's fastest measured tree: the lab's default
    c = lab.c
    return {c.topk: ",".join(map(str, rec["topk"])), c.prune: float(rec["prune_threshold"]),
            c.budget: int(rec["node_budget"]), c.lookup: int(rec["lookup"])}


def lane_picker(spec: ModelSpec | None, mode: str, chosen=None) -> tuple[list, list[str], str]:
    """(the lane choices this model can race, the chosen ones among them, the note: which draft is which and why a
    lane is unavailable). Plain decoding is not a choice: it always races."""
    reasons = lanes.unavailable(spec) if spec is not None else {k: "no model" for k in lanes.LABELS}
    choices = [(label, k) for k, label in lanes.LABELS.items() if k != "plain" and k not in reasons]
    keep = [k for k in (chosen if isinstance(chosen, list) else lanes.DEFAULT) if k in dict(map(reversed, choices))]
    rec = recommended_for(spec, mode)
    fast = DecodeConfig(tree_topk=tuple(rec["topk"]), prune_threshold=float(rec["prune_threshold"]),
                        node_budget=int(rec["node_budget"]), lookup=int(rec["lookup"]))
    gamma = spec_gamma(spec, mode) if spec is not None else 1
    note = lanes_note(reasons, lanes.draft_line(fast) + "; the settings below change it",
                      lanes.draft_line(lanes.teaching_config(fast, gamma)))
    return choices, keep or [k for _, k in choices[:1]], note


def _pickers(lab: Lab, spec, mode, chosen) -> dict:
    choices, value, note = lane_picker(spec, mode, chosen)
    return {lab.c.lanes_cb: gr.update(choices=choices, value=value), lab.c.lanes_why: note}


def on_model(lab: Lab, name, chosen=None):
    spec = lab.specs.get(name) if isinstance(name, str) else None
    modes = spec.modes if spec else ["lossless"]
    radio = gr.Radio(choices=modes, value=modes[0], info=mode_help(modes), visible=len(modes) > 1)
    return {lab.c.mode_radio: radio, lab.c.info: model_info(spec, modes[0]),
            **draft_settings(lab, spec, modes[0]), **_pickers(lab, spec, modes[0], chosen)}


def on_mode(lab: Lab, name, mode, chosen=None):
    spec = lab.specs.get(name) if isinstance(name, str) else None
    return {lab.c.info: model_info(spec, mode), **draft_settings(lab, spec, mode), **_pickers(lab, spec, mode, chosen)}


def on_close(lab: Lab, request: gr.Request):
    """The tab closed: drop its trace now (Gradio alone keeps closed sessions' state an hour)."""
    holder = getattr(lab.demo, "state_holder", None)
    if holder is not None and request is not None and request.session_hash in holder:
        holder.delete_state(request.session_hash)

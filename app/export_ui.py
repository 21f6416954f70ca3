"""The lab's export and share controls and their handlers: the figure pack of the selected pass, the share
link (`?trace=<id>`, app/trace_store.py), the replay controls of the presenter view (the speed and a Play
button; the keys and the timer are render.PRESENTER_JS), and the presets as `gr.Examples`.

ui.py calls `replay_controls`, `export_controls` and `examples` where they sit on the page, and `attach` once
(ui._extensions), which wires them and `on_open` when a page opens (a share link's trace, else the preset's
recorded run).

Stable element ids: replay-play, replay-speed, figure-pack (make), figure-pack-download, share, share-link,
examples.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time

import gradio as gr

from specstream_core.decoding.trace import Trace, save_trace
from specstream_core.errors import SpecstreamError

from . import handlers, limits
from .admission import client_keys
from .export import figure_pack, lane_of, pack_name
from .lanes import LABELS
from .race import view_from_trace
from .render import message
from .trace_store import TraceStore

log = logging.getLogger("specstream.lab")

STORES: dict[str, TraceStore] = {}  # a lab's share store, by Lab.key (server-wide by design: links are shared)


def store_for(lab) -> TraceStore:
    return STORES.setdefault(lab.key, TraceStore())


def replay_controls() -> dict:
    """Play / pause and the replay speed, beside the pass stepper (inside the open Blocks)."""
    with gr.Row(equal_height=True, elem_id="replay-row"):
        play = gr.Button("▶ Play", elem_id="replay-play", size="sm", scale=1, min_width=120)
        speed = gr.Slider(0.5, 10, value=2, step=0.5, label="Replay speed (passes per second; Space plays or "
                          "pauses in the presenter view)", elem_id="replay-speed", scale=6,
                          interactive=True)
    return {"play": play, "speed": speed}


def export_controls() -> dict:
    """The figure pack and the share link, under the trace download (inside the open Blocks)."""
    gr.Markdown("**Figures for slides**: the draft tree, acceptance (τ), stream attention and mask of the selected "
                "pass, as SVG and PNG in one zip. **Share**: a link that reopens this trace on this server.")
    with gr.Row(equal_height=True):
        make = gr.Button("Make the figure pack of this pass", elem_id="figure-pack")
        pack = gr.DownloadButton("Download figure pack (zip)", value=None, elem_id="figure-pack-download",
                                 interactive=False)
        share = gr.Button("Make a share link", elem_id="share")
    link = gr.Textbox("", label="Share link (opens this trace in the lab)", elem_id="share-link",
                      interactive=False, buttons=["copy"])
    return {"make": make, "pack": pack, "share": share, "link": link}


def examples(preset_map: dict[str, str], preset_dd, prompt):
    """The presets as an examples gallery: a click fills the preset and the prompt (`attach` then replays its
    recorded run, as choosing it in the dropdown does)."""
    labels = list(preset_map)
    return gr.Examples([[label, preset_map[label]] for label in labels], [preset_dd, prompt],
                       example_labels=labels, label="Examples: the task presets", examples_per_page=8,
                       elem_id="examples")


def on_pack(lab, blob, index, layer, head, request: gr.Request = None):
    """The figure pack of the selected pass, written for Gradio to serve (then the temporary folder goes)."""
    if blob is None:
        yield {lab.c.msg: message("Run the race or open a trace first: the figure pack draws its passes.", "info")}
        return
    try:
        with lab.uploads.enter(client_keys(request, limits.TRUST_FORWARDED)), \
                tempfile.TemporaryDirectory(prefix="specstream-figures-") as tmp:
            trace = Trace.unpack(blob)
            i = handlers._index(index)
            path = os.path.join(tmp, pack_name(trace, i))
            with open(path, "wb") as f:
                f.write(figure_pack(trace, i, layer, head))
            yield {lab.c.export["pack"]: gr.update(value=path, interactive=True),
                   lab.c.msg: message(f"The figure pack of pass {i}{_of_lane(trace)} is ready: Download figure pack.",
                                      "info")}
    except SpecstreamError as exc:
        yield {lab.c.msg: message(str(exc))}
    except Exception as exc:
        log.exception("figure pack failed")
        yield {lab.c.msg: message(f"internal error ({type(exc).__name__}); see the server log")}


def on_share(lab, blob, request: gr.Request = None):
    """Keep this session's trace in the share store; the link's path is completed in the page (JS)."""
    if blob is None:
        return {lab.c.msg: message("Run the race or open a trace first: the link shares it.", "info")}
    try:
        trace = Trace.unpack(blob)
        trace_id = store_for(lab).put(trace)
        note = message(f"The link reopens this race's trace{_of_lane(trace)}.", "info") if lane_of(trace) else ""
        return {lab.c.export["link"]: f"?trace={trace_id}", lab.c.msg: note}
    except SpecstreamError as exc:
        return {lab.c.msg: message(str(exc))}
    except Exception as exc:
        log.exception("share failed")
        return {lab.c.msg: message(f"internal error ({type(exc).__name__}); see the server log")}


def _of_lane(trace) -> str:
    """' of <lane>' for a lane of a multi-lane race (the lane whose views are shown), else nothing."""
    lane = lane_of(trace)
    return f" of {LABELS[lane]}" if lane else ""


# the share box shows the whole address: this page's, with its query replaced by ?trace=<id>
FULL_LINK = ("(q) => q && q.startsWith('?trace=') ? window.location.origin + window.location.pathname + q : q")


def on_open(lab, label, request: gr.Request = None):
    """A page opens: the shared trace of `?trace=<id>` in every view (with its download), else the
    preset's recorded run (`handlers.replay_recorded`)."""
    params = getattr(request, "query_params", None) or {}
    trace_id = params.get("trace") if hasattr(params, "get") else None
    if trace_id is None:
        yield handlers.replay_recorded(lab, label)
        return
    try:
        with lab.uploads.enter(client_keys(request, limits.TRUST_FORWARDED)), \
                tempfile.TemporaryDirectory(prefix="specstream-shared-") as tmp:
            trace = store_for(lab).get(trace_id)
            note = message(f"A shared trace of {trace['meta'].get('model', '?')} ({len(trace['steps'])} passes), "
                           "replayed with no model involved.", "info")
            path = os.path.join(tmp, f"specstream-trace-{trace_id}.json")
            save_trace(trace, path)
            yield handlers._keyed(lab, handlers.all_views(trace, view_from_trace(trace), note, gr.update(
                value=path, interactive=True), time.monotonic() + limits.UPLOAD_TIME_LIMIT_S))
    except SpecstreamError as exc:
        yield {lab.c.msg: message(f"Cannot open this link: {exc}")}
    except Exception as exc:
        log.exception("opening a shared trace failed")
        yield {lab.c.msg: message(f"Cannot open this link ({type(exc).__name__}); see the server log")}


def attach(lab) -> None:
    """The export controls' events and the page's opening (ui._extensions calls this once, after the race's
    wiring: `lab.c.outputs_all` is every output a race, an upload or an opened trace sets)."""
    c, bind = lab.c, _binder(lab)
    outputs_all = c.outputs_all
    lab.demo.load(bind(on_open), [c.preset_dd], outputs_all, concurrency_limit=limits.UPLOAD_CONCURRENCY,
                  concurrency_id="upload")
    step_inputs = [c.trace_state, c.step, c.layer_dd, c.head_dd]
    c.export["make"].click(bind(on_pack), step_inputs, [c.export["pack"], c.msg],
                           concurrency_limit=limits.UPLOAD_CONCURRENCY, concurrency_id="upload")
    c.export["share"].click(bind(on_share), [c.trace_state], [c.export["link"], c.msg]).then(
        None, [c.export["link"]], [c.export["link"]], js=FULL_LINK)
    # a new race, upload or step makes the pack stale: it is made again on request
    c.step.change(lambda: gr.update(value=None, interactive=False), None, [c.export["pack"]], queue=False,
                  show_progress="hidden")
    c.trace_state.change(lambda: "", None, [c.export["link"]], queue=False, show_progress="hidden")
    c.examples.load_input_event.then(bind(handlers.on_preset), [c.preset_dd], [c.prompt, *outputs_all],
                                     concurrency_limit=limits.UPLOAD_CONCURRENCY, concurrency_id="upload")


def _binder(lab):
    from .ui import _bind  # the one way a handler gets its Lab (ui imports this module at its top)

    return lambda fn: _bind(fn, lab)


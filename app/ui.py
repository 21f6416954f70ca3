"""The lab's Gradio wiring. Figures come from app.figures (pure), the race from app.race; this file
only connects components. Per-session data lives in gr.State; the engine cache is per process.

Stable element ids (tests and embedding rely on them): prompt, run, ar-output, ss-output, speedup,
equal-badge, tree-plot, accept-plot, attn-plot, trace-download, trace-upload (plus mask-plot,
step-slider, lab-message, meters (every lane's row), explain; the lanes: lanes (the picker), lanes-note,
lane-outputs, ss-heading, view-lane; the Benchmarks panel: bench-panel, bench-precision,
bench-reload, bench-summary, bench-plot-0..6, bench-pass-cost-panel (-text, the plot bench-pass-cost), filled from
app/bench_view.py).
"""

from __future__ import annotations

import logging
import os
import threading
import functools
import inspect
from types import SimpleNamespace

import gradio as gr

from . import cache_sweep, export_ui, handlers, limits, zerogpu
from .admission import Admission
from .handlers import Lab
from .lane_render import LANE_CSS
from .limits import LAB_MAX_LOOKUP, LAB_MAX_NEW_TOKENS, MAX_PROMPT_CHARS, MAX_UPLOAD_BYTES, TRACE_TTL_S
from .models import EngineCache, ModelSpec, available_specs, recommended_for
from .presets import presets
from .race import RaceView, SideView
from .render import (CSS, INTRO, LEGEND, PRESENTER_FROM_URL, PRESENTER_JS, PRESENTER_TOGGLE, message, mode_help,
                     model_info, render_meters, render_text)

log = logging.getLogger("specstream.lab")


def _preload(cache: EngineCache, name: str, mode: str) -> None:
    try:
        cache.get(name, mode)
    except Exception:  # reported again, as a message, when a visitor runs it
        log.exception("preloading %s failed", name)


def _inputs(specs: dict[str, ModelSpec], preset_map: dict[str, str]) -> dict:
    """The first screen (inside the open Blocks): the prompt on the left, the race's result on the right
    (speedup, output check, τ and tokens/s: in view without scrolling at 1280×720), the settings folded
    away below."""
    names = list(specs)
    first = specs[names[0]] if names else None
    preset_names = list(preset_map)
    # this session's trace (live run or upload), validated and packed; gone TRACE_TTL_S after its
    # last update, or when the tab closes (on_close)
    trace_state = gr.State(None, time_to_live=TRACE_TTL_S)
    gr.Markdown(INTRO, elem_id="intro")
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=360):
            with gr.Row():
                model_dd = gr.Dropdown(names, value=names[0] if names else None, label="Model",
                                       elem_id="model", interactive=bool(names))
                preset_dd = gr.Dropdown(preset_names, value=preset_names[0] if preset_names else None,
                                        label="Task preset", elem_id="preset")
            prompt = gr.Textbox(preset_map.get(preset_names[0], "") if preset_names else "", lines=3,
                                max_lines=14, label="Prompt", elem_id="prompt", max_length=MAX_PROMPT_CHARS)
            with gr.Row(equal_height=True):
                max_new = gr.Slider(1, LAB_MAX_NEW_TOKENS, value=min(64, LAB_MAX_NEW_TOKENS), step=1,
                                    label="Max new tokens", elem_id="max-new", scale=3)
                run_btn = gr.Button("Run the race", variant="primary", elem_id="run", interactive=bool(names),
                                    scale=2)
            lanes_cb, lanes_why = _lane_picker(first)
            msg = gr.HTML(message("" if names else "No model is configured on this host; upload a trace "
                                  "below to replay a recorded run.", "info"), elem_id="lab-message")
            presenter = gr.Checkbox(False, label="Presenter view: large type, high contrast; ← and → step "
                                    "through the passes (or open the page with ?presenter=1)", elem_id="presenter")
            examples = export_ui.examples(preset_map, preset_dd, prompt)
        with gr.Column(scale=4, min_width=360, elem_id="result"):
            speed = gr.HTML('<div class="lab-speedup pending">speedup appears here</div>', elem_id="speedup")
            badge = gr.HTML('<div class="lab-badge pending">output check appears here</div>', elem_id="equal-badge")
            meters = gr.HTML(render_meters(RaceView(SideView(), SideView())), elem_id="meters")
    settings = _settings(first)
    del settings["first"]
    return {**{k: v for k, v in locals().items() if k != "settings"}, **settings}


def _lane_picker(first: ModelSpec | None):
    """The lanes a visitor races against plain decoding; those this model cannot race are listed with the reason."""
    choices, value, note = handlers.lane_picker(first, first.modes[0] if first else "lossless")
    lanes_cb = gr.CheckboxGroup(choices, value=value, elem_id="lanes", interactive=bool(choices),
                                label="Lanes raced against plain decoding (which always races: every lane is "
                                      "checked against it)")
    return lanes_cb, gr.HTML(note, elem_id="lanes-note")


def _settings(first: ModelSpec | None) -> dict:
    """The draft and sampling settings, in an accordion closed by default."""
    modes = first.modes if first else ["lossless"]
    with gr.Accordion("Settings — draft tree, pruning, prompt lookup, sampling", open=False,
                      elem_id="settings"):
        # one mode offered: nothing to choose, so the radio stays hidden (the model line names the mode)
        mode_radio = gr.Radio(modes, value=modes[0], label="Stream mode", info=mode_help(modes),
                              elem_id="mode", visible=len(modes) > 1)
        info = gr.Markdown(model_info(first, modes[0]), elem_id="model-info")
        first_rec = recommended_for(first, modes[0])
        with gr.Row():
            topk = gr.Textbox(",".join(map(str, first_rec["topk"])), elem_id="topk",
                              label="Per-depth top-k (stream 1, 2, …); the default is the stream set's "
                                    "fastest measured tree")
            budget = gr.Slider(1, 128, value=int(first_rec["node_budget"]), step=1, label="Node budget",
                               elem_id="budget")
        with gr.Row():
            prune = gr.Slider(0.0, 0.5, value=float(first_rec["prune_threshold"]), step=0.01,
                              label="Pruning threshold (0 = off)", elem_id="prune")
            lookup = gr.Slider(0, LAB_MAX_LOOKUP, value=int(first_rec["lookup"]), step=1, elem_id="lookup",
                               label="Prompt-lookup tokens grafted onto the tree (0 = streams only)")
        with gr.Row():
            temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05,
                                    label="Temperature (0 = greedy, lossless check)", elem_id="temperature")
            seed = gr.Number(0, precision=0, label="Seed", elem_id="seed")
    return locals()


def _views(specs: dict[str, ModelSpec]) -> dict:
    """The race's texts, the per-pass views, traces and benchmarks (inside the open Blocks)."""
    with gr.Row():
        with gr.Column():
            gr.Markdown("### Plain decoding (AR)")
            ar_out = gr.HTML(render_text(SideView(), False, "press Run"), elem_id="ar-output")
        with gr.Column():
            ss_head = gr.Markdown("### Speculative streaming · fastest draft", elem_id="ss-heading")
            ss_out = gr.HTML(render_text(SideView(), True, "press Run"), elem_id="ss-output")
            gr.HTML(LEGEND)
    lanes_out = gr.HTML("", elem_id="lane-outputs")  # the race's other lanes, each tinted by pass
    # every speculative lane's trace of the last race (the pass views follow one: view_lane)
    lane_traces = gr.State(None, time_to_live=TRACE_TTL_S)

    gr.Markdown("## Draft tree of one forward pass")
    view_lane = gr.Dropdown([], label="The views below follow the lane", elem_id="view-lane", interactive=False)
    with gr.Row(equal_height=True):
        prev_btn = gr.Button("◀ previous pass", elem_id="pass-prev", size="sm", scale=1, min_width=120)
        step = gr.Slider(0, 1, value=0, step=1, label="Forward pass", elem_id="step-slider", interactive=False,
                         scale=6)
        next_btn = gr.Button("next pass ▶", elem_id="pass-next", size="sm", scale=1, min_width=120)
    replay = export_ui.replay_controls()
    tree_plot = gr.Plot(label="Draft tree", elem_id="tree-plot")
    gr.Markdown("## Acceptance")
    accept_plot = gr.Plot(label="Acceptance", elem_id="accept-plot")
    gr.Markdown("## Stream attention and the multi-stream attention mask")
    with gr.Row():
        layer_dd = gr.Dropdown([], label="Layer", elem_id="layer", interactive=True)
        head_dd = gr.Dropdown([], label="Head", elem_id="head", interactive=True)
    attn_plot = gr.Plot(label="Stream attention", elem_id="attn-plot")
    mask_plot = gr.Plot(label="Attention mask", elem_id="mask-plot")
    with gr.Accordion("How it works — on a real pass of this run", open=True):
        explain = gr.Markdown("Run the race (or upload a trace) to see the method explained on one of its passes.",
                              elem_id="explain")
    gr.Markdown("## Traces\nDownload this run as a trace; upload a trace to replay it in every view, "
                f"no model needed (JSON, at most {MAX_UPLOAD_BYTES / 2**20:g} MB).")
    with gr.Row():
        download = gr.DownloadButton("Download trace (JSON)", value=None, elem_id="trace-download",
                                     interactive=False)
        # binary: the handler gets the bytes (type="filepath" leaves an empty temp file per upload in
        # Gradio's cache, outside delete_cache); the upload itself is aged out by delete_cache
        upload = gr.File(label="Replay a trace", file_types=[".json"], type="binary", elem_id="trace-upload")
    export = export_ui.export_controls()
    bench_parts = _bench_panel()
    return locals()


def _bind(fn, lab: Lab):
    """A module-level handler with its Lab bound: what Gradio sees has the handler's name, its signature
    minus `lab` (so `gr.Request` is still injected) and, for a generator, is one (so it streams)."""
    if inspect.isgeneratorfunction(fn):
        def bound(*args, **kwargs):
            yield from fn(lab, *args, **kwargs)
    else:
        def bound(*args, **kwargs):
            return fn(lab, *args, **kwargs)
    functools.update_wrapper(bound, fn)
    del bound.__wrapped__  # Gradio must read the signature below, not the handler's own
    sig = inspect.signature(fn)
    bound.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])
    return bound


def _wire(lab: Lab) -> None:
    c = lab.c
    step_views = [getattr(c, n) for n in handlers.STEP_VIEWS]
    outputs_all = [getattr(c, n) for n in handlers.OUTPUTS_ALL]  # every handler's values: `handlers.all_views`
    c.step_views, c.outputs_all = step_views, outputs_all  # for the controls other modules attach (`_extensions`)
    selection = [getattr(c, n) for n in handlers.SELECTION]  # the selected pass: both texts and τ
    settings = [c.model_dd, c.mode_radio, c.prompt, c.topk, c.prune, c.budget, c.lookup, c.temperature, c.seed,
                c.max_new]
    c.run_btn.click(_bind(handlers.on_run, lab), [*settings, c.lanes_cb], outputs_all,
                    concurrency_limit=limits.CONCURRENCY, concurrency_id="model")
    c.view_lane.input(_bind(handlers.on_view_lane, lab), [c.lane_traces, c.view_lane, c.layer_dd, c.head_dd],
                      [*step_views, *selection, c.trace_state, c.step, c.ss_head, c.msg])
    c.upload.upload(_bind(handlers.on_upload, lab), [c.upload], outputs_all,
                    concurrency_limit=limits.UPLOAD_CONCURRENCY, concurrency_id="upload")
    step_inputs = [c.trace_state, c.step, c.layer_dd, c.head_dd]
    c.step.input(_bind(handlers.on_step, lab), step_inputs, [*step_views, *selection, c.msg],
                 trigger_mode="always_last")
    for button, fn in ((c.prev_btn, handlers.on_prev), (c.next_btn, handlers.on_next)):
        button.click(_bind(fn, lab), step_inputs, [*step_views, *selection, c.step, c.msg],
                     trigger_mode="always_last")
    c.presenter.change(None, [c.presenter], None, js=PRESENTER_TOGGLE)
    lab.demo.load(None, None, [c.presenter], js=PRESENTER_FROM_URL)
    c.layer_dd.input(_bind(handlers.on_attention, lab), step_inputs, [c.attn_plot, c.msg])
    c.head_dd.input(_bind(handlers.on_attention, lab), step_inputs, [c.attn_plot, c.msg])
    c.preset_dd.input(_bind(handlers.on_preset, lab), [c.preset_dd], [c.prompt, *outputs_all],
                      concurrency_limit=limits.UPLOAD_CONCURRENCY, concurrency_id="upload")
    c.prompt.change(_bind(handlers.on_prompt, lab), [c.prompt], [c.preset_dd], trigger_mode="always_last",
                    queue=False, show_progress="hidden")
    drafts = [c.topk, c.prune, c.budget, c.lookup]
    pickers = [c.lanes_cb, c.lanes_why]
    c.model_dd.input(_bind(handlers.on_model, lab), [c.model_dd, c.lanes_cb], [c.mode_radio, c.info, *drafts, *pickers])
    c.mode_radio.input(_bind(handlers.on_mode, lab), [c.model_dd, c.mode_radio, c.lanes_cb], [c.info, *drafts,
                                                                                            *pickers])
    lab.demo.unload(_bind(handlers.on_close, lab))
    _wire_bench_panel(*c.bench_parts)


def _extensions(lab: Lab) -> None:
    """Controls other modules add to the page, one line each here: `module.attach(lab)`, called inside the open
    Blocks after the race's wiring. `lab.c` holds every component by name (the race's outputs: `lab.c.outputs_all`,
    the selected pass's views: `lab.c.step_views`); the handlers they wire take plain data, as app/handlers.py's do."""
    export_ui.attach(lab)  # the figure pack, the share link and opening one, the examples gallery


def build_demo(specs: dict[str, ModelSpec] | None = None, preload: bool = False) -> gr.Blocks:
    specs = available_specs() if specs is None else specs
    zero = zerogpu.on_zerogpu()
    cache = EngineCache(specs, max_engines=limits.MAX_ENGINES, retry_after=limits.LOAD_RETRY_S)
    names = list(specs)
    if preload and names:
        first = specs[names[0]]
        if zero:  # ZeroGPU: load now, at module level, so every forked GPU worker inherits the model
            _preload(cache, first.name, first.modes[0])
        else:  # load + warm the default model while the page is being opened
            threading.Thread(target=_preload, args=(cache, first.name, first.modes[0]), daemon=True).start()
    preset_map = presets()
    # a race or a replay per tab, MAX_PER_IP per address; a slot unused past the time limit is freed
    # a race counts its lanes against its address's LANES_PER_IP (limits.py)
    races = Admission(per_session=1, per_ip=limits.MAX_PER_IP, stale_after=limits.EVENT_TIME_LIMIT_S + 30,
                      lanes_per_ip=limits.LANES_PER_IP)
    uploads = Admission(per_session=1, per_ip=limits.MAX_PER_IP, stale_after=limits.UPLOAD_TIME_LIMIT_S + 30)
    with gr.Blocks(title="Speculative Streaming lab", delete_cache=limits.cache_schedule()) as demo:
        components = {**_inputs(specs, preset_map), **_views(specs)}
        lab = Lab(specs, cache, races, uploads, SimpleNamespace(**components), demo, preset_map)
        _wire(lab)
        _extensions(lab)
    demo.queue(default_concurrency_limit=limits.CONCURRENCY, max_size=limits.QUEUE_SIZE)
    cache_sweep.start(demo, *limits.cache_schedule())  # Gradio's own periodic sweep can stop for good
    return demo


BENCH_PLOTS = 7  # speedup, τ, speedup÷τ + up to four ablations


def _bench_state(precision=None):
    """(summary Markdown, precision choices, chosen precision, figures) for the Benchmarks panel."""
    from . import bench_view

    data, text = bench_view.latest()
    choices = bench_view.precisions(data) if data else []
    value = precision if precision in choices else (choices[0] if choices else None)
    return text, choices, value, bench_view.figures(data, value)


def _bench_panel():
    """The Benchmarks accordion: the latest `bench --json` results (a message when there are none), what one
    pass costs here (`pass-cost --json`) and how far drafting takes τ (`draft-tau --json`)."""
    from . import bench_view

    text, choices, value, figs = _bench_state()
    with gr.Accordion("Benchmarks — latest results of `python -m specstream_core bench`", open=False,
                      elem_id="bench-panel"):
        with gr.Row():
            precision = gr.Dropdown(choices, value=value, label="Precision", elem_id="bench-precision",
                                    interactive=bool(choices))
            reload_btn = gr.Button("Reload results", elem_id="bench-reload")
        summary = gr.Markdown(text, elem_id="bench-summary")
        slots = [gr.Plot(figs[i] if i < len(figs) else None, label="Benchmark", elem_id=f"bench-plot-{i}",
                         visible=i < len(figs)) for i in range(BENCH_PLOTS)]
        cost_fig, cost_text = bench_view.pass_cost()
        with gr.Column(elem_id="bench-pass-cost-panel"):
            gr.Markdown(cost_text, elem_id="bench-pass-cost-text")
            gr.Plot(cost_fig, label="Pass cost", elem_id="bench-pass-cost", visible=cost_fig is not None)
        tau_fig, tau_text = bench_view.draft_tau()
        with gr.Column(elem_id="bench-draft-tau-panel"):
            gr.Markdown(tau_text, elem_id="bench-draft-tau-text")
            gr.Plot(tau_fig, label="Draft τ", elem_id="bench-draft-tau", visible=tau_fig is not None)
    return precision, reload_btn, summary, slots


def _wire_bench_panel(precision, reload_btn, summary, slots):
    def refresh(p=None):
        text, choices, value, figs = _bench_state(p)
        plots = [gr.Plot(value=figs[i], visible=True) if i < len(figs) else gr.Plot(value=None, visible=False)
                 for i in range(BENCH_PLOTS)]
        return [text, gr.Dropdown(choices=choices, value=value, interactive=bool(choices)), *plots]

    outputs = [summary, precision, *slots]
    reload_btn.click(refresh, [precision], outputs)
    precision.input(refresh, [precision], outputs)


def launch(demo: gr.Blocks | None = None, **kwargs):
    demo = demo or build_demo()
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    kwargs.setdefault("server_port", int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    kwargs.setdefault("max_file_size", MAX_UPLOAD_BYTES + 2**16)
    # each session costs Gradio a copy of the page's config (~1 MB here) until it is evicted; API clients
    # never close theirs
    kwargs.setdefault("state_session_capacity", limits.MAX_SESSIONS)
    kwargs.setdefault("footer_links", [])
    return demo.launch(css=CSS + LANE_CSS, theme=gr.themes.Soft(), head=PRESENTER_JS, **kwargs)

"""The lab's Gradio wiring. Figures come from app.figures (pure), the race from app.race; this file
only connects components. Per-session data lives in gr.State; the engine cache is per process.

Stable element ids (tests and embedding rely on them): prompt, run, ar-output, ss-output, speedup,
equal-badge, tree-plot, accept-plot, attn-plot, trace-download, trace-upload (plus mask-plot,
step-slider, lab-message, meters, explain; the Benchmarks panel: bench-panel, bench-precision,
bench-reload, bench-summary, bench-plot-0..6, bench-pass-cost-panel (-text, the plot bench-pass-cost), filled from
app/bench_view.py).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time

import gradio as gr

from specstream_core.decode import DecodeConfig, parse_topk
from specstream_core.errors import SpecstreamError
from specstream_core.trace import MAX_TRACE_BYTES, Trace, load_trace, save_trace, validate

from . import figures
from .admission import Admission, client_keys
from .explain import explain_step, most_telling_step
from .models import EngineCache, ModelSpec, available_specs, gamma_of, recommended_for
from .presets import presets, trace_path
from .race import RaceView, SideView, race, render_badge, render_meters, render_speedup, render_text, view_from_trace

log = logging.getLogger("specstream.lab")


def _env_number(name: str, default, kind=int, low=1):
    """A host setting from the environment; a malformed or too small value is logged and ignored."""
    raw = os.environ.get(name, "")
    try:
        value = kind(raw) if raw.strip() else default
    except ValueError:
        log.warning("ignoring %s=%r: not a number; using %s", name, raw, default)
        return default
    if value < low:
        log.warning("ignoring %s=%r: below %s; using %s", name, raw, low, default)
        return default
    return value


# What the lab promises a host (docs/LAB.md, "Limits"): every heavy event is bounded in size, time and
# concurrency, per client too, and what a session keeps is small and expires.
MAX_PROMPT_CHARS = _env_number("SPECSTREAM_MAX_PROMPT_CHARS", 4000)
MAX_NEW_TOKENS = _env_number("SPECSTREAM_MAX_NEW_TOKENS", 256)
CONCURRENCY = _env_number("SPECSTREAM_CONCURRENCY", 2)            # races at once
UPLOAD_CONCURRENCY = _env_number("SPECSTREAM_UPLOAD_CONCURRENCY", 2)  # trace replays at once
QUEUE_SIZE = _env_number("SPECSTREAM_QUEUE_SIZE", 64)
MAX_PER_IP = _env_number("SPECSTREAM_MAX_PER_IP", max(1, CONCURRENCY - 1))  # races (and replays) per address
TRUST_FORWARDED = os.environ.get("SPECSTREAM_TRUST_FORWARDED", "") == "1"  # behind a proxy: X-Forwarded-For
EVENT_TIME_LIMIT_S = _env_number("SPECSTREAM_EVENT_TIME_LIMIT_S", 120.0, float)  # one race
UPLOAD_TIME_LIMIT_S = _env_number("SPECSTREAM_UPLOAD_TIME_LIMIT_S", 10.0, float)  # one replay
MAX_UPLOAD_BYTES = min(MAX_TRACE_BYTES, int(_env_number("SPECSTREAM_MAX_UPLOAD_MB", 8.0, float, 0.001) * 2**20))
TRACE_TTL_S = _env_number("SPECSTREAM_TRACE_TTL_S", 900.0, float)  # a session's trace, after its last update
CACHE_TTL_S = _env_number("SPECSTREAM_CACHE_TTL_S", 900.0, float)  # files served to or uploaded by visitors
MAX_SESSIONS = _env_number("SPECSTREAM_MAX_SESSIONS", 1000)  # sessions Gradio keeps (least recent dropped)
MAX_ENGINES = _env_number("SPECSTREAM_MAX_ENGINES", 2)  # loaded (model, mode) engines
LOAD_RETRY_S = _env_number("SPECSTREAM_LOAD_RETRY_S", 300.0, float, 0)  # after a failed load

try:  # ZeroGPU on Hugging Face Spaces: borrow a GPU for the duration of a race
    import spaces

    gpu = spaces.GPU(duration=120)
except ImportError:
    def gpu(fn):
        return fn

CSS = """
.lab-text { white-space: pre-wrap; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 14px;
  line-height: 1.7; min-height: 7em; max-height: 22em; overflow-y: auto; padding: 10px 12px;
  border: 1px solid var(--border-color-primary); border-radius: 8px; background: var(--background-fill-primary); }
.lab-empty { color: #999; }
.lab-text .tok { border-radius: 3px; color: #111; }
.lab-meters { width: 100%; border-collapse: collapse; font-size: 14px; }
.lab-meters th, .lab-meters td { padding: 4px 10px; text-align: right; border: none !important;
  border-bottom: 1px solid #e5e5e5 !important; }
.lab-meters th:first-child { text-align: left; }
.lab-note { font-size: 12px; color: #777; margin-top: 4px; }
.lab-speedup, .lab-badge { padding: 10px 14px; border-radius: 10px; font-size: 18px; min-height: 3.2em; }
.lab-speedup { background: #eef6ff; }
.lab-big { font-size: 34px; font-weight: 700; color: #1f5fa8; }
.lab-badge.equal { background: #e7f7e4; color: #1d6b18; font-weight: 600; }
.lab-badge.differ { background: #fff1e0; color: #8a4b00; font-weight: 600; }
.pending { color: #888; background: #f6f6f6; }
.lab-error { background: #fdecea; color: #8a1c12; padding: 8px 12px; border-radius: 8px; font-weight: 600; }
.lab-info { background: #eef6ff; color: #1f3f68; padding: 8px 12px; border-radius: 8px; }
.legend span { padding: 1px 6px; border-radius: 3px; margin-right: 6px; }
"""

INTRO = """# Speculative Streaming lab
One model drafts **and** verifies: γ speculative streams in its top layers propose the next tokens while the same
forward pass verifies the previous proposal. Press **Run**: plain decoding (AR) and speculative streaming (SS) race
on the same device, interleaved pass by pass, each timed on its own.
"""

LEGEND = ('<div class="legend lab-note">Speculative output: each background colour is one forward pass; '
          '<span style="box-shadow:inset 0 -2px 0 #ff9f1c;background:#eee">underlined</span> = that pass\'s bonus '
          'token after ≥1 accepted draft. Hover a token for its pass.</div>')


def message(text: str, kind: str = "error") -> str:
    import html

    return f'<div class="lab-{kind}">{html.escape(text)}</div>' if text else ""


def model_info(spec: ModelSpec | None, mode: str) -> str:
    if spec is None:
        return "No model is configured on this host: upload a trace to replay a recorded run."
    if mode not in spec.modes:
        return f"⚠ model {spec.name!r} has no such stream mode; choose {' or '.join(spec.modes)}"
    try:
        gamma = gamma_of(spec, mode)
        streams = spec.streams.get(mode)
        trained = "fresh, untrained"
        if streams:
            from specstream_core.streams import read_stream_config

            steps = read_stream_config(streams).trained_steps
            trained = f"trained ({steps} steps)" if steps else "untrained (fresh)"
    except Exception as exc:  # the streams folder went away: the page says so, without its path
        log.warning("model info for %s (%s): %s", spec.name, mode, exc)
        return f"⚠ the {mode} streams of {spec.name!r} cannot be read on this host"
    return f"**γ = {gamma}** speculative streams · {mode} mode · {trained} streams · precision {spec.precision}"


def build_config(topk: str, prune: float, budget: float, temperature: float, seed, max_new: float) -> DecodeConfig:
    if max_new is None or not 1 <= int(max_new) <= MAX_NEW_TOKENS:
        raise SpecstreamError(f"max new tokens must be between 1 and {MAX_NEW_TOKENS} on this host")
    seed = None if seed in (None, "") else int(seed)
    return DecodeConfig(mode="ss", max_new_tokens=int(max_new), temperature=float(temperature or 0.0),
                        seed=seed, tree_topk=parse_topk(str(topk).replace(" ", "")),
                        prune_threshold=float(prune or 0.0), node_budget=int(budget), trace=True)


def check_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise SpecstreamError("the prompt is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise SpecstreamError(f"the prompt has {len(prompt)} characters; the limit here is {MAX_PROMPT_CHARS}")
    return prompt


def cache_schedule() -> tuple[int, int]:
    """Blocks(delete_cache=(every, age)): Gradio deletes the files it served or received (trace
    downloads, uploads) once they are CACHE_TTL_S old, checking every few minutes."""
    age = max(1, int(CACHE_TTL_S))
    return max(1, min(300, age // 2)), age


def _check(deadline: float | None) -> None:
    """The per-event time limit of a replay, checked between its phases (each is bounded by the
    trace Limits)."""
    if deadline is not None and time.monotonic() > deadline:
        raise SpecstreamError(f"showing this trace took longer than this host's limit of {UPLOAD_TIME_LIMIT_S:g} s")


def _index(value) -> int:
    """The step slider's value as a pass index (a client may send anything)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecstreamError("the forward pass must be a whole number") from None


def _preload(cache: EngineCache, name: str, mode: str) -> None:
    try:
        cache.get(name, mode)
    except Exception:  # reported again, as a message, when a visitor runs it
        log.exception("preloading %s failed", name)


def build_demo(specs: dict[str, ModelSpec] | None = None, preload: bool = False) -> gr.Blocks:
    specs = available_specs() if specs is None else specs
    cache = EngineCache(specs, max_engines=MAX_ENGINES, retry_after=LOAD_RETRY_S)
    names = list(specs)
    first = specs[names[0]] if names else None
    if preload and first is not None:  # load + warm the default model while the page is being opened
        threading.Thread(target=_preload, args=(cache, first.name, first.modes[0]), daemon=True).start()
    preset_map = presets()
    preset_names = list(preset_map)

    # a race or a replay per tab, MAX_PER_IP per address; a slot unused past the time limit is freed
    races = Admission(per_session=1, per_ip=MAX_PER_IP, stale_after=EVENT_TIME_LIMIT_S + 30)
    uploads = Admission(per_session=1, per_ip=MAX_PER_IP, stale_after=UPLOAD_TIME_LIMIT_S + 30)

    with gr.Blocks(title="Speculative Streaming lab", delete_cache=cache_schedule()) as demo:
        # this session's trace (live run or upload), validated and packed; gone TRACE_TTL_S after its
        # last update, or when the tab closes (on_close)
        trace_state = gr.State(None, time_to_live=TRACE_TTL_S)
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=3):
                with gr.Row():
                    model_dd = gr.Dropdown(names, value=names[0] if names else None, label="Model",
                                           elem_id="model", interactive=bool(names))
                    mode_radio = gr.Radio(first.modes if first else ["lossless"],
                                          value=(first.modes[0] if first else "lossless"), label="Stream mode",
                                          info="lossless: base weights frozen (output = base model's); "
                                               "shared: LoRA shared by main and streams (a new model)",
                                          elem_id="mode")
                preset_dd = gr.Dropdown(preset_names, value=preset_names[0] if preset_names else None,
                                        label="Task preset", elem_id="preset")
                prompt = gr.Textbox(preset_map.get(preset_names[0], "") if preset_names else "", lines=6,
                                    max_lines=14, label="Prompt", elem_id="prompt", max_length=MAX_PROMPT_CHARS)
                run_btn = gr.Button("Run the race", variant="primary", elem_id="run", interactive=bool(names))
                msg = gr.HTML(message("" if names else "No model is configured on this host; upload a trace "
                                      "below to replay a recorded run.", "info"), elem_id="lab-message")
            with gr.Column(scale=2):
                with gr.Accordion("Settings", open=True):
                    info = gr.Markdown(model_info(first, first.modes[0] if first else "lossless"),
                                       elem_id="model-info")
                    first_rec = recommended_for(first, first.modes[0] if first else "lossless")
                    topk = gr.Textbox(",".join(map(str, first_rec["topk"])), elem_id="topk",
                                      label="Per-depth top-k (stream 1, 2, …); the default is the stream set's "
                                            "fastest measured tree")
                    prune = gr.Slider(0.0, 0.5, value=float(first_rec["prune_threshold"]), step=0.01,
                                      label="Pruning threshold (0 = off)", elem_id="prune")
                    budget = gr.Slider(1, 128, value=int(first_rec["node_budget"]), step=1, label="Node budget",
                                       elem_id="budget")
                    temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05,
                                            label="Temperature (0 = greedy, lossless check)", elem_id="temperature")
                    seed = gr.Number(0, precision=0, label="Seed", elem_id="seed")
                    max_new = gr.Slider(1, MAX_NEW_TOKENS, value=min(64, MAX_NEW_TOKENS), step=1,
                                        label="Max new tokens", elem_id="max-new")
        meters = gr.HTML(render_meters(RaceView(SideView(), SideView())), elem_id="meters")
        with gr.Row():
            with gr.Column():
                gr.Markdown("### Plain decoding (AR)")
                ar_out = gr.HTML(render_text(SideView(), False, "press Run"), elem_id="ar-output")
            with gr.Column():
                gr.Markdown("### Speculative streaming (SS)")
                ss_out = gr.HTML(render_text(SideView(), True, "press Run"), elem_id="ss-output")
                gr.HTML(LEGEND)
        with gr.Row(equal_height=True):
            speed = gr.HTML('<div class="lab-speedup pending">speedup appears here</div>', elem_id="speedup")
            badge = gr.HTML('<div class="lab-badge pending">output check appears here</div>', elem_id="equal-badge")

        gr.Markdown("## Draft tree of one forward pass")
        step = gr.Slider(0, 1, value=0, step=1, label="Forward pass", elem_id="step-slider", interactive=False)
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
        bench_parts = _bench_panel()

        step_views = [tree_plot, attn_plot, mask_plot, explain, layer_dd, head_dd]
        race_views = [ar_out, ss_out, meters, speed, badge]

        # ---- handlers -------------------------------------------------------------------------
        # Every handler catches everything: a visitor sees one line (`message`), the log keeps the rest.
        def views_of_step(trace, index, layer=None, head=None, deadline=None):
            layers, heads = figures.attention_choices(trace, index)
            layer = layer if layer in layers else (layers[-1] if layers else None)
            head = head if head in heads else ("mean" if heads else None)
            out = {tree_plot: figures.tree_figure(trace, index)}
            _check(deadline)
            out[attn_plot] = figures.attention_figure(trace, index, layer, head)
            _check(deadline)
            out[mask_plot] = figures.mask_figure(trace, index)
            _check(deadline)
            out.update({explain: explain_step(trace, index), layer_dd: gr.Dropdown(choices=layers, value=layer),
                        head_dd: gr.Dropdown(choices=heads, value=head)})
            return out

        def race_html(view: RaceView):
            return {ar_out: render_text(view.ar, False, "…"), ss_out: render_text(view.ss, True, "…"),
                    meters: render_meters(view), speed: render_speedup(view), badge: render_badge(view)}

        def all_views(trace: Trace, view: RaceView, note: str, deadline=None):
            index = most_telling_step(trace)
            out = race_html(view)
            out.update(views_of_step(trace, index, deadline=deadline))
            out[accept_plot] = figures.acceptance_figure(trace)
            _check(deadline)
            out.update({trace_state: trace.pack(), msg: note,
                        step: gr.Slider(0, max(1, len(trace["steps"]) - 1), value=index, step=1, interactive=True)})
            return out

        @gpu
        def on_run(model_name, mode, text, topk_v, prune_v, budget_v, temp_v, seed_v, max_new_v,
                   request: gr.Request = None):
            try:
                with races.enter(client_keys(request, TRUST_FORWARDED)), \
                        tempfile.TemporaryDirectory(prefix="specstream-race-") as tmp:
                    # the trace file lives only until Gradio has copied it into its cache (delete_cache ages
                    # that copy out): the generator resumes after each yield is sent, and the with-block ends
                    yield from _race_views(model_name, mode, text, topk_v, prune_v, budget_v, temp_v, seed_v,
                                           max_new_v, tmp)
            except SpecstreamError as exc:
                yield {msg: message(str(exc))}
            except Exception as exc:  # never a stack trace in the page; the log keeps it
                log.exception("race failed")
                yield {msg: message(f"internal error ({type(exc).__name__}); see the server log")}

        def _race_views(model_name, mode, text, topk_v, prune_v, budget_v, temp_v, seed_v, max_new_v, tmp):
            check_prompt(text)
            cfg = build_config(topk_v, prune_v, budget_v, temp_v, seed_v, max_new_v)
            engine, lock = cache.get(model_name, mode)
            layers = ()
            if engine.streams is not None:
                layers = tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))
            yield {**race_html(RaceView(SideView(), SideView())), msg: "",
                   download: gr.update(value=None, interactive=False)}
            t0 = time.monotonic()
            for view in race(engine, text, cfg, lock, attention_layers=layers):
                if time.monotonic() - t0 > EVENT_TIME_LIMIT_S:
                    yield {msg: message(f"The race was stopped at this host's time limit of "
                                        f"{EVENT_TIME_LIMIT_S:.0f} s; try fewer new tokens.")}
                    return
                if not view.finished:
                    yield race_html(view)
                    continue
                trace = validate(view.trace)
                path = os.path.join(tmp, f"specstream-trace-{model_name}-{time.strftime('%Y%m%d-%H%M%S')}.json")
                save_trace(trace, path)
                out = all_views(trace, view, "")
                # an update, not a new DownloadButton: a component built here would copy the file into a
                # cache of its own that delete_cache never sweeps
                out[download] = gr.update(value=path, interactive=True)
                yield out

        def on_upload(data, request: gr.Request = None):
            """data: the uploaded bytes (or a path, for direct calls)."""
            if not data:
                return {}
            try:
                with uploads.enter(client_keys(request, TRUST_FORWARDED)):
                    deadline = time.monotonic() + UPLOAD_TIME_LIMIT_S
                    trace = load_trace(data, max_bytes=MAX_UPLOAD_BYTES)
                    _check(deadline)
                    view = view_from_trace(trace)
                    note = message(f"Replaying a trace of {trace['meta'].get('model', '?')} "
                                   f"({len(trace['steps'])} passes) — no model involved.", "info")
                    out = all_views(trace, view, note, deadline)
                    out[download] = gr.update(value=None, interactive=False)  # the visitor has the file
                    return out
            except SpecstreamError as exc:
                return {msg: message(f"Cannot replay this file: {exc}")}
            except Exception as exc:
                log.exception("replay failed")
                return {msg: message(f"Cannot replay this file: it does not follow the trace schema "
                                     f"({type(exc).__name__})")}

        def replay_recorded(label):
            """The preset's recorded trace (assets/smollm2/traces/), replayed in every view: what a cold
            Space shows before any model has run. Validated like an upload."""
            path = trace_path(label) if label else None
            if path is None:
                return {}
            try:
                trace = load_trace(path, max_bytes=MAX_UPLOAD_BYTES)
                view = view_from_trace(trace)
                note = message(f"A recorded run of {trace['meta'].get('model', '?')} on this preset "
                               f"({len(trace['steps'])} passes). Press Run to race it live.", "info")
                out = all_views(trace, view, note, time.monotonic() + UPLOAD_TIME_LIMIT_S)
                out[download] = gr.update(value=path, interactive=True)
                return out
            except Exception:  # a broken bundled file must not break the page
                log.exception("cannot replay the recorded trace %s", path)
                return {}

        def on_preset(label):
            return {prompt: preset_map.get(label, ""), **replay_recorded(label)}

        def on_step(blob, index, layer, head):
            if blob is None:
                return {}
            try:
                return views_of_step(Trace.unpack(blob), _index(index), layer, head)
            except SpecstreamError as exc:
                return {msg: message(str(exc))}
            except Exception as exc:
                log.exception("step view failed")
                return {msg: message(f"internal error ({type(exc).__name__}); see the server log")}

        def on_attention(blob, index, layer, head):
            if blob is None:
                return {}
            try:
                return {attn_plot: figures.attention_figure(Trace.unpack(blob), _index(index), layer, head)}
            except SpecstreamError as exc:
                return {msg: message(str(exc))}
            except Exception as exc:
                log.exception("attention view failed")
                return {msg: message(f"internal error ({type(exc).__name__}); see the server log")}

        def draft_settings(spec, mode):
            rec = recommended_for(spec, mode)  # the stream set's fastest measured tree: the lab's default
            return {topk: ",".join(map(str, rec["topk"])), prune: float(rec["prune_threshold"]),
                    budget: int(rec["node_budget"])}

        def on_model(name):
            spec = specs.get(name) if isinstance(name, str) else None
            modes = spec.modes if spec else ["lossless"]
            return {mode_radio: gr.Radio(choices=modes, value=modes[0]), info: model_info(spec, modes[0]),
                    **draft_settings(spec, modes[0])}

        def on_mode(name, mode):
            spec = specs.get(name) if isinstance(name, str) else None
            return {info: model_info(spec, mode), **draft_settings(spec, mode)}

        def on_close(request: gr.Request):
            """The tab closed: drop its trace now (Gradio alone keeps closed sessions' state an hour)."""
            holder = getattr(demo, "state_holder", None)
            if holder is not None and request is not None and request.session_hash in holder:
                holder.delete_state(request.session_hash)

        outputs_all = [*race_views, *step_views, accept_plot, trace_state, step, msg, download]
        run_btn.click(on_run, [model_dd, mode_radio, prompt, topk, prune, budget, temperature, seed, max_new],
                      outputs_all, concurrency_limit=CONCURRENCY, concurrency_id="model")
        upload.upload(on_upload, [upload], outputs_all, concurrency_limit=UPLOAD_CONCURRENCY,
                      concurrency_id="upload")
        step.input(on_step, [trace_state, step, layer_dd, head_dd], [*step_views, msg], trigger_mode="always_last")
        layer_dd.input(on_attention, [trace_state, step, layer_dd, head_dd], [attn_plot, msg])
        head_dd.input(on_attention, [trace_state, step, layer_dd, head_dd], [attn_plot, msg])
        preset_dd.input(on_preset, [preset_dd], [prompt, *outputs_all], concurrency_limit=UPLOAD_CONCURRENCY,
                        concurrency_id="upload")
        demo.load(replay_recorded, [preset_dd], outputs_all, concurrency_limit=UPLOAD_CONCURRENCY,
                  concurrency_id="upload")
        model_dd.input(on_model, [model_dd], [mode_radio, info, topk, prune, budget])
        mode_radio.input(on_mode, [model_dd, mode_radio], [info, topk, prune, budget])
        demo.unload(on_close)
        _wire_bench_panel(*bench_parts)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
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
    """The Benchmarks accordion: the latest `bench --json` results (a message when there are none) and
    what one pass costs here (`pass-cost --json`)."""
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
    kwargs.setdefault("state_session_capacity", MAX_SESSIONS)
    kwargs.setdefault("footer_links", [])
    return demo.launch(css=CSS, theme=gr.themes.Soft(), **kwargs)

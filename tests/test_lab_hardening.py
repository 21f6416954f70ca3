"""The lab against hostile input and overload: trace limits and types, iterative
layouts, escaped HTML, what a session keeps, temp files, per-client and per-model limits, model
load errors. Fast: real traces from the tiny lab model, no browser, no server."""

import copy
import json
import os
import re
import tempfile
import threading
import time

import pytest

from hostile import PAYLOAD, chain, deep_json, html_everywhere, nesting
from specstream_core import SpecstreamError
from specstream_core.decoding.trace import LIMITS, Trace, load_trace, validate
from helpers import LAB_PROMPT as PROMPT, component, handler, lab_models_env


def upload(demo, raw: bytes, tmp_path, name="t.json") -> str:
    """The upload handler's message for these bytes (shown HTML)."""
    path = tmp_path / name
    path.write_bytes(raw)
    out = handler(demo, "on_upload")(str(path))
    return out[component(demo, "lab-message")]


# ---- trace limits and types (High) ---------------------------------------------------------------
@pytest.mark.parametrize("mutate,needle", [
    (lambda t: t["meta"].update(gamma=10**4), "meta.gamma must be between 0 and 16"),
    (lambda t: t["meta"].update(gamma="4"), "meta.gamma must be an integer"),
    (lambda t: t["steps"][2]["nodes"][1].update(depth=10**12), "depth must be between 0 and 32"),
    (lambda t: t["steps"][2]["nodes"][1].update(depth=7), "parent's depth"),
    (lambda t: t["steps"][2]["nodes"][1].update(token=1.5), "token must be an integer"),
    (lambda t: t["steps"][2]["nodes"][1].update(id=True), "invalid parent"),
    (lambda t: t["steps"][2]["nodes"][1].update(prob=float("nan")), "prob must be a finite number"),
    (lambda t: t["steps"][2]["nodes"][1].update(text="x" * 10_000), "longer than 256"),
    (lambda t: t["steps"][2]["time_ms"].update(verify=float("inf")), "time_ms.verify must be a finite"),
    (lambda t: t["steps"][2].update(nodes=t["steps"][2]["nodes"] * 400), "limit is 1024"),
    (lambda t: t.update(steps=t["steps"] * 300), "limit is 4096"),
    (lambda t: t["stats"].update(new_tokens=PAYLOAD), "stats.new_tokens must be an integer"),
    (lambda t: t["meta"]["baseline"]["stats"].update(forward_passes="<b>"), "forward_passes must be an integer"),
    (lambda t: t["steps"][2]["attention"]["layers"]["2"][0].append([0.5]), "same size"),
    (lambda t: t["steps"][2]["attention"]["layers"]["2"][0][0].__setitem__(0, "1"), "weights must be numbers"),
    (lambda t: t["prompt"].update(text="y" * (LIMITS.text_chars + 1)), "prompt.text is longer"),
])
def test_validate_caps_sizes_and_checks_types(trace, mutate, needle):
    bad = copy.deepcopy(trace)
    mutate(bad)
    with pytest.raises(SpecstreamError, match=needle):
        validate(bad)


def test_huge_depth_is_rejected_before_any_loop(trace):
    """Depth 10^12 used to make acceptance_stats loop for days; now validation refuses it at once."""
    from app.figures import acceptance_stats

    bad = copy.deepcopy(trace)
    bad["steps"][2]["nodes"][-1]["depth"] = 10**12
    t0 = time.perf_counter()
    with pytest.raises(SpecstreamError, match="depth"):
        acceptance_stats(bad)
    assert time.perf_counter() - t0 < 0.5


def test_validated_trace_is_compact(trace):
    padded = copy.deepcopy(trace)
    padded["meta"]["junk"] = [[[[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]]]]
    padded["steps"][1]["extra"] = "x" * 100_000
    compact = validate(padded)
    assert isinstance(compact, Trace) and "junk" not in compact["meta"] and "extra" not in compact["steps"][1]
    assert nesting(compact) <= LIMITS.nesting
    assert validate(compact) is compact  # validated once
    assert type(copy.deepcopy(compact)) is dict  # a copy to mutate is validated again
    blob = compact.pack()
    assert isinstance(blob, bytes) and len(blob) < len(json.dumps(trace)) / 3
    assert Trace.unpack(blob) == compact


def test_long_chains_and_deep_json_never_raise_recursion_error(trace, tmp_path):
    from app.figures import tree_layout

    ys = tree_layout([-1] + list(range(100_000)))  # used to recurse once per node
    assert ys[0] == ys[-1] == 0.0
    with pytest.raises(SpecstreamError, match="depth must be between"):
        validate(chain(trace, 1000))
    assert validate(chain(trace, LIMITS.depth + 1))["steps"][1]["nodes"][-1]["depth"] == LIMITS.depth
    with pytest.raises(SpecstreamError, match="nested deeper"):
        load_trace(deep_json(200_000))
    assert "x" not in load_trace(deep_json(500))["meta"]  # parsed, then dropped: not part of the schema
    with pytest.raises(SpecstreamError, match="invalid JSON"):
        load_trace(b"1" * 5000)  # int() refuses over 4300 digits: ValueError, not JSONDecodeError


def test_lone_surrogates_are_replaced(trace):
    bad = copy.deepcopy(trace)
    bad["steps"][1]["nodes"][0]["text"] = "\ud800"
    assert validate(bad)["steps"][1]["nodes"][0]["text"] == "\ufffd"


# ---- escaping (Medium) -----------------------------------------------------------------------------
def test_meters_and_speedup_show_numbers_only():
    from app.race import RaceView, SideView
    from app.render import render_meters, render_speedup

    evil = {"new_tokens": PAYLOAD, "forward_passes": PAYLOAD, "tokens_per_s": PAYLOAD, "wall_s": "1<b>"}
    view = RaceView(SideView([], evil, True), SideView([], dict(evil), True), finished=True, elapsed_s=PAYLOAD)
    for html_out in (render_meters(view), render_speedup(view)):
        assert "<img" not in html_out and "onerror" not in html_out and "<b>" not in html_out


def test_uploaded_html_is_escaped_everywhere(replay_demo, trace, tmp_path):
    """HTML in every string of a trace: rendered, but as text in every HTML output and in the plots;
    HTML in every number: refused."""
    shown = upload(replay_demo, json.dumps(html_everywhere(trace)).encode(), tmp_path)
    assert "Replaying" in shown and "<img" not in shown
    out = handler(replay_demo, "on_upload")(str(tmp_path / "t.json"))
    for elem_id in ("ar-output", "ss-output", "meters", "speedup", "equal-badge", "lab-message"):
        assert "<img" not in out[component(replay_demo, elem_id)], elem_id
    for elem_id in ("tree-plot", "attn-plot", "mask-plot", "accept-plot"):  # Plotly renders tags in labels
        shown = json.dumps(json.loads(out[component(replay_demo, elem_id)].to_json()), ensure_ascii=False)
        assert "<img" not in shown and "&lt;img" in shown or elem_id == "accept-plot", elem_id
    explain = out[component(replay_demo, "explain")]
    assert "<img" in explain and not re.findall(r"(?<!`)<img", explain)  # only as code spans: shown as text
    refused = upload(replay_demo, json.dumps(html_everywhere(trace, numbers_too=True)).encode(), tmp_path)
    assert "Cannot replay this file: not a valid specstream trace" in refused and "<img" not in refused


def test_explain_keeps_backticks_inside_code_spans(trace):
    from app.explain import explain_step, most_telling_step

    bad = copy.deepcopy(trace)
    index = most_telling_step(bad)
    for node in bad["steps"][index]["nodes"]:
        node["text"] = "`<img src=x onerror=alert(1)>`"
    text = explain_step(bad, index)
    # the payload's own backticks become look-alikes, so each token stays one code span (shown as text)
    assert text.count("<img") == text.count("`ˋ<img") > 0 and text.count("`") % 2 == 0


# ---- the upload handler: limits, time, messages (High) --------------------------------------------
def test_upload_is_size_capped_and_time_limited(replay_demo, trace, tmp_path, monkeypatch):
    import app.limits as limits

    big = json.dumps({**trace, "pad": "x" * (limits.MAX_UPLOAD_BYTES + 1)}).encode()
    assert "limit is" in upload(replay_demo, big, tmp_path)
    monkeypatch.setattr(limits, "UPLOAD_TIME_LIMIT_S", 0.0)
    shown = upload(replay_demo, json.dumps(trace).encode(), tmp_path)
    assert "longer than this host" in shown and "Traceback" not in shown


def test_handlers_catch_everything(replay_demo, trace, tmp_path, monkeypatch):
    """A RecursionError (or any other) inside a figure used to escape the step and attention handlers."""
    import app.figures as figures

    def boom(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(figures, "tree_figure", boom)
    monkeypatch.setattr(figures, "attention_figure", boom)
    blob = validate(trace).pack()
    msg = component(replay_demo, "lab-message")
    for name, args in (("on_step", (blob, 2, None, None)), ("on_attention", (blob, 2, "2", "0"))):
        shown = handler(replay_demo, name)(*args)[msg]
        assert "internal error (RecursionError)" in shown and "Traceback" not in shown, name
    shown = upload(replay_demo, json.dumps(trace).encode(), tmp_path)
    assert shown.count("Cannot replay this file") == 1 and "Traceback" not in shown


def test_session_state_is_small_and_expires(replay_demo, trace, tmp_path):
    """The session keeps the packed, validated trace (not 6-13x the file), for TRACE_TTL_S after its last
    update, and drops it when the tab closes; Gradio deletes served and uploaded files (delete_cache)."""
    import gradio as gr
    from app.limits import CACHE_TTL_S, TRACE_TTL_S

    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    out = handler(replay_demo, "on_upload")(str(path))
    state = next(b for b in replay_demo.blocks.values() if isinstance(b, gr.State))
    kept = out[state]
    assert isinstance(kept, bytes) and len(kept) < os.path.getsize(path) / 3
    assert state.time_to_live == TRACE_TTL_S <= 900
    assert replay_demo.delete_cache and replay_demo.delete_cache[1] == CACHE_TTL_S <= 900
    assert any(t[1] == "unload" for f in replay_demo.fns.values() for t in f.targets)

    class Holder(dict):  # a stand-in for Gradio's state holder
        deleted = []

        def delete_state(self, session):
            self.deleted.append(session)

    replay_demo.state_holder = Holder(abc=1)
    handler(replay_demo, "on_close")(type("Request", (), {"session_hash": "abc"})())
    assert Holder.deleted == ["abc"]


def test_step_events_read_the_packed_trace(replay_demo, trace):
    from app.handlers import Trace

    blob = validate(trace).pack()
    out = handler(replay_demo, "on_step")(blob, 2, None, None)
    assert out[component(replay_demo, "tree-plot")].data
    out = handler(replay_demo, "on_attention")(blob, 2, "2", "0")
    assert out[component(replay_demo, "attn-plot")].data
    assert isinstance(Trace.unpack(blob), Trace)
    for index in (float("nan"), float("inf"), "x", 10**30, -1):  # what a client may send as the slider value
        shown = handler(replay_demo, "on_step")(blob, index, None, None)[component(replay_demo, "lab-message")]
        assert "lab-error" in shown and "internal error" not in shown, index


def test_events_are_bounded(replay_demo):
    from app.limits import CONCURRENCY, QUEUE_SIZE, UPLOAD_CONCURRENCY

    fns = {getattr(f.fn, "__name__", ""): f for f in replay_demo.fns.values()}
    assert fns["on_upload"].concurrency_limit == UPLOAD_CONCURRENCY <= 2
    assert fns["on_run"].concurrency_limit == CONCURRENCY
    assert replay_demo._queue.max_size == QUEUE_SIZE


# ---- races: temp files, time limit, one client (Medium) -----------------------------------------
@pytest.fixture(scope="module")
def lab_demo(lab_dir):
    from app.models import parse_specs
    from app.ui import build_demo

    return build_demo(parse_specs(lab_models_env(lab_dir)))


class FakeRequest:
    def __init__(self, session, ip="10.0.0.1"):
        self.session_hash = session
        self.client = type("Client", (), {"host": ip})()
        self.headers = {}


def run_race(demo, request=None, max_new=8):
    return list(handler(demo, "on_run")("tiny", "lossless", PROMPT, "2,1", 0.0, 16, 0, 0.0, 0, max_new, request))


def test_race_leaves_no_temp_dir(lab_demo, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    outs = run_race(lab_demo)
    download = component(lab_demo, "trace-download")
    assert [o[download]["value"] for o in outs if download in o and o[download]["value"]]  # a trace was served
    # Gradio serves its own copy (in its cache, aged out by delete_cache); the race's directory is gone
    assert not [d for d in os.listdir(tmp_path) if d.startswith("specstream")], os.listdir(tmp_path)


def test_race_stops_at_the_time_limit(lab_demo, monkeypatch):
    import app.limits as limits

    monkeypatch.setattr(limits, "EVENT_TIME_LIMIT_S", 0.0)
    outs = run_race(lab_demo, max_new=32)
    assert "time limit" in outs[-1][component(lab_demo, "lab-message")]


def test_one_client_cannot_hold_every_slot(lab_demo):
    """A second race from the same tab, or more races from one address than MAX_PER_IP, is refused at once
    while the first runs; another client still gets a slot."""
    import app.limits as limits

    msg = component(lab_demo, "lab-message")
    first = handler(lab_demo, "on_run")("tiny", "lossless", PROMPT, "1", 0.0, 8, 0, 0.0, 0, 8, FakeRequest("tab-a"))
    next(first)  # tab a is racing
    same_tab = run_race(lab_demo, FakeRequest("tab-a", ip="10.0.0.9"))
    assert "already have a run going" in same_tab[-1][msg]
    assert limits.MAX_PER_IP == 1
    same_ip = run_race(lab_demo, FakeRequest("tab-b"))
    assert "too many runs from your address" in same_ip[-1][msg]
    other = run_race(lab_demo, FakeRequest("tab-c", ip="10.0.0.2"))
    assert component(lab_demo, "trace-download") in other[-1]  # served
    rest = list(first)
    assert component(lab_demo, "trace-download") in rest[-1]
    assert run_race(lab_demo, FakeRequest("tab-a"))  # released when done


def test_admission_frees_stale_slots():
    from app.admission import Admission, Busy, client_keys

    now = [0.0]
    gate = Admission(per_session=1, per_ip=2, stale_after=10, clock=lambda: now[0])
    held = gate.enter({"session": "a", "ip": "1.2.3.4"})
    held.__enter__()  # never released: a client that vanished mid-race
    with pytest.raises(Busy):
        with gate.enter({"session": "a", "ip": "5.6.7.8"}):
            pass
    now[0] = 11.0
    with gate.enter({"session": "a", "ip": "1.2.3.4"}):
        assert gate.held("ip", "1.2.3.4") == 1
    assert gate.held("ip", "1.2.3.4") == 0
    req = FakeRequest("s", ip="127.0.0.1")
    req.headers = {"x-forwarded-for": "9.9.9.9, 10.0.0.1"}
    assert client_keys(req) == {"session": "s", "ip": "127.0.0.1"}
    assert client_keys(req, trust_forwarded=True)["ip"] == "9.9.9.9"


# ---- the engine cache (Medium, Low) --------------------------------------------------------------
def fake_cache(tmp_path, names=("a", "b", "c"), **kw):
    from app.models import EngineCache, ModelSpec

    specs = {n: ModelSpec(n, str(tmp_path / "models" / n)) for n in names}
    return EngineCache(specs, **kw)


def test_a_slow_load_blocks_only_its_own_model(tmp_path):
    cache = fake_cache(tmp_path)
    release = threading.Event()

    def load(spec, mode):
        if spec.name == "a":
            release.wait(10)
        return object()

    cache._load = load
    slow = threading.Thread(target=cache.get, args=("a", "lossless"))
    slow.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    cache.get("b", "lossless")  # used to wait behind the global lock
    assert time.perf_counter() - t0 < 1.0
    release.set()
    slow.join(5)


def test_failed_loads_are_remembered_and_hide_paths(tmp_path):
    now = [0.0]
    cache = fake_cache(tmp_path, retry_after=60, clock=lambda: now[0])
    calls = []

    def load(spec, mode):
        calls.append(spec.name)
        raise OSError(f"{spec.base}/config.json: no such file; also /etc/secret/x")

    cache._load = load
    for _ in range(3):
        with pytest.raises(SpecstreamError) as info:
            cache.get("a", "lossless")
        assert str(tmp_path) not in str(info.value) and "/etc/secret" not in str(info.value)
        assert "model 'a' could not be loaded" in str(info.value)
    assert calls == ["a"]  # not retried on every click
    assert "next attempt is in 60 s" in str(info.value)
    now[0] = 61.0
    with pytest.raises(SpecstreamError):
        cache.get("a", "lossless")
    assert calls == ["a", "a"]


def test_engines_are_evicted_least_recently_used(tmp_path):
    cache = fake_cache(tmp_path, max_engines=2)
    cache._load = lambda spec, mode: object()
    for name in ("a", "b", "a", "c"):
        cache.get(name, "lossless")
    assert cache.loaded() == [("a", "lossless"), ("c", "lossless")]


def test_unknown_model_message_is_bounded(tmp_path):
    cache = fake_cache(tmp_path)
    with pytest.raises(SpecstreamError) as info:
        cache.get(PAYLOAD * 100, "lossless")
    assert len(str(info.value)) < 200


# ---- the browser tests must not skip silently in CI (Low) --------------------------------------------
def test_browser_tests_fail_without_chromium():
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, SPECSTREAM_CHROMIUM="/nonexistent/chromium")
    env.pop("SPECSTREAM_ALLOW_NO_BROWSER", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_app_browser.py",
           "-k", "malformed_upload_shows_message and garbage"]
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "chromium" in run.stdout and "1 error" in run.stdout, run.stdout[-2000:]
    env["SPECSTREAM_ALLOW_NO_BROWSER"] = "1"
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "1 skipped" in run.stdout, run.stdout[-2000:]


def test_model_info_hides_host_paths(tmp_path):
    from app.models import ModelSpec
    from app.render import model_info

    gone = str(tmp_path / "secret" / "streams")
    text = model_info(ModelSpec("m", str(tmp_path / "secret"), {"lossless": gone}), "lossless")
    assert "cannot be read" in text and str(tmp_path) not in text
    assert "no such stream mode" in model_info(ModelSpec("m", "b"), "<b>shared</b>")


# ---- recorded traces: a cold lab shows a run before any compute ----------------------------------
def test_a_presets_recorded_trace_is_replayed_on_load_and_on_choosing_it(trace, tmp_path, monkeypatch):
    from app.presets import presets, slug
    from app.ui import build_demo
    from specstream_core.decoding.trace import save_trace

    label = next(iter(presets()))
    save_trace(trace, str(tmp_path / f"{slug(label)}.json"))
    monkeypatch.setenv("SPECSTREAM_TRACES_DIR", str(tmp_path))
    demo = build_demo({})  # no model at all: the recorded run is still shown
    out = list(handler(demo, "on_open")(label))[-1]  # the page opens with no ?trace= link
    assert "A recorded run" in out[component(demo, "lab-message")]
    assert out[component(demo, "ar-output")] and out[component(demo, "tree-plot")] is not None
    chosen = handler(demo, "on_preset")(label)
    assert chosen[component(demo, "prompt")] == presets()[label] and "A recorded run" in chosen[component(demo, "lab-message")]
    other = list(presets())[1]  # nothing recorded for it: the prompt changes, the views stay
    assert set(handler(demo, "on_preset")(other)) == {component(demo, "prompt"), component(demo, "lab-message")}
    (tmp_path / f"{slug(label)}.json").write_text("{not json")  # a broken file never breaks the page
    assert set(list(handler(demo, "on_open")(label))[-1]) == {component(demo, "lab-message")}


def test_the_cache_sweep_outlives_an_error_and_deletes_old_files(tmp_path, caplog):
    """Gradio's own periodic sweep ends at its first exception; the lab's keeps going (app/cache_sweep.py)."""
    import time

    from app import cache_sweep

    class Flaky(set):
        fails = 1

        def __iter__(self):
            if Flaky.fails:
                Flaky.fails -= 1
                raise RuntimeError("Set changed size during iteration")
            return super().__iter__()

    old = tmp_path / "trace.json"
    old.write_text("{}")
    class FakeBlocks:  # what Gradio's sweep reads of a Blocks
        blocks: dict = {}
        temp_file_sets = [Flaky({str(old)})]

    blocks = FakeBlocks()
    with caplog.at_level("ERROR", logger="specstream.lab"):
        cache_sweep.start(blocks, every=0.05, age=0)
        deadline = time.time() + 10
        while old.exists() and time.time() < deadline:
            time.sleep(0.05)
    assert not old.exists() and Flaky.fails == 0
    assert "the next sweep retries" in caplog.text

"""The lab in a real browser: the real server (app.py, subprocess, 127.0.0.1) on a tiny model saved to a
temporary directory, driven by headless Chromium through playwright.

Needs /usr/bin/chromium (`apt-get install -y chromium`; scripts/test.sh installs it) and the playwright
package. Without them every test here fails (so CI cannot pass silently without a browser), unless
SPECSTREAM_ALLOW_NO_BROWSER=1 is set: then they are skipped (a laptop without chromium).
SPECSTREAM_CHROMIUM names another browser binary.
"""

import json
import os

import pytest

from helpers import (LAB_PROMPT as PROMPT, free_port, headless_chromium, lab_models_env, make_lab_model, require_chromium,
                     serve_lab)

CHROMIUM = os.environ.get("SPECSTREAM_CHROMIUM", "/usr/bin/chromium")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
RUN_TIMEOUT_MS = 90_000
MAX_NEW = 32  # keeps each race to a second or two on the tiny model



@pytest.fixture(scope="module", autouse=True)
def require_browser():
    """Fail (skip only with SPECSTREAM_ALLOW_NO_BROWSER=1) before starting a server when the browser or
    playwright is missing."""
    require_chromium(CHROMIUM)


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory):
    return make_lab_model(str(tmp_path_factory.mktemp("lab-browser")))


@pytest.fixture(scope="module")
def server(lab_dir, tmp_path_factory):
    port = free_port()
    # no recorded traces: a replay on page load would show a finished race before these tests start theirs
    env = dict(os.environ, SPECSTREAM_MODELS=lab_models_env(lab_dir), GRADIO_SERVER_PORT=str(port),
               SPECSTREAM_TRACES_DIR=str(tmp_path_factory.mktemp("no-traces")),
               SPECSTREAM_DEFAULT_MODEL=next(iter(json.loads(lab_models_env(lab_dir)))),
               GRADIO_SERVER_NAME="127.0.0.1", GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1", PYTHONPATH=ROOT,
               SPECSTREAM_MAX_PER_IP="2")  # every page here comes from 127.0.0.1: two races at once
    yield from serve_lab(tmp_path_factory, env, port)


@pytest.fixture(scope="module")
def browser():
    yield from headless_chromium(CHROMIUM, ARGS)


class Page:
    """A page with its console errors recorded."""

    def __init__(self, browser, url, width: int = 1400, height: int = 1000):
        self.context = browser.new_context(accept_downloads=True, viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.errors = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)
        self.page.wait_for_selector("#run")
        self.page.fill("#max-new input[type=number]", str(MAX_NEW))
        self.page.press("#max-new input[type=number]", "Enter")

    def open_settings(self):
        """The draft and sampling settings fold away in an accordion, closed on opening."""
        self.page.click("#settings button, #settings .label-wrap")
        self.page.wait_for_selector("#topk", state="visible", timeout=10_000)

    def text(self, elem_id: str) -> str:
        return self.page.inner_text(f"#{elem_id} .lab-text").strip()

    def run(self, prompt: str | None = None):
        if prompt is not None:
            self.page.fill("#prompt textarea", prompt)
        self.page.click("#run button, button#run")
        self.page.wait_for_selector("#equal-badge .lab-badge.equal, #equal-badge .lab-badge.differ",
                                    timeout=RUN_TIMEOUT_MS)

    def plot_points(self, elem_id: str) -> int:
        self.page.wait_for_selector(f"#{elem_id} .js-plotly-plot", timeout=20_000)
        return self.page.evaluate(
            """id => { const d = document.querySelector('#' + id + ' .js-plotly-plot');
                       if (!d || !d.data) return 0;
                       return d.data.reduce((n, t) => n + ((t.z || t.y || t.x || []).length || 0), 0); }""", elem_id)

    def close(self):
        self.context.close()


def expected_texts(lab_dir, prompts, max_new_tokens=MAX_NEW):
    from specstream_core import DecodeConfig, Engine

    engine = Engine.load(lab_dir, streams_dir=os.path.join(lab_dir, "streams"))
    cfg = DecodeConfig(mode="ar", max_new_tokens=max_new_tokens)
    return [engine.generate(prompt, cfg).text.strip() for prompt in prompts]


def test_race_views_download_and_replay(server, browser, tmp_path):
    a = Page(browser, server)
    page = a.page
    # pick a preset (the chat corpus's eval prompts) through the dropdown
    page.click("#preset input")
    option = page.get_by_role("option").filter(has_text="math ·").first
    option.click()
    from app.presets import presets

    math_prompt = next(text for label, text in presets().items() if label.startswith("math ·"))
    page.wait_for_function("p => document.querySelector('#prompt textarea').value === p", arg=math_prompt)
    a.run()
    ar, ss = a.text("ar-output"), a.text("ss-output")
    assert ar and ss and ar == ss  # lossless greedy: identical
    assert "identical" in page.inner_text("#equal-badge")
    assert "×" in page.inner_text("#speedup") and "speedup" in page.inner_text("#speedup")
    for elem_id in ("tree-plot", "accept-plot", "attn-plot", "mask-plot"):
        assert a.plot_points(elem_id) > 0, elem_id
    assert "step by step" in page.inner_text("#explain")
    # the step slider moves the tree, attention, mask and explanation to another pass
    page.fill("#step-slider input[type=number]", "1")
    page.press("#step-slider input[type=number]", "Enter")
    page.wait_for_function("() => document.querySelector('#tree-plot .js-plotly-plot').layout.title.text"
                           ".includes('pass 1<')", timeout=20_000)
    assert "Pass 1, step by step" in page.inner_text("#explain")

    with page.expect_download() as info:
        page.click("#trace-download")
    saved = tmp_path / "trace.json"
    info.value.save_as(saved)
    trace = json.loads(saved.read_text())
    assert trace["schema"] == "specstream-trace" and trace["steps"]
    assert trace["meta"]["baseline"]["output"]["text"].strip() == ar

    # replay in a fresh session: every view comes back, no model involved
    b = Page(browser, server)
    b.page.set_input_files("#trace-upload input[type=file]", str(saved))
    b.page.wait_for_selector("#lab-message .lab-info", timeout=30_000)
    assert "Replaying" in b.page.inner_text("#lab-message")
    b.page.wait_for_selector("#equal-badge .lab-badge.equal", timeout=30_000)
    assert b.text("ss-output") == ss and b.text("ar-output") == ar
    for elem_id in ("tree-plot", "accept-plot", "attn-plot", "mask-plot"):
        assert b.plot_points(elem_id) > 0, elem_id
    assert not a.errors and not b.errors, a.errors + b.errors
    a.close()
    b.close()


FIRST_SCREEN = """s => { const r = document.querySelector(s).getBoundingClientRect();
    return {top: r.top, left: r.left, bottom: r.bottom, right: r.right, height: r.height, scrollY: window.scrollY,
            width: window.innerWidth, innerHeight: window.innerHeight}; }"""


def _in_first_screen(page, selector: str) -> dict:
    box = page.evaluate(FIRST_SCREEN, selector)
    assert box["scrollY"] == 0 and box["height"] > 0, box
    assert box["top"] >= 0 and box["left"] >= 0, box
    assert box["bottom"] <= box["innerHeight"] and box["right"] <= box["width"], box
    return box


def _contrast(rgb: str, background: str = "rgb(255, 255, 255)") -> float:
    """WCAG contrast ratio of two CSS rgb() colours."""
    def luminance(css):
        parts = [int(float(v)) / 255 for v in css[css.index("(") + 1:css.index(")")].split(",")[:3]]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in parts]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted([luminance(rgb), luminance(background)], reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("width,height", [(1280, 720), (1920, 1080)])
def test_the_result_is_in_the_first_screen(server, browser, width, height):
    """On opening and after a race, the speedup, the output check, τ and each side's tokens/s are in view
    without scrolling; the settings are folded away; a custom prompt clears the preset; notes are readable."""
    p = Page(browser, server, width, height)
    page = p.page
    _in_first_screen(page, "#result")
    assert page.is_visible("#settings") and not page.is_visible("#topk")  # closed until opened
    assert not page.is_visible("#mode")  # one stream mode: nothing to choose
    assert page.input_value("#preset input")  # the first preset's prompt
    p.run("The history of the city begins")
    page.wait_for_function("() => document.querySelector('#preset input').value === ''", timeout=10_000)
    box = _in_first_screen(page, "#result")
    result = page.inner_text("#result")
    assert "×" in result and "speedup" in result and "identical" in result, result
    assert "τ" in result and "tokens/s" in result and "speculative (SS)" in result, result
    for selector in ("#speedup .lab-big", "#equal-badge .lab-badge", "#meters table"):
        _in_first_screen(page, selector)
    style = page.evaluate("() => { const s = getComputedStyle(document.querySelector('#meters .lab-note'));"
                          " return [parseFloat(s.fontSize), s.color]; }")
    assert style[0] >= 14 and _contrast(style[1]) >= 7, style
    p.open_settings()
    assert not p.errors, p.errors
    assert box["bottom"] <= height
    p.close()


def test_presenter_view_steps_with_the_keyboard(server, browser):
    """?presenter=1 opens the presenter view (large type, high contrast); ← and → step through the passes."""
    p = Page(browser, server + "?presenter=1", 1280, 720)
    page = p.page
    page.wait_for_function("() => document.body.classList.contains('lab-presenter')", timeout=10_000)
    assert page.is_checked("#presenter input")
    p.run()
    big = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#speedup .lab-big')).fontSize)")
    text = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#ss-output .lab-text')).fontSize)")
    assert big >= 56 and text >= 22, (big, text)
    slider = "#step-slider input[type=number]"
    page.wait_for_selector(f"{slider}:not([disabled])", timeout=20_000)
    last = int(float(page.get_attribute("#step-slider input[type=range]", "max")))
    start = int(float(page.input_value(slider)))
    p.plot_points("tree-plot")
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for key, want in (("ArrowRight", min(start + 1, last)), ("ArrowLeft", max(min(start + 1, last) - 1, 0)),
                      ("ArrowLeft", max(min(start + 1, last) - 2, 0))):
        page.keyboard.press(key)
        page.wait_for_function(
            "([s, w]) => { const d = document.querySelector('#tree-plot .js-plotly-plot');"
            " return Number(document.querySelector(s).value) === w && d && d.layout"
            " && new RegExp('pass ' + w + '[^0-9]').test(d.layout.title.text); }", arg=[slider, want], timeout=20_000)
    page.uncheck("#presenter input")  # off: the class goes, and the arrows step no more
    page.wait_for_function("() => !document.body.classList.contains('lab-presenter')", timeout=10_000)
    shown = page.input_value(slider)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press("ArrowRight" if int(float(shown)) < last else "ArrowLeft")
    page.wait_for_timeout(1500)
    assert page.input_value(slider) == shown
    assert not p.errors, p.errors
    p.close()


@pytest.mark.parametrize("name,content,needle", [
    ("garbage.json", b"{this is not json", "invalid JSON"),
    ("old.json", json.dumps({"schema": "specstream-trace", "version": 0}).encode(), "version 0"),
])
def test_malformed_upload_shows_message(server, browser, tmp_path, name, content, needle):
    p = Page(browser, server)
    bad = tmp_path / name
    bad.write_bytes(content)
    p.page.set_input_files("#trace-upload input[type=file]", str(bad))
    p.page.wait_for_selector("#lab-message .lab-error", timeout=30_000)
    shown = p.page.inner_text("#lab-message")
    assert "Cannot replay" in shown and needle in shown and "Traceback" not in shown
    assert "Traceback" not in p.page.content()
    assert not p.errors, p.errors
    p.close()


def test_bad_settings_show_a_message(server, browser):
    p = Page(browser, server)
    p.page.fill("#prompt textarea", "   ")
    p.page.click("#run button, button#run")
    p.page.wait_for_selector("#lab-message .lab-error", timeout=30_000)
    assert "empty" in p.page.inner_text("#lab-message")
    p.page.fill("#prompt textarea", "hello")
    p.open_settings()
    p.page.fill("#topk textarea, #topk input", "4,x")
    p.page.click("#run button, button#run")
    p.page.wait_for_function("() => document.querySelector('#lab-message').innerText.includes('topk')",
                             timeout=30_000)
    assert not p.errors, p.errors
    p.close()


def test_two_sessions_at_once_get_their_own_results(server, browser, lab_dir):
    prompts = [PROMPT, "### Task: math\n### Input:\nTom has 3 apples and buys 4 more. How many?\n### Output:\n"]
    pages = [Page(browser, server) for _ in prompts]
    for p, prompt in zip(pages, prompts):
        p.page.fill("#prompt textarea", prompt)
    for p in pages:  # both click before either finishes
        p.page.click("#run button, button#run")
    for p in pages:
        p.page.wait_for_selector("#equal-badge .lab-badge.equal, #equal-badge .lab-badge.differ",
                                 timeout=RUN_TIMEOUT_MS)
    texts = [p.text("ss-output") for p in pages]
    for p, text, expected in zip(pages, texts, expected_texts(lab_dir, prompts)):
        assert p.text("ar-output") == text and "identical" in p.page.inner_text("#equal-badge")
        assert text == expected
        assert not p.errors, p.errors
        p.close()
    assert texts[0] != texts[1]


def test_uploaded_script_never_runs(server, browser, lab_dir, tmp_path):
    """A trace carrying `<img src=x onerror=…>` in every string, in every number, or only in the stats the
    meters show (the old injection: new_tokens reached gr.HTML as it was) never runs its script."""
    from hostile import PAYLOAD, html_everywhere

    from app.race import race
    from specstream_core import DecodeConfig, Engine

    engine = Engine.load(lab_dir, streams_dir=os.path.join(lab_dir, "streams"))
    layers = tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))
    trace = list(race(engine, PROMPT, DecodeConfig(max_new_tokens=12, tree_topk=(3, 2, 1)),
                      attention_layers=layers))[-1].trace
    meters_only = json.loads(json.dumps(trace))
    meters_only["stats"].update(new_tokens=PAYLOAD, forward_passes=0, wall_s=0, tokens_per_s=0)
    cases = {"strings.json": (html_everywhere(trace), ".lab-info"),
             "numbers.json": (html_everywhere(trace, numbers_too=True), ".lab-error"),
             "meters.json": (meters_only, ".lab-error")}
    p = Page(browser, server)
    dialogs = []
    p.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for name, (data, shown) in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps(data))
        p.page.set_input_files("#trace-upload input[type=file]", str(path))
        p.page.wait_for_selector(f"#lab-message {shown}", timeout=30_000)
        if shown == ".lab-info":  # rendered: every view, the payload as text
            p.page.wait_for_selector("#ss-output .lab-text .tok", timeout=30_000)
            assert "onerror" in p.text("ss-output") and p.plot_points("tree-plot") > 0
        p.page.wait_for_timeout(500)  # an injected <img src=x> fails to load, and would run, within this
        assert p.page.evaluate("() => window.__xss") is None, name
        assert p.page.query_selector_all("img[src=x], img[onerror]") == [], name
        assert not dialogs, name
        p.page.reload()
        p.page.wait_for_selector("#run")
    p.close()

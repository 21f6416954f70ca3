"""The multi-lane race in a real browser on the default model (SmolLM2-135M-Instruct with its stream set, Medusa heads
and layer draft from assets/smollm2/): the real server (app.py, subprocess, 127.0.0.1) driven by headless Chromium
through playwright. Every lane is picked, the race (at 1280×720) finishes with every lane identical to
plain decoding, the result stays in the first screen and the console stays clean. Short races (16 new tokens).

Needs /usr/bin/chromium and the playwright package, as tests/test_app_browser.py (SPECSTREAM_ALLOW_NO_BROWSER=1
skips), and the default model converted in ~/.cache/specstream (skipped where it is not)."""

import os

import pytest

from helpers import free_port, serve_lab, headless_chromium, require_chromium

CHROMIUM = os.environ.get("SPECSTREAM_CHROMIUM", "/usr/bin/chromium")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
MAX_NEW = 16
LANES = ["fast", "teaching", "lookup", "medusa", "assisted"]  # and plain decoding, which always races
PROMPT = "List three uses of a lighthouse, one line each."


@pytest.fixture(scope="module", autouse=True)
def require_browser_and_model():
    require_chromium(CHROMIUM)
    from specstream_core.errors import SpecstreamError
    from specstream_core.model import default_model

    with pytest.MonkeyPatch.context() as mp:  # resolve as the server will, without the tests' opt-out
        mp.delenv("SPECSTREAM_DEFAULT_BASE", raising=False)
        try:
            default_model.resolve_default_base(progress=lambda *_: None)
        except SpecstreamError as exc:
            pytest.skip(f"the default model is not available here: {exc}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SPECSTREAM_DEFAULT_BASE", "SPECSTREAM_MODELS")}
    env.update(GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", GRADIO_ANALYTICS_ENABLED="False",
               HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1", PYTHONPATH=ROOT,
               SPECSTREAM_TRACES_DIR=str(tmp_path_factory.mktemp("no-traces")), SPECSTREAM_MAX_PER_IP="2",
               SPECSTREAM_LANES_PER_IP="12")  # every page here comes from 127.0.0.1
    yield from serve_lab(tmp_path_factory, env, port, limit=180)


@pytest.fixture(scope="module")
def browser():
    yield from headless_chromium(CHROMIUM, ARGS)


IN_VIEW = """s => { const r = document.querySelector(s).getBoundingClientRect();
    return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight && r.right <= window.innerWidth
           && window.scrollY === 0; }"""


def test_a_race_of_every_lane_on_the_default_model(server, browser):
    # long: one race (the slow part) at 1280×720, its result then checked at 1920×1080 too, then the views switched
    # to the teaching lane, whose pass the figure pack names, and no console error
    context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 720})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server)
    page.wait_for_selector("#lanes label")  # the picker's choices are drawn
    from app.lanes import LABELS

    offered = page.eval_on_selector_all("#lanes label", "els => els.map(e => e.innerText.trim())")
    assert offered == [LABELS[k] for k in LANES], offered  # every lane's assets are here: none left out
    assert "teaching draft" in page.inner_text("#lanes-note") and "4,3,2,1" in page.inner_text("#lanes-note")
    for lane in LANES:
        box = page.locator("#lanes label", has_text=LABELS[lane]).locator("input[type=checkbox]")
        if not box.is_checked():
            box.check()
    page.fill("#max-new input[type=number]", str(MAX_NEW))
    page.press("#max-new input[type=number]", "Enter")
    page.fill("#prompt textarea", PROMPT)
    page.evaluate("() => window.scrollTo(0, 0)")  # checking the boxes may have scrolled the page a little
    page.click("#run button, button#run")
    page.wait_for_selector("#equal-badge .lab-badge.equal, #equal-badge .lab-badge.differ", timeout=240_000)
    badge = page.inner_text("#equal-badge")
    assert "all 5 lanes identical to plain decoding" in badge and "int4-a8" in badge, badge
    rows = page.eval_on_selector_all("#meters tr[data-lane]", "els => els.map(e => [e.dataset.lane, "
                                     "e.querySelector('.lab-check').innerText])")
    assert [r[0] for r in rows] == ["plain", *LANES], rows
    assert all(check == "✔ identical" for _, check in rows[1:]), rows
    plain = page.inner_text("#ar-output .lab-text").strip()
    texts = page.eval_on_selector_all("#lane-outputs .lab-lane .lab-text", "els => els.map(e => e.innerText.trim())")
    assert len(texts) == 4 and all(t == plain for t in texts), (plain, texts)  # the lanes beside the shown one
    assert page.inner_text("#ss-output .lab-text").strip() == plain
    assert page.eval_on_selector_all("#lane-outputs .lab-lane .tok", "els => els.length") >= 4 * 3  # tinted by pass
    for size in ((1280, 720), (1920, 1080)):  # the same result, in the first screen at both sizes
        page.set_viewport_size({"width": size[0], "height": size[1]})
        for selector in ("#speedup .lab-big", "#equal-badge .lab-badge", "#meters table"):
            assert page.evaluate(IN_VIEW, selector), (size, selector)
    _views_follow_the_teaching_lane(page, LABELS["teaching"])
    assert not errors, errors
    context.close()


def _views_follow_the_teaching_lane(page, label):
    """The pass views switch to the teaching lane: its heading, the selected pass marked in both texts, and the
    figure pack of its pass names the lane."""
    page.click("#view-lane input")
    page.get_by_role("option").filter(has_text=label).first.click()
    page.wait_for_function("l => document.querySelector('#ss-heading').innerText.includes(l)", arg=label,
                           timeout=60_000)
    page.wait_for_selector("#ss-output .sel-pass", timeout=30_000)
    assert page.locator("#ar-output .sel-pass").count() > 0  # both texts mark the selected pass
    page.click("#figure-pack")
    page.wait_for_selector("#figure-pack-download:not([disabled])", timeout=60_000)
    assert "teaching draft" in page.inner_text("#lab-message")
    with page.expect_download(timeout=30_000) as info:
        page.click("#figure-pack-download")
    assert "-teaching-pass" in info.value.suggested_filename

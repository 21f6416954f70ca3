"""The lab's presenter replay, figure pack and share link in a real browser, at 1280×720 and 1920×1080: the real
server (app.py, subprocess, 127.0.0.1) with no model at all, replaying the default model's recorded trace of
the first preset on opening (a cold Space's view), driven by headless Chromium through playwright.

Needs /usr/bin/chromium (or SPECSTREAM_CHROMIUM) and the playwright package; without them these tests fail,
unless SPECSTREAM_ALLOW_NO_BROWSER=1 is set (then they are skipped).
"""

import io
import json
import os
import shutil
import xml.etree.ElementTree as ElementTree
import zipfile

import pytest

from helpers import free_port, serve_lab, headless_chromium, require_chromium

CHROMIUM = os.environ.get("SPECSTREAM_CHROMIUM", "/usr/bin/chromium")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
RECORDED = os.path.join(ROOT, "assets", "smollm2", "traces", "math-my-kid-is-stuck-on-this-one-can-you-walk-us-thr.json")
VIEWPORTS = [(1280, 720), (1920, 1080)]


@pytest.fixture(scope="module", autouse=True)
def require_browser():
    require_chromium(CHROMIUM)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app.presets import presets, slug

    traces = tmp_path_factory.mktemp("traces")
    shutil.copy(RECORDED, traces / (slug(next(iter(presets()))) + ".json"))  # the first preset's recorded run
    port = free_port()
    env = dict(os.environ, SPECSTREAM_MODELS="", SPECSTREAM_DEFAULT_BASE="none", SPECSTREAM_TRACES_DIR=str(traces),
               GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", GRADIO_ANALYTICS_ENABLED="False",
               HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1", PYTHONPATH=ROOT,
               SPECSTREAM_MAX_PER_IP="2")
    yield from serve_lab(tmp_path_factory, env, port)


@pytest.fixture(scope="module")
def browser():
    yield from headless_chromium(CHROMIUM, ARGS)


def open_page(browser, url, size):
    context = browser.new_context(accept_downloads=True, viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    # the recorded run replays on opening: the pass stepper comes alive and the texts fill
    page.wait_for_function("() => { const r = document.querySelector('#step-slider input[type=range]');"
                           " return r && !r.disabled && +r.max > 1; }", timeout=60_000)
    page.wait_for_selector("#ss-output .tok.sel-pass", timeout=30_000)
    return context, page, errors


def selected(page) -> int:
    """The pass outlined in the speculative text, once the slider agrees with it (the views have arrived)."""
    page.wait_for_function("() => { const r = document.querySelector('#step-slider input[type=range]');"
                           " const s = document.querySelector('#ss-output .tok.sel-pass');"
                           " return r && s && s.dataset.step === r.value; }", timeout=20_000)
    return int(page.get_attribute("#ss-output .tok.sel-pass", "data-step"))


def settled(page) -> int:
    """The selected pass once no step asked for before a pause is still arriving (two reads 1.5 s apart agree)."""
    now = selected(page)
    for _ in range(20):
        page.wait_for_timeout(1500)
        now, before = selected(page), now
        if now == before:
            return now
    raise AssertionError("the selected pass kept moving after the replay was paused")


def check_pack(path: str, index: int) -> None:
    """Every file of the pack opens: each PNG decodes, each SVG parses as XML, about.json names the pass."""
    from PIL import Image

    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        folder = f"pass-{index:03d}"
        expected = {f"{folder}/{fig}.{ext}" for fig in ("tree", "acceptance", "attention", "mask")
                    for ext in ("svg", "png")}
        assert expected <= names, names
        for name in names:
            data = z.read(name)
            if name.endswith(".png"):
                img = Image.open(io.BytesIO(data))
                img.load()
                assert img.width > 200 and img.height > 200, name
            elif name.endswith(".svg"):
                assert ElementTree.fromstring(data).tag.endswith("svg"), name
            else:
                assert json.loads(data)["pass"] == index


@pytest.mark.parametrize("size", VIEWPORTS, ids=lambda s: f"{s[0]}x{s[1]}")
def test_presenter_replay_figure_pack_and_share_link(server, browser, size, tmp_path):
    # long: one visit at one viewport: keys, Space, the figure pack, the share link, and no console error
    context, page, errors = open_page(browser, server + "?presenter=1", size)
    assert page.evaluate("() => document.body.classList.contains('lab-presenter')")
    start = selected(page)
    assert page.query_selector("#ar-output .tok.sel-pass") is not None  # the same tokens, in the plain text
    page.keyboard.press("ArrowRight")
    page.wait_for_function("v => document.querySelector('#ss-output .tok.sel-pass')?.dataset.step === String(v)",
                           arg=start + 1, timeout=20_000)
    assert selected(page) == start + 1
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("v => document.querySelector('#ss-output .tok.sel-pass')?.dataset.step === String(v)",
                           arg=start, timeout=20_000)
    # Space plays the replay (the passes advance on their own), Space again pauses it
    page.fill("#replay-speed input[type=number]", "4")
    page.press("#replay-speed input[type=number]", "Enter")
    page.click("#intro")  # the focus off the number field: keys go to the page
    page.keyboard.press(" ")
    assert page.evaluate("() => document.body.classList.contains('lab-playing')")
    page.wait_for_function("v => +document.querySelector('#step-slider input[type=range]').value >= v + 2",
                           arg=start, timeout=20_000)
    page.keyboard.press(" ")
    assert not page.evaluate("() => document.body.classList.contains('lab-playing')")
    assert settled(page) > start + 1
    # at the last pass, Play begins again at pass 0
    page.focus("#step-slider input[type=range]")
    page.keyboard.press("End")
    last = int(page.get_attribute("#step-slider input[type=range]", "max"))
    page.wait_for_function("v => document.querySelector('#ss-output .tok.sel-pass')?.dataset.step === String(v)",
                           arg=last, timeout=20_000)
    page.click("#replay-play")
    page.wait_for_function("() => +document.querySelector('#ss-output .tok.sel-pass')?.dataset.step < 3",
                           timeout=20_000)
    page.click("#replay-play")
    assert not page.evaluate("() => document.body.classList.contains('lab-playing')")
    paused = settled(page)
    # the figure pack of the selected pass downloads, and every file in it opens
    page.click("#figure-pack")
    page.wait_for_selector("#figure-pack-download:not([disabled])", timeout=30_000)
    with page.expect_download(timeout=30_000) as info:
        page.click("#figure-pack-download")
    pack = str(tmp_path / "pack.zip")
    info.value.save_as(pack)
    check_pack(pack, paused)
    # the share link reopens the trace, in a fresh tab, with its download
    page.click("#share")
    page.wait_for_function("() => document.querySelector('#share-link textarea, #share-link input')"
                           "?.value.includes('?trace=')", timeout=20_000)
    link = page.input_value("#share-link textarea, #share-link input")
    assert link.startswith(server + "?trace=")
    other = context.new_page()
    other.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    other.on("pageerror", lambda e: errors.append(str(e)))
    other.goto(link)
    other.wait_for_function("() => document.querySelector('#lab-message')?.innerText.includes('shared trace')",
                            timeout=30_000)
    assert other.inner_text("#ss-output .lab-text") == page.inner_text("#ss-output .lab-text")
    with other.expect_download(timeout=30_000) as info:
        other.click("#trace-download")
    shared = json.loads(open(info.value.path()).read())
    with open(RECORDED) as f:
        assert shared["output"]["text"] == json.load(f)["output"]["text"]
    # a link to nothing says so, without breaking the page
    other.goto(server + "?trace=AAAAAAAAAAAAAAAA")
    other.wait_for_function("() => document.querySelector('#lab-message')?.innerText.includes('no longer kept')",
                            timeout=30_000)
    # an example (a task preset) fills the prompt and replays the preset's recorded run
    from app.presets import presets

    label, prompt = next(iter(presets().items()))
    other.locator("#examples").get_by_text(label[:20]).first.click()
    other.wait_for_function("p => document.querySelector('#prompt textarea').value === p", arg=prompt, timeout=20_000)
    other.wait_for_function("() => document.querySelector('#lab-message')?.innerText.includes('A recorded run')",
                            timeout=30_000)
    assert errors == []
    context.close()

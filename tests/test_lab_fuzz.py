"""Fuzzing the lab's upload handler: hundreds of hostile variants of real traces (recorded on the tiny
lab model) — huge or negative numbers, wrong types, deep nesting, long chains, huge γ, HTML in every
string — each must be refused with one clear message or rendered, within 1 s of CPU (the best of up to
three timings) and 200 MB, with no exception escaping and no HTML from the trace in the page.

SPECSTREAM_FUZZ_CASES (default 600: about 20 s on two busy cores; 1000 took 36 s, 2000 57 s) and
SPECSTREAM_FUZZ_SEED (default 12) change the run."""

import json
import os
import random
import resource
import time
import tracemalloc

from hostile import mutate
from specstream_core import DecodeConfig
from helpers import LAB_PROMPT as PROMPT, component, handler

CASES = int(os.environ.get("SPECSTREAM_FUZZ_CASES", "600"))
SEED = int(os.environ.get("SPECSTREAM_FUZZ_SEED", "12"))
MAX_SECONDS, MAX_BYTES = 1.0, 200 * 2**20
TRACE_EVERY = 20


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Start the process's peak RSS afresh (Linux >= 4.0: '5' to clear_refs resets VmHWM). Under xdist a
    worker has run other test files before this one, and their peak must not count as this test's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int:
    """The peak RSS since the last reset (VmHWM), else the process's lifetime peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
HTML_OUTPUTS = ("ar-output", "ss-output", "meters", "speedup", "equal-badge", "lab-message")


def test_fuzz_upload_handler(replay_demo, engine_and_lock, tmp_path):
    from app.race import race

    engine, lock = engine_and_lock
    # short real runs keep each case cheap (the limits, not the seed, make a case expensive or not)
    layers = tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))
    short = list(race(engine, PROMPT, DecodeConfig(max_new_tokens=12, tree_topk=(3, 2, 1)), lock,
                      attention_layers=layers))[-1].trace
    plain = engine.generate(PROMPT, DecodeConfig(mode="ar", max_new_tokens=6, trace=True)).trace
    seeds = [short, plain]
    on_upload = handler(replay_demo, "on_upload")
    msg = component(replay_demo, "lab-message")
    rng = random.Random(SEED)
    path = tmp_path / "upload.json"
    outcomes = {"rendered": 0, "refused": 0}
    slowest, largest = (0.0, None), (0, None)
    path.write_text(json.dumps(short))
    assert "Replaying" in on_upload(str(path))[msg]  # warm-up: Plotly loads its validators on first use
    t_all = time.perf_counter()
    # from here on the peak is this test's: reset it, or where it cannot be reset, start from the old peak
    rss_start = current_rss() if reset_peak_rss() else peak_rss()
    for case in range(CASES):
        raw = mutate(rng.choice(seeds), rng)
        path.write_bytes(raw)
        where = f"case {case} (seed {SEED}): {raw[:300]!r}"
        # tracemalloc slows Python 3-5x and adds its own bookkeeping: a sample of the cases, each also
        # timed (loosely); every case is bounded by the peak-RSS check below
        traced = case % TRACE_EVERY == 0 and len(raw) < 2**20
        if traced:
            tracemalloc.start()
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            out = on_upload(str(path))  # raises nothing: that is the point
        finally:
            # the budget is the handler's own CPU time; wall time also counts the other processes on a
            # shared machine, so it only gets a loose bound
            elapsed, wall = time.thread_time() - c0, time.perf_counter() - t0
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
        if traced:
            assert peak < MAX_BYTES, f"{peak / 2**20:.0f} MB for {where}"
            assert elapsed < 5 * MAX_SECONDS, f"{elapsed:.2f} s (traced) for {where}"
            largest = max(largest, (peak, case))
        else:
            for _ in range(2):  # over budget: time it again (the bound is on the work, not on a neighbour's)
                if elapsed < MAX_SECONDS and wall < 3 * MAX_SECONDS:
                    break
                t0, c0 = time.perf_counter(), time.thread_time()
                on_upload(str(path))
                elapsed, wall = min(elapsed, time.thread_time() - c0), min(wall, time.perf_counter() - t0)
            assert elapsed < MAX_SECONDS and wall < 3 * MAX_SECONDS, f"{elapsed:.2f} s CPU, {wall:.2f} s for {where}"
            slowest = max(slowest, (elapsed, case))
        shown = out[msg]
        if "Cannot replay this file" in shown:
            outcomes["refused"] += 1
            # one clear line from validation, never the catch-all for an unexpected exception
            assert "does not follow the trace schema (" not in shown, where
            assert shown.count("<div") == 1 and "<img" not in shown, where
        else:
            outcomes["rendered"] += 1
            assert "Replaying" in shown, where
            for elem_id in HTML_OUTPUTS:
                assert "<img" not in out[component(replay_demo, elem_id)], f"{elem_id} in {where}"
    # every case, traced or not, stayed under the budget: the process's peak never rose MAX_BYTES above
    # where the run began
    rss_rise = peak_rss() - rss_start
    assert rss_rise < MAX_BYTES, f"peak RSS rose {rss_rise / 2**20:.0f} MB"
    total = time.perf_counter() - t_all
    print(f"fuzz: {CASES} cases in {total:.1f} s, {outcomes}; slowest {slowest[0] * 1000:.0f} ms CPU (case "
          f"{slowest[1]}), largest traced peak {largest[0] / 2**20:.1f} MB (case {largest[1]}), peak RSS rise "
          f"{rss_rise / 2**20:.0f} MB")
    assert outcomes["refused"] > CASES // 2 and outcomes["rendered"] > CASES // 50


def test_largest_valid_upload_is_fast(replay_demo, engine_and_lock, tmp_path):
    """A valid trace just under the upload cap (real steps with attention, repeated) renders within twice
    the per-case budget."""
    import copy

    from app.race import race
    from app.limits import MAX_UPLOAD_BYTES

    engine, lock = engine_and_lock
    layers = tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))
    real = list(race(engine, PROMPT, DecodeConfig(max_new_tokens=12, tree_topk=(3, 2, 1)), lock,
                     attention_layers=layers))[-1].trace
    steps = real["steps"][1:]
    per_step = len(json.dumps(steps)) / len(steps)
    big = copy.deepcopy(real)
    big["steps"] += [steps[i % len(steps)] for i in range(int(0.95 * MAX_UPLOAD_BYTES / per_step) - len(steps))]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    assert 0.9 * MAX_UPLOAD_BYTES < os.path.getsize(path) <= MAX_UPLOAD_BYTES
    on_upload, msg = handler(replay_demo, "on_upload"), component(replay_demo, "lab-message")
    on_upload(str(path))  # warm-up
    runs = []  # the best of three: the bound is on the work, and a shared CI machine adds up to 2x of noise
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.thread_time()
        shown = on_upload(str(path))[msg]
        runs.append((time.thread_time() - c0, time.perf_counter() - t0))
    cpu, wall = min(runs)
    print(f"largest upload: {os.path.getsize(path) / 2**20:.1f} MB, {len(big['steps'])} passes: {cpu:.2f} s CPU, "
          f"{wall:.2f} s")
    # twice the per-case budget: on this kind of shared host the same replay measured 0.65-1.0 s of CPU
    # an hour apart (its memory bandwidth moved ~2x); the lab's own bound is UPLOAD_TIME_LIMIT_S
    assert "Replaying" in shown and cpu < 2 * MAX_SECONDS and wall < 6 * MAX_SECONDS

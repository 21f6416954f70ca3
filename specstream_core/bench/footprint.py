"""What an engine costs to start: per precision, a fresh process loads the engine and decodes a short answer
(`footprint_child`), and reports its load time and peak resident memory; llama.cpp's `llama-bench` on the same GGUF
file beside it, where one is found.

Each measurement is its own process, so every figure is what a one-question command pays: the interpreter and its
imports, the weights read and packed, one answer. Each precision is measured twice in a kernel cache folder of its own
(`measure_starts`): the first start packs the kernel layouts and writes them to it, the cached start loads them.
Peak memory is the process's own high-water mark (VmHWM, else ru_maxrss); for llama-bench the ru_maxrss `wait4` returns for it, which on Linux also counts this small launching
process's resident memory at the spawn (tens of MB: no torch here). Only the standard library here: the children
load torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from specstream_core.bench.llama_bench import find as find_llama_bench  # noqa: F401 - the one finder, shared with speed

PRECISIONS = ("auto", "int4", "fp32", "bf16")  # auto: the default (int4-a8 on the default model where VNNI runs)


# a start that packs the kernel layouts (an empty kernel cache, no engine image), one that loads them (a full start,
# which leaves the engine's image where it can have one), one from that image (`decoding.engine_image`)
STARTS = ("first", "cached", "image")


def measure(precision: str, base: str | None = None, streams: str | None = None, tokens: int = 16,
            threads: int | None = None, timeout: float = 600, pack_dir: str | None = None, image: bool = True) -> dict:
    """One fresh process's figures (`footprint_child.measure`) plus its wall time; {"asked", "error"} where it could
    not run (a precision this CPU cannot run, a process that failed). pack_dir: the kernel cache's packed layouts
    (and engine images) there ($SPECSTREAM_PACK_DIR) instead of the usual folder; image: False turns images off."""
    argv = [sys.executable, "-m", "specstream_core.bench.footprint_child", "--precision", precision,
            "--tokens", str(tokens), "--started", repr(time.time())]
    argv += ["--base", base] if base else []
    argv += ["--streams", streams] if streams else []
    env = {**_env(threads), **({"SPECSTREAM_PACK_DIR": pack_dir} if pack_dir else {}),
           **({} if image else {"SPECSTREAM_IMAGE": "0"})}
    code, out, err, wall, _ = run_measured(argv, env, timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"asked": precision, "error": f"the measuring process failed (exit {code}): {tail}"}
    row = json.loads(lines[-1])
    row["wall_s"] = round(wall, 3)
    return row


def measure_starts(precision: str, base: str | None = None, streams: str | None = None, tokens: int = 16,
                   threads: int | None = None, timeout: float = 600) -> list[dict]:
    """`measure` in a kernel cache folder of its own, first empty: the first start (it packs the layouts and writes
    them; no image), a cached start (it loads them, and leaves the engine's image where it can have one), and, where it
    did, a start from that image. Each row says which in "start"."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="specstream-footprint-") as folder:
        for start in STARTS:
            if start == "image" and not rows[-1].get("has_image"):
                break
            row = measure(precision, base, streams, tokens, threads, timeout, pack_dir=folder, image=start != "first")
            rows.append({**row, "start": start})
    return rows


def llama_bench(binary: str, gguf: str, tokens: int = 16, threads: int = 1, timeout: float = 600) -> dict:
    """llama.cpp's `llama-bench` generating `tokens` tokens on `gguf` (no prompt): its wall time, peak RSS and the
    tokens/s it reports."""
    argv = [binary, "-m", gguf, "-p", "0", "-n", str(tokens), "-t", str(threads), "-r", "1", "-o", "json"]
    code, out, err, wall, maxrss_kb = run_measured(argv, dict(os.environ), timeout)
    if code != 0:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"asked": "llama.cpp", "error": f"llama-bench failed (exit {code}): {tail}"}
    row = {"asked": "llama.cpp", "precision": "llama.cpp " + os.path.basename(gguf), "wall_s": round(wall, 3),
           "peak_rss_mb": round(maxrss_kb / 1024, 1)}
    try:
        rows = json.loads(out)
        row["tokens_per_s"] = round(float(rows[-1]["avg_ts"]), 1)
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    return row


def run_measured(argv: list[str], env: dict, timeout: float) -> tuple[int, str, str, float, int]:
    """(exit status, stdout, stderr, wall seconds, the process's peak RSS in KiB from `wait4`) of one process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, text=True)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), wall, usage.ru_maxrss


def _env(threads: int | None) -> dict:
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = ["| precision | start | wall | imports | load | answer | peak RSS | layouts packed |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        start = r.get("start", "-")
        if "error" in r:
            lines.append(f"| {r['asked']} | {start} | not measured: {r['error']} | | | | | |")
            continue
        name = r["precision"] + (f" (asked {r['asked']})" if r.get("asked") not in (None, r["precision"], "llama.cpp") else "")
        cell = lambda key, unit="s": f"{r[key]:.2f} {unit}" if key in r else "-"  # noqa: E731
        answer = cell("decode_s") if "decode_s" in r else (f"{r['tokens_per_s']} tok/s" if "tokens_per_s" in r else "-")
        lines.append(f"| {name} | {start} | {cell('wall_s')} | {cell('imports_s')} | {cell('load_s')} | {answer} | "
                     f"{r['peak_rss_mb']:.0f} MB | {r.get('layouts_packed', '-')} |")
    return "\n".join(lines)

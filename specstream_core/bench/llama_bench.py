"""llama.cpp's own `llama-bench` on a GGUF file: finding the binary, running it, reading its `-o json` output.

llama-bench times llama.cpp's forward passes alone: `tg N` generates N tokens one pass each from an empty context,
`pp P` evaluates a P-token prompt in one batch. No Python, no tokenizer, no sampling loop: what llama.cpp's C++
costs, against which `speed` sets the Python binding's rate and our own generation rate (`generation_rate`).
Only the standard library here (`footprint` imports it too).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess

ENV = "SPECSTREAM_LLAMA_BENCH"  # a path (or a name on PATH) of the binary, where it is not on PATH
NOTE = "generation only, no Python, no tokenizer"
NOT_FOUND = f"llama-bench not found (on PATH, ${ENV} or --llama-bench)"


def find(given: str | None = None) -> str | None:
    """The `llama-bench` to run: the one given (a path or a name on PATH), else $SPECSTREAM_LLAMA_BENCH, else one on
    PATH, else None."""
    given = given or os.environ.get(ENV, "").strip() or None
    if given:
        return shutil.which(given) or (given if os.path.isfile(given) and os.access(given, os.X_OK) else None)
    return shutil.which("llama-bench")


def argv(binary: str, gguf: str, n_prompt: int, n_gen: int, threads: int, repetitions: int = 5) -> list[str]:
    """One llama-bench run: a `pp n_prompt` test and a `tg n_gen` test (either left out at 0), JSON on stdout."""
    return [binary, "-m", gguf, "-p", str(n_prompt), "-n", str(n_gen), "-t", str(threads),
            "-r", str(repetitions), "-o", "json"]


def parse(text: str) -> dict[str, dict]:
    """llama-bench's `-o json` output -> {"pp": test, "tg": test} for the tests it ran, each {"tokens":
    n_prompt or n_gen, "samples_ts": tokens/s per repetition, "tokens_per_s": their median, "threads",
    "build_commit", "model_type"}. A combined test (`-pg`) is left out. ValueError where the text is not such
    output."""
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"llama-bench's output is not JSON: {exc}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "avg_ts" in r for r in rows):
        raise ValueError("llama-bench's output is not a list of tests with avg_ts")
    out = {}
    for r in rows:
        n_prompt, n_gen = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0))
        if (n_prompt > 0) == (n_gen > 0):
            continue
        samples = [float(x) for x in r.get("samples_ts") or [r["avg_ts"]]]
        out["pp" if n_prompt else "tg"] = {
            "tokens": n_prompt or n_gen, "samples_ts": samples, "tokens_per_s": statistics.median(samples),
            "threads": r.get("n_threads"), "build_commit": r.get("build_commit", ""),
            "model_type": r.get("model_type", "")}
    return out


def run(binary: str, gguf: str, n_prompt: int, n_gen: int, threads: int, repetitions: int = 5,
        timeout: float = 600) -> dict:
    """Run llama-bench once; its tests (`parse`), or ValueError with its last stderr line where it failed."""
    try:
        proc = subprocess.run(argv(binary, gguf, n_prompt, n_gen, threads, repetitions), capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"llama-bench did not run: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"llama-bench failed (exit {proc.returncode}): {tail}")
    return parse(proc.stdout)


def row(threads: int, runs: list[dict[str, dict]], binary: str, gguf: str) -> dict:
    """The `speed` row of llama-bench at `threads`, from one or more runs (their samples pooled: a run before and
    one after the Python methods, so a machine that slows down in between weighs on both sides)."""
    out = {"method": "llama-bench", "threads": threads, "binary": binary, "gguf": os.path.basename(gguf),
           "note": NOTE}
    for test in ("tg", "pp"):
        got = [r[test] for r in runs if test in r]
        if got:
            samples = [x for g in got for x in g["samples_ts"]]
            out[f"{test}_tokens"] = got[0]["tokens"]
            out[f"{test}_tokens_per_s"] = round(statistics.median(samples), 2)
            out[f"{test}_samples_ts"] = [round(x, 2) for x in samples]
            out["build_commit"] = got[0]["build_commit"]
            out["model_type"] = got[0]["model_type"]
    return out


def missing(threads: int, reason: str) -> dict:
    """The row that says, in one line, why llama-bench did not run."""
    return {"method": "llama-bench", "threads": threads, "error": reason}


def label(r: dict) -> str:
    """'tg64 93.3, pp128 184.0 tokens/s (generation only, no Python, no tokenizer)', or the row's error."""
    if "error" in r:
        return f"not run: {r['error']}"
    tests = [f"{t}{r[f'{t}_tokens']} {r[f'{t}_tokens_per_s']:.1f}" for t in ("tg", "pp") if f"{t}_tokens" in r]
    return f"{', '.join(tests)} tokens/s ({NOTE})"


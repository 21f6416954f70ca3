"""A/B runs: the working tree's code against another revision's (or one tree under two sets of engine options),
on the same prompts, alternating per prompt, medians, and the same tokens checked.

Each side is a worker process (`bench/ab_worker.py`, its source passed to `python -c`) importing the package from
its own source tree: the working tree, or the other revision extracted with `git archive` into a temporary
directory. The workers load one engine each; the runner sends them the same token ids (encoded by both, checked
equal) and `bench`'s loop (`runner.run_benchmark`) alternates them per prompt after a warm-up run, so neither
always goes first. Every `generate` is timed end to end inside its worker.

Per precision and decoding mode the result is each side's median tokens/s over prompts, the median of the
per-prompt ratio B / A with its quartiles, and on how many prompts the two sides gave the same tokens.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field

from specstream_core.bench.runner import Method, Row, run_benchmark
from specstream_core.errors import SpecstreamError

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ab_worker.py")
# option key -> Engine.load keyword; the other keys are DecodeConfig fields (the draft), besides "precision"
LOAD_KEYS = {"streams": "streams_dir", "stream_weights": "stream_weights", "kernel": "kernel", "chat": "chat"}
DECODE_KEYS = {"topk": "tree_topk", "node_budget": "node_budget", "lookup": "lookup", "ngrams": "ngrams",
               "prune_threshold": "prune_threshold"}


@dataclass
class Side:
    label: str
    tree: str  # the source tree whose specstream_core the worker imports
    options: dict = field(default_factory=dict)  # "precision", LOAD_KEYS and DECODE_KEYS keys

    def load(self) -> dict:
        return {LOAD_KEYS[k]: v for k, v in self.options.items() if k in LOAD_KEYS}

    def decode(self) -> dict:
        return {DECODE_KEYS[k]: v for k, v in self.options.items() if k in DECODE_KEYS}


def parse_options(items: list[str] | None) -> dict:
    """["precision=fp32", "topk=[2,2,1]", "ngrams=false"] -> {key: value}; values read as JSON where they are."""
    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in {"precision", *LOAD_KEYS, *DECODE_KEYS}:
            raise SpecstreamError(f"engine option {item!r}: expected KEY=VALUE with KEY one of precision, "
                                  f"{', '.join([*LOAD_KEYS, *DECODE_KEYS])}")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text.strip()
    return out


# ---- the other revision's tree ----------------------------------------------------------------------
def resolve_revision(root: str, rev: str) -> str:
    """`rev`'s short commit hash in the git repository at `root`."""
    try:
        done = subprocess.run(["git", "-C", root, "rev-parse", "--short", f"{rev}^{{commit}}"], capture_output=True,
                              text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SpecstreamError(f"--against {rev}: not a commit of the git repository at {root} "
                              f"({getattr(exc, 'stderr', '') or exc})".strip()) from None
    return done.stdout.strip()


@contextlib.contextmanager
def revision_tree(root: str, commit: str):
    """A temporary directory holding `commit`'s package (`git archive`), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"specstream-ab-{commit}-") as tmp:
        try:
            data = subprocess.run(["git", "-C", root, "archive", "--format=tar", commit, "--", "specstream_core"], capture_output=True,
                                  check=True).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SpecstreamError(f"git archive {commit} failed: {exc}") from None
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        yield tmp


# ---- the workers ----------------------------------------------------------------------------------------
class Worker:
    """One side's process: requests and replies as JSON lines (bench/ab_worker.py)."""

    def __init__(self, side: Side, threads: int):
        self.side = side
        with open(WORKER) as f:
            source = f.read()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [side.tree, os.environ.get("PYTHONPATH")])),
                   OMP_NUM_THREADS=str(threads))
        self.proc = subprocess.Popen([sys.executable, "-c", source], cwd=side.tree, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def call(self, **request) -> dict:
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            raise SpecstreamError(f"side {self.side.label}: its worker exited (status {self.proc.poll()}); "
                                  "see its messages above")
        reply = json.loads(line)
        if "error" in reply:
            raise SpecstreamError(f"side {self.side.label}: {reply['error']}")
        return reply

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _method(worker: Worker, name: str, settings: dict, reference: str, walls: dict) -> Method:
    """A `runner.Method` decoding in `worker`; it also keeps (tokens, wall s) per prompt in walls[name]."""
    def run(ids):
        r = worker.call(op="generate", ids=ids, settings=settings)
        walls.setdefault(name, []).append((r["tokens"], r["wall_s"]))
        return r["tokens"], r["wall_s"], r["passes"]

    return Method(name, run, reference=reference)


def _encoded(workers: list[Worker], texts: dict[str, list[str]], max_new: int) -> dict[str, list[list[int]]]:
    """category -> token ids of its prompts, the same on both sides (else the comparison is off)."""
    out = {}
    for category, items in texts.items():
        out[category] = []
        for text in items:
            a, b = (w.call(op="encode", text=text, max_new_tokens=max_new)["ids"] for w in workers)
            if a != b:
                raise SpecstreamError(f"the two sides encode a {category} prompt differently: compare one thing at a time")
            out[category].append(a)
    return out


def run_ab(sides: tuple[Side, Side], base: str, texts: dict[str, list[str]], precisions: list[str],
           modes: list[str], max_new: int, threads: int = 1, progress: bool = True) -> tuple[list[dict], list[Row]]:
    """Per precision (unless both sides set their own) and mode: one summary dict and `run_benchmark`'s rows
    (per category, side B's speedup over A and its tokens against A's)."""
    own = all("precision" in s.options for s in sides)
    summaries, rows = [], []
    for precision in (["/".join(dict.fromkeys(s.options["precision"] for s in sides))] if own else precisions):
        workers = [Worker(s, threads) for s in sides]
        try:
            loaded = [w.call(op="load", base=base, threads=threads, load=w.side.load(),
                             precision=w.side.options.get("precision", precision))["precision"] for w in workers]
            prompts = _encoded(workers, texts, max_new)
            for mode in modes:
                walls: dict = {}
                a, b = (f"{mode} {s.label}" for s in sides)
                methods = [_method(w, f"{mode} {w.side.label}", {"mode": mode, "max_new_tokens": max_new,
                                                                  **w.side.decode()},
                                   reference=a, walls=walls) for w in workers]
                rows += run_benchmark(prompts, methods, baseline=a, progress=progress, precision=precision,
                                      desc=f"ab {precision} {mode}")
                summaries.append(summarize(walls[a], walls[b], mode=mode, precision=precision, sides=sides,
                                           loaded=loaded))
        finally:
            for w in workers:
                w.close()
    return summaries, rows


def summarize(a: list[tuple], b: list[tuple], **about) -> dict:
    """Medians of two sides' per-prompt (tokens, wall s), measured runs only (the warm-up run is first)."""
    a, b = a[1:], b[1:]
    speed_a = [len(t) / max(1e-9, s) for t, s in a]
    speed_b = [len(t) / max(1e-9, s) for t, s in b]
    ratios = sorted(y / max(1e-9, x) for x, y in zip(speed_a, speed_b))
    q = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    sides = about.pop("sides")
    return {**about, "a": sides[0].label, "b": sides[1].label,
            "a_options": sides[0].options, "b_options": sides[1].options,
            "a_tokens_per_s": round(statistics.median(speed_a), 2), "b_tokens_per_s": round(statistics.median(speed_b), 2),
            "ratio_median": round(statistics.median(ratios), 4), "ratio_p25": round(q[0], 4), "ratio_p75": round(q[2], 4),
            "ratio_min": round(ratios[0], 4), "ratio_max": round(ratios[-1], 4),
            "same_tokens": sum(x[0] == y[0] for x, y in zip(a, b)), "prompts": len(a)}


def markdown(summaries: list[dict]) -> str:
    lines = ["| precision | mode | A | B | A tokens/s | B tokens/s | B / A (median) | quartiles | range | same tokens |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s['precision']} | {s['mode']} | {s['a']} | {s['b']} | {s['a_tokens_per_s']:.1f} | "
                     f"{s['b_tokens_per_s']:.1f} | {s['ratio_median']:.3f}× | {s['ratio_p25']:.3f}–{s['ratio_p75']:.3f} | "
                     f"{s['ratio_min']:.3f}–{s['ratio_max']:.3f} | {s['same_tokens']}/{s['prompts']} |")
    return "\n".join(lines)

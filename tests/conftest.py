import os
import sys
import warnings

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("SPECSTREAM_DEFAULT_BASE", "none")  # tests use tiny models, never the 135M default
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))

import torch  # noqa: E402

# tiny models: one thread is as fast, and avoids OpenMP spin-waits when another process shares the cores
torch.set_num_threads(1)
warnings.filterwarnings("ignore", message=".*fresh, untrained speculative streams.*")

import pytest  # noqa: E402

from helpers import LAB_PROMPT, lab_models_env, make_lab_model  # noqa: E402


# ---- the lab's fixtures (a tiny model saved to disk, its engine, a race on it and the trace it records) ----
@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory):
    return make_lab_model(str(tmp_path_factory.mktemp("lab-tiny")))


@pytest.fixture(scope="module")
def engine_and_lock(lab_dir):
    from app.models import EngineCache, parse_specs

    cache = EngineCache(parse_specs(lab_models_env(lab_dir)))
    return cache.get("tiny", "lossless")


@pytest.fixture(scope="module")
def race_view(engine_and_lock):
    from app.race import race
    from specstream_core import DecodeConfig

    engine, lock = engine_and_lock
    layers = tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))
    return list(race(engine, LAB_PROMPT, DecodeConfig(max_new_tokens=40, tree_topk=(3, 2, 1)), lock,
                     min_interval=0.0, attention_layers=layers))


@pytest.fixture(scope="module")
def trace(race_view):
    return race_view[-1].trace


@pytest.fixture(scope="module")
def replay_demo():
    from app.ui import build_demo

    return build_demo({})  # replay only: no model


# ---- what the run proved on this host: the kernel paths that ran, the ones skipped and why ------------------
def _kernel_paths() -> list[str]:
    """One line per kernel path. Reads only what the session already loaded: a run that never loaded the kernel
    (no kernel test ran) says so instead of compiling it for this summary."""
    from specstream_core.kernels import builder

    have = builder.cpu_flags()
    host = ("AVX-512" if "avx512f" in have else "AVX2" if "avx2" in have else "neither AVX-512 nor AVX2") + (
        ", VNNI" if "avx512_vnni" in have else "") + (", AMX" if "amx_tile" in have else "")
    from specstream_core.kernels import library
    from specstream_core.kernels.linears import rowinv

    if library._why is None and not library.built():  # no test of this run (or its workers) built the kernel
        return [f"host CPU: {host}", "row-invariant kernel: not built (no test of this run needed it)"]
    if not rowinv.available():
        return [f"host CPU: {host}", f"row-invariant kernel: skipped ({rowinv.unavailable_reason()}); "
                "int4-a8 and AMX tiles skipped with it"]
    from specstream_core.kernels import amx_tiles
    from specstream_core.kernels.linears import int4_a8

    isa = {"avx512": "AVX-512", "avx2": "AVX2"}.get(rowinv.isa(), rowinv.isa() or "none")
    vnni = "ran" if int4_a8.available() else (
        "skipped (the kernel's build has no AVX512-VNNI" + ("" if "avx512_vnni" in have else ": the CPU lacks it") + ")")
    amx = "ran" if amx_tiles.amx(rowinv.library()) else "skipped (" + (
        "SPECSTREAM_AMX=0" if not amx_tiles.AMX else "the CPU lacks amx_tile" if "amx_tile" not in have
        else "the kernel's build or the OS does not enable them") + ")"
    return [f"host CPU: {host}", f"row-invariant kernel: ran, {isa} build", f"int4-a8 (VNNI): {vnni}",
            f"bf16 on AMX tiles: {amx}"]


def _skip_reasons(stats: dict) -> list[tuple[int, str]]:
    counts: dict[str, int] = {}
    for report in stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        counts[reason] = counts.get(reason, 0) + 1
    return sorted(((n, r) for r, n in counts.items()), reverse=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    tr.write_sep("-", "kernel paths on this host")
    try:
        for line in _kernel_paths():
            tr.write_line(line)
    except Exception as exc:  # the summary must never turn a run's result into an error
        tr.write_line(f"(could not read the kernel's state: {type(exc).__name__}: {exc})")
    skipped = _skip_reasons(tr.stats)
    if skipped:
        tr.write_line(f"skipped tests by reason ({sum(n for n, _ in skipped)}):")
        for n, reason in skipped:
            tr.write_line(f"  {n:4d}  {reason}")


@pytest.fixture
def capture_rounds_differently(monkeypatch):
    """A capturing pass that computes other numbers than the fast path (as eager attention and the module path
    do, off the kernel's whole-layer steps): the captured layers' attention output is perturbed while captured.
    Capturing inside the decoding's own passes then changes its drafts."""
    from contextlib import contextmanager

    from specstream_core.model import msa

    original = msa._capture

    @contextmanager
    def capture(layers, layer_ids):
        handles = []
        if layer_ids:
            def nudge(module, args, output):
                return (output[0] * 1.5 + 0.05, *output[1:])
            handles = [layers[li].self_attn.register_forward_hook(nudge) for li in layer_ids]
        try:
            with original(layers, layer_ids) as captured:
                yield captured
        finally:
            for h in handles:
                h.remove()

    monkeypatch.setattr(msa, "_capture", capture)

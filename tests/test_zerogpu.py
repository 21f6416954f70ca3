"""ZeroGPU: the lab's race run as `spaces.GPU` runs it, in a forked worker with its arguments and
results pickled across the process boundary (app/zerogpu.py mirrors spaces/zero/wrappers.py; the real
wrapper needs ZeroGPU's device API and CUDA, so it cannot run here)."""

import os
import pickle
import threading

import pytest

from specstream_core.model.streams import StreamParams
from tiny_models import tiny_model

PROMPT = "### Task: sql\n### Input:\nCREATE TABLE t (id INTEGER, name TEXT)\nQuestion: names?\n### Output:\n"


def _lab_model(path: str) -> str:
    """A tiny Llama with a byte-level tokenizer and fresh streams, saved to `path`."""
    from specstream_core.tasks import load_split
    from specstream_core.training.tokenizer_build import build_tokenizer

    tok = build_tokenizer([e["prompt"] + e["reference"] for e in load_split("eval", n=10)], vocab_size=400)
    tok.save_pretrained(path)
    model = tiny_model("llama", seed=5, vocab=len(tok), max_position_embeddings=1024, bos_token_id=0,
                       eos_token_id=0, pad_token_id=0)
    model.save_pretrained(path)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, seed=1)
    streams.save(os.path.join(path, "streams"))
    streams.detach()
    return path


@pytest.fixture(scope="module")
def zero_demo(tmp_path_factory):
    """A lab built as on ZeroGPU: the model loaded at module level (before any worker forks)."""
    from app.models import ModelSpec
    from app.ui import build_demo

    path = _lab_model(str(tmp_path_factory.mktemp("zero-lab")))
    specs = {"tiny": ModelSpec("tiny", path, {"lossless": os.path.join(path, "streams")}, precision="fp32")}
    os.environ["SPECSTREAM_ZEROGPU_SIM"] = "1"
    try:
        demo = build_demo(specs, preload=True)
    finally:
        del os.environ["SPECSTREAM_ZEROGPU_SIM"]
    demo.lab_cache = _cache_of(demo)
    return demo


def _cache_of(demo):
    """The engine cache of this demo's Lab (the run handler's bound Lab)."""
    from app.handlers import CACHES

    bound = _handler(demo, "on_run")
    lab = next(c.cell_contents for c in bound.__closure__ if type(c.cell_contents).__name__ == "Lab")
    assert CACHES[lab.key] is lab.cache
    return lab.cache


def _handler(demo, name):
    return next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == name)


def _component(demo, elem_id):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_the_stand_in_refuses_what_zerogpu_cannot_pickle():
    from app.zerogpu import pickling_worker

    @pickling_worker
    def task(x):
        yield x

    with pytest.raises((pickle.PicklingError, TypeError)):
        list(task(threading.Lock()))
    assert list(task({"plain": [1, 2.5, "x"]})) == [{"plain": [1, 2.5, "x"]}]


def test_an_error_in_the_worker_reaches_the_caller():
    import gradio as gr
    from app.zerogpu import pickling_worker

    @pickling_worker
    def task():
        raise ValueError("boom")

    with pytest.raises(gr.Error, match="ValueError"):
        task()


def test_the_race_runs_in_a_pickling_worker(zero_demo, monkeypatch):
    """on_run through the stand-in: admission here, the race in a forked worker that was given plain
    arguments only and sent back plain views; the page gets the same race as without ZeroGPU."""
    from app import handlers, zerogpu

    worker_pids = []

    def race_payloads(*args):
        for views in handlers.race_payloads(*args):
            yield {**views, "pid": os.getpid()}

    def run_race(*args):
        for views in zerogpu.pickling_worker(race_payloads)(*args):
            worker_pids.append(views.pop("pid"))
            yield views

    monkeypatch.setattr(handlers, "run_race", run_race)
    cache = zero_demo.lab_cache
    assert cache.loaded() == [("tiny", "lossless")]  # loaded in this process, before the fork
    outs = list(_handler(zero_demo, "on_run")("tiny", "lossless", PROMPT, "2,1", 0.0, 16, 0, 0.0, 0, 12, None))
    assert worker_pids and set(worker_pids) != {os.getpid()}
    last = outs[-1]
    badge = last[_component(zero_demo, "equal-badge")]
    assert 'data-equal="true"' in badge, badge
    assert last[_component(zero_demo, "trace-download")]["value"].endswith(".json")
    assert last[_component(zero_demo, "lab-message")] == ""


def test_a_refusal_in_the_worker_is_a_message(zero_demo, monkeypatch):
    from app import handlers, zerogpu

    monkeypatch.setattr(handlers, "run_race", zerogpu.pickling_worker(handlers.race_payloads))
    outs = list(_handler(zero_demo, "on_run")("nope", "lossless", PROMPT, "1", 0.0, 8, 0, 0.0, 0, 4, None))
    assert "unknown model" in outs[-1][_component(zero_demo, "lab-message")]


def test_zerogpu_loads_at_module_level_without_cuda_work(zero_demo, monkeypatch):
    """On ZeroGPU build_demo loads the default model before it returns, in the caller's thread, and runs
    no warm-up pass (the main process of a ZeroGPU Space cannot run CUDA); elsewhere a thread loads and
    warms it while the page opens."""
    from app import ui
    from specstream_core import Engine

    spec = zero_demo.lab_cache.specs["tiny"]
    passes, loaders = [], []
    real_generate, real_preload = Engine.generate, ui._preload
    monkeypatch.setattr(Engine, "generate", lambda self, *a, **k: passes.append(a) or real_generate(self, *a, **k))

    def preload(*args):
        loaders.append(threading.current_thread())
        real_preload(*args)

    monkeypatch.setattr(ui, "_preload", preload)
    monkeypatch.setenv("SPECSTREAM_ZEROGPU_SIM", "1")
    demo = ui.build_demo({"tiny": spec}, preload=True)
    assert loaders == [threading.current_thread()] and not passes
    assert _cache_of(demo).loaded() == [("tiny", "lossless")]
    monkeypatch.delenv("SPECSTREAM_ZEROGPU_SIM")
    ui.build_demo({"tiny": spec}, preload=True)
    for _ in range(600):
        if len(loaders) == 2:
            break
        threading.Event().wait(0.1)
    loaders[-1].join(timeout=60)
    assert loaders[-1] is not threading.current_thread() and len(passes) == 2  # warm-up: ar and ss

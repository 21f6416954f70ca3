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

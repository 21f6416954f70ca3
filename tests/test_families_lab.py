"""The lab offers a Qwen3 model once the host configures one (SPECSTREAM_MODELS), its model line says which path
the layers take, and its race runs: plain and speculative output equal, the meters naming the path that ran."""

import json

import pytest

from specstream_core import DecodeConfig
from specstream_core.model import families
from tiny_models import save_tiny_family_dir


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_configured_qwen3_is_listed_and_its_race_runs(tmp_path):
    from app.models import EngineCache, available_specs
    from app.race import outputs_equal, race
    from app.render import model_info, render_meters

    base = save_tiny_family_dir(tmp_path / "qwen3", "qwen3")
    env = {"SPECSTREAM_MODELS": json.dumps({"qwen3-tiny": {"base": base, "precision": "fp32", "gamma": 3}})}
    specs = available_specs(env)
    assert "qwen3-tiny" in specs and specs["qwen3-tiny"].base == base
    line = model_info(specs["qwen3-tiny"], "lossless")
    assert "precision fp32" in line
    if not families.FAMILIES["qwen3"].kernel_steps:  # the model line says so before the model loads
        assert "layers: module path (Qwen3: RMSNorm on q and k per head)" in line, line
    engine, lock = EngineCache({"qwen3-tiny": specs["qwen3-tiny"]}).get("qwen3-tiny", "lossless")
    final = list(race(engine, "hello world", DecodeConfig(max_new_tokens=12, stop_on_eos=False), lock,
                      min_interval=0.0))[-1]
    assert final.finished and outputs_equal(final) and final.ss.stats["new_tokens"] == 12
    assert " · layers: " in final.linears and "layers: " in render_meters(final), final.linears

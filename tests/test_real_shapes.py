"""Random models at real checkpoints' shapes (bench/real_shapes.py): the configs are those checkpoints' sizes, and a
model is made Linear by Linear, on the kernel, with nothing left on the meta device."""

from __future__ import annotations

import pytest
import torch

from specstream_core import DecodeConfig
from specstream_core.bench import real_shapes
from specstream_core.errors import SpecstreamError
from specstream_core.kernels.linears import rowinv
from specstream_core.kernels.steps import layer_forms

needs_kernel = pytest.mark.skipif(not rowinv.available(), reason=f"kernel unavailable: {rowinv.unavailable_reason()}")


@pytest.mark.parametrize("name,billions", [("qwen3-0.6b", 0.596), ("gemma-3-1b", 1.000), ("phi-4-mini", 3.836)])
def test_the_shapes_have_their_checkpoints_sizes(name, billions):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(real_shapes.config_of(name))
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(billions, abs=0.001)


@needs_kernel
@pytest.mark.parametrize("name,precision,covered", [("qwen3-0.6b", "int4", True), ("phi-4-mini", "fp32", True),
                                                    ("gemma-3-1b", "int4", False)])
def test_a_small_copy_of_each_shape_decodes_on_the_kernel(name, precision, covered, monkeypatch):
    """The same builder at a few layers and a narrow width: every tensor made, the Linears on the kernel, the family's
    layers on its whole-layer steps where the kernel computes them, and speculative output equal to plain output."""
    model_type, fields = real_shapes.SHAPES[name]
    small = {**fields, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 3, "vocab_size": 512,
             "pad_token_id": 0}
    if "head_dim" in fields:
        small["head_dim"] = 32 if fields["head_dim"] <= 128 else 64
    if "num_attention_heads" in fields and name == "phi-4-mini":
        small.update(num_attention_heads=4, num_key_value_heads=2)  # head 32, 3/4 of it rotated
    monkeypatch.setitem(real_shapes.SHAPES, name, (model_type, small))
    engine = real_shapes.random_engine(name, precision, gamma=2, n_stream_layers=1)
    assert rowinv.uses_kernel(engine.model)
    assert layer_forms.kernel_covers(engine.model)[0] == (covered and rowinv.available())
    ids = list(range(3, 40))
    outs = [engine.generate(ids, DecodeConfig(mode=m, max_new_tokens=6, stop_on_eos=False)).token_ids
            for m in ("ar", "ss")]
    assert outs[0] == outs[1]


def test_unknown_shapes_and_precisions_are_refused():
    with pytest.raises(SpecstreamError, match="qwen3-0.6b"):
        real_shapes.config_of("llama-70b")
    with pytest.raises(SpecstreamError, match="int4"):
        real_shapes.random_model("qwen3-0.6b", "nf4")


@needs_kernel
def test_pass_cost_measures_a_random_shape_on_the_cpu_clock(monkeypatch, tmp_path):
    """`pass-cost --random-shape`: the run names the shape, the layers' path, the clock, the command and the host."""
    import json

    from specstream_core.bench import clocks
    from specstream_core.cli import main

    model_type, fields = real_shapes.SHAPES["qwen3-0.6b"]
    monkeypatch.setitem(real_shapes.SHAPES, "qwen3-0.6b", (model_type, {
        **fields, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "head_dim": 32,
        "vocab_size": 512}))
    out = tmp_path / "pc.json"
    try:
        rc = main(["pass-cost", "--random-shape", "qwen3-0.6b", "--precisions", "int4", "--gamma", "1", "--context",
                   "8", "--repeats", "1", "--verify-rows", "2", "--clock", "cpu", "--no-progress", "--json", str(out)])
    finally:
        clocks.use("wall")
    assert rc == 0
    saved = json.loads(out.read_text())
    assert "--random-shape qwen3-0.6b" in saved["command"] and "cores" in saved["host"]
    (run,) = saved["runs"]
    settings = run["settings"]
    assert settings["model"] == "random qwen3-0.6b" and settings["clock"] == "cpu"
    assert settings["layers"] == "whole-layer kernel steps" and run["passes"][0]["median_ms"] > 0
    assert main(["pass-cost", "--random-shape", "qwen3-0.6b", "--base", "x", "--no-progress"]) == 2

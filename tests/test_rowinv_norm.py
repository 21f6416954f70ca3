"""Llama-form RMSNorms on the row-invariant kernel (`rowinv.rmsnorm`): one call instead of ~7 torch ops,
the module's result to rounding, each row alone, torch outside decoding."""

import copy

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.kernels.linears import rowinv
from tiny_models import prompts, tiny_model

pytestmark = pytest.mark.skipif(not rowinv.available(), reason=f"kernel unavailable: {rowinv.unavailable_reason()}")


def test_kernel_rms_norm_is_the_modules_norm_each_row_alone_and_torch_outside():
    model = tiny_model("llama", seed=3)
    reference = copy.deepcopy(model.model.norm)
    rowinv.install(model, "rowinv")
    norm = model.model.norm
    assert type(norm).__name__ == "RowInvariantLlamaRMSNorm" and isinstance(norm, type(reference))
    x = torch.randn(3, 7, model.config.hidden_size) * 4
    with torch.inference_mode():
        out = norm(x)
        assert torch.allclose(out, reference(x), rtol=1e-5, atol=1e-6)
        assert all(torch.equal(norm(x[i:i + 1, j:j + 1])[0, 0], out[i, j]) for i in range(3) for j in range(7))
        with rowinv.torch_linears():  # transformers as it ships
            assert torch.equal(norm(x), reference(x))
    x.requires_grad_(True)
    norm(x).sum().backward()  # gradients: the module's own forward
    assert x.grad is not None


def test_kernel_norms_keep_plain_decoding_equal_to_transformers_generate():
    from tiny_models import hf_greedy

    model = tiny_model("qwen2", seed=3)  # decisive logits: rounding never decides a token
    reference = [hf_greedy(model, ids, 12) for ids in prompts(4, seed=4)]
    rowinv.install(model, "rowinv")
    assert type(model.model.layers[0].input_layernorm).__name__ == "RowInvariantQwen2RMSNorm"
    engine = Engine(model, None, None)
    ar = DecodeConfig(mode="ar", max_new_tokens=12, stop_on_eos=False)
    assert [engine.generate(ids, ar).token_ids for ids in prompts(4, seed=4)] == reference

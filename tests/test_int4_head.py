"""Why int4 on a GGUF-converted base (the default model) keeps an 8-bit head: its decoder layers are the file's own
Q4_1 groups and its head the file's own Q8_0 groups, each the fp32 model's weights exactly, so int4 decodes the
fp32 model's tokens; a 4-bit head (those weights quantized again) is a change of weights, and output leaves the
fp32 model's. On a tiny model written as a GGUF file, with logits unscaled so that near-ties decide tokens."""

import copy

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.linears import int4, rowinv
from helpers import write_tiny_gguf
from tiny_models import prompts, tiny_model

pytestmark = pytest.mark.skipif(not rowinv.available(), reason="the 8-bit head runs on the row-invariant kernel")
N, NEW = 12, 24


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory):
    pytest.importorskip("gguf")
    model = tiny_model("llama", seed=4, logit_scale=1.0, hidden=64, layers=2)
    path = write_tiny_gguf(model, str(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))  # the model: the file's weights
    fp32 = copy.deepcopy(model)
    rowinv.install(fp32)
    return model, int4.gguf_groups(path, model), _decode(Engine(fp32, None, None, precision="fp32"))


def _decode(engine) -> list[list[int]]:
    cfg = DecodeConfig(mode="ar", max_new_tokens=NEW, stop_on_eos=False)
    return [engine.generate(ids, cfg).token_ids for ids in prompts(N, seed=8)]


def _int4(gguf_model, head: str):
    model, groups, _ = gguf_model
    model = copy.deepcopy(model)
    report = int4.quantize_model(model, groups, head=head)
    return model, report


def test_the_files_8_bit_head_keeps_the_fp32_models_tokens(gguf_model):
    model, report = _int4(gguf_model, "q8")
    assert report["head"] == "q8" and report["head_from_file"] and report["from_file"] == report["layers"]  # every Linear the file's, the head too
    assert isinstance(model.lm_head, int8_head.Int8Linear)
    assert _decode(Engine(model, None, None, precision="int4")) == gguf_model[2]


def test_an_fp32_head_keeps_them_too_and_a_4_bit_head_does_not(gguf_model):
    fp32_head, _ = _int4(gguf_model, "fp32")
    assert _decode(Engine(fp32_head, None, None, precision="int4")) == gguf_model[2]
    head4, report = _int4(gguf_model, "int4")
    assert report["head"] == "int4" and isinstance(head4.lm_head, int4.Int4Linear)
    assert not torch.equal(head4.lm_head.dequantized()[:, :64], fp32_head.lm_head.weight[:, :64])
    outputs = _decode(Engine(head4, None, None, precision="int4"))
    assert sum(a != b for a, b in zip(outputs, gguf_model[2])) > 0  # the one change of weights shows in the tokens

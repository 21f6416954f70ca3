"""Families the engine cannot run yet are refused in one line that names what is missing, at load, before any
weight is read (the checkpoints below hold only their config.json: reading weights would fail otherwise)."""

import pytest

from specstream_core import Engine, SpecstreamError, cli
from specstream_core.model.loading import load_config
from tiny_models import tiny_config

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)


def _configs() -> dict:
    """model_type -> (config, what the refusal names)."""
    from transformers import (BartConfig, Gemma3Config, LlavaConfig, MixtralConfig, Qwen2VLConfig, Qwen3MoeConfig,
                              T5Config)

    moe, multimodal, encdec = "mixture-of-experts", "multimodal", "encoder-decoder"
    return {
        "qwen3_moe": (Qwen3MoeConfig(**SMALL, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32), moe),
        "mixtral": (MixtralConfig(**SMALL, num_local_experts=4), moe),
        "t5": (T5Config(vocab_size=128, d_model=64, d_ff=128, num_layers=2, num_heads=4), encdec),
        "bart": (BartConfig(vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1), encdec),
        "gemma3": (Gemma3Config(text_config=tiny_config("gemma3_text").to_dict()), multimodal),
        "llava": (LlavaConfig(text_config=tiny_config("llama").to_dict()), multimodal),
        "qwen2_vl": (Qwen2VLConfig(), multimodal),
    }


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    out = {}
    for model_type, (config, missing) in _configs().items():
        path = tmp_path_factory.mktemp(model_type)
        config.save_pretrained(path)  # the config alone: no weights to read
        out[model_type] = (str(path), missing)
    return out


def test_refused_in_one_line_naming_what_is_missing(refused):
    for model_type, (path, missing) in refused.items():
        with pytest.raises(SpecstreamError) as err:
            load_config(path)
        message = str(err.value)
        assert "\n" not in message and repr(model_type) in message and missing in message, message
        assert "supported families" in message or "gemma3_text" in message, message
    gemma = str(pytest.raises(SpecstreamError, load_config, refused["gemma3"][0]).value)
    assert "'gemma3_text'" in gemma  # the text model alone runs: the refusal says so


def test_refused_at_load_before_the_weights(refused):
    """Engine.load and the command line stop at the config: the message is the refusal, not a missing-weights error."""
    path, missing = refused["qwen3_moe"]
    with pytest.raises(SpecstreamError, match=missing):
        Engine.load(path, precision="fp32")


def test_the_command_line_prints_the_one_line(refused, capsys):
    path, missing = refused["t5"]
    assert cli.main(["generate", "--base", path, "--prompt", "hello", "--precision", "fp32"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unsupported architecture 't5'") and missing in err and "\n" not in err, err

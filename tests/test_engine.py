"""Cache invariants, lossless/shared-mode logits, traces and the MSA forward's shapes."""

import json

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.model import msa
from specstream_core.model.masks import causal_visibility
from specstream_core.decoding.trace import load_trace, validate
from helpers import perturbed_streams
from tiny_models import prompts, tiny_model


def hf_cache(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=True).past_key_values


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_cache_equals_fresh_prefill_after_every_step(family):
    model = tiny_model(family, seed=2)
    streams = perturbed_streams(model)
    engine = Engine(model, None, streams)
    for ids in prompts(3, seed=4):
        dec = engine.start(ids, DecodeConfig(mode="ss", max_new_tokens=20, stop_on_eos=False,
                                                             prune_threshold=0.02))
        while not dec.done:
            dec.step()
            accepted = ids + dec.output[:-1]  # the last emitted token is pending, not yet cached
            assert dec.cache.lengths == [len(accepted)]
            ref = hf_cache(model, accepted)
            for layer in range(model.config.num_hidden_layers):
                k, v = dec.cache.valid(layer)
                torch.testing.assert_close(k, ref.layers[layer].keys[0], atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(v, ref.layers[layer].values[0], atol=1e-4, rtol=1e-4)
    streams.detach()


def test_lossless_streams_leave_main_logits_identical():
    model = tiny_model("llama", seed=2)
    ids = torch.tensor([prompts(1, seed=1)[0]])
    with torch.no_grad():
        plain = model(ids).logits
        streams = perturbed_streams(model, adapter_rank=8)  # row adapters now wrap the top layers
        attached = model(ids).logits
        n = ids.shape[1]
        pos = torch.arange(n)[None]
        out = msa.forward(model, ids, pos, causal_visibility(n), streams=streams, carriers=pos)
        with_streams = model.lm_head(out.main)
    assert torch.equal(plain, attached)
    torch.testing.assert_close(with_streams, plain, atol=1e-5, rtol=1e-5)  # same math, other batching
    assert with_streams.argmax(-1).equal(plain.argmax(-1))
    streams.detach()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, plain)


def test_shared_mode_changes_logits_only_through_lora(tmp_path):
    from specstream_core.decoding.engine import apply_shared_lora
    from specstream_core.training.config import TrainConfig
    from specstream_core.training.streams import build_streams

    model = tiny_model("llama", seed=2)
    ids = torch.tensor([prompts(1, seed=1)[0]])
    with torch.no_grad():
        plain = model(ids).logits.clone()
    peft_model, streams = build_streams(model, TrainConfig(mode="shared", gamma=2, lora_rank=4))
    with torch.no_grad():
        assert torch.equal(peft_model(ids).logits, plain)  # LoRA B starts at zero: no change yet
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
        changed = peft_model(ids).logits
        assert not torch.allclose(changed, plain)
        with peft_model.disable_adapter():
            assert torch.equal(peft_model(ids).logits, plain)
    streams.save(str(tmp_path))
    with streams.unwrapped():  # the row adapters wrap the LoRA's Linears: save it under its own names
        peft_model.save_pretrained(str(tmp_path / "lora"))
    merged = apply_shared_lora(tiny_model("llama", seed=2), str(tmp_path))
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, changed, atol=1e-4, rtol=1e-4)


def test_streams_save_and_load_roundtrip(tmp_path):
    model = tiny_model("llama", seed=2)
    streams = perturbed_streams(model, adapter_rank=4)
    streams.save(str(tmp_path))
    state = streams.state_tensors()
    streams.detach()
    loaded = StreamParams.load(str(tmp_path), model)
    for k, v in loaded.state_tensors().items():
        assert torch.equal(v, state[k]), k
    assert not any(f.suffix in (".bin", ".pt", ".pkl") for f in tmp_path.iterdir())
    loaded.detach()


def test_trace_schema_and_attention_maps(tmp_path):
    model = tiny_model("llama", seed=2)
    streams = perturbed_streams(model, gamma=3)
    engine = Engine(model, None, streams)
    cfg = DecodeConfig(mode="ss", max_new_tokens=12, stop_on_eos=False, trace=True, attention_layers=(2, 3),
                       prune_threshold=0.05, attention_context=256)
    result = engine.generate(prompts(1, seed=3)[0], cfg)
    trace = json.loads(json.dumps(result.trace))  # JSON-serialisable
    validate(trace)
    assert trace["output"]["token_ids"] == result.token_ids
    emitted = [t for step in trace["steps"] for t in step["emitted"]]
    assert emitted == result.token_ids
    step = trace["steps"][1]
    assert step["nodes"][0]["parent"] == -1 and step["accepted"][0] == 0
    assert set(step["time_ms"]) == {"draft", "verify", "accept"}
    attn = step["attention"]
    assert set(attn["layers"]) == {"2", "3"}
    heads = attn["layers"]["2"]
    assert len(heads) == model.config.num_attention_heads and len(heads[0]) == 3
    assert len(heads[0][0]) == len(attn["columns"]) == attn["context_len"] + 3
    for row in heads[0]:
        assert abs(sum(row) - 1.0) < 1e-3  # every stream row's attention lies within the shown columns
    # stream j never attends to later sibling streams
    assert heads[0][0][attn["context_len"] + 1] == 0.0
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    assert load_trace(str(path))["steps"] == trace["steps"]
    streams.detach()


def test_attention_capture_off_by_default_and_restored():
    model = tiny_model("llama", seed=2)
    streams = perturbed_streams(model)
    engine = Engine(model, None, streams)
    before = [layer.self_attn.config._attn_implementation for layer in model.model.layers]
    engine.generate(prompts(1)[0], DecodeConfig(mode="ss", max_new_tokens=6, trace=True, attention_layers=(3,)))
    assert [layer.self_attn.config._attn_implementation for layer in model.model.layers] == before
    result = engine.generate(prompts(1)[0], DecodeConfig(mode="ss", max_new_tokens=6))
    assert result.trace is None
    streams.detach()


def test_training_shape_forward():
    model = tiny_model("llama", seed=2)
    streams = perturbed_streams(model, gamma=3)
    B, T = 2, 10
    ids = torch.randint(3, 100, (B, T))
    pos = torch.arange(T).expand(B, T)
    out = msa.forward(model, ids, pos, causal_visibility(T, B), streams=streams, carriers=pos)
    assert out.main.shape == (B, T, 64) and out.streams.shape == (B, T, 3, 64)
    assert out.rows_top == T * 4 and out.rows_bottom == T
    # stream j of position t sees nothing after t: changing later tokens leaves it unchanged
    ids2 = ids.clone()
    ids2[:, 6:] = 7
    out2 = msa.forward(model, ids2, pos, causal_visibility(T, B), streams=streams, carriers=pos)
    torch.testing.assert_close(out.streams[:, :6], out2.streams[:, :6])
    streams.detach()

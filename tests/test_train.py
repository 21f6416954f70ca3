"""Stream training: the loss falls in both modes; lossless training never touches a base weight."""

import json

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.train import TrainConfig, evaluate_streams, pack, train
from tiny_models import tiny_model


def periodic_data(n=200, seed=0):
    """Sequences that repeat a short random pattern: the future is predictable, so streams can learn."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        period = int(torch.randint(2, 5, (1,), generator=g))
        pattern = torch.randint(3, 128, (period,), generator=g).tolist()
        seq = (pattern * 20)[:32]
        pairs.append((seq[:6], seq[6:]))
    return pack(pairs, 64)


@pytest.mark.parametrize("mode", ["lossless", "shared"])
def test_training_lowers_the_loss(mode, tmp_path):
    model = tiny_model("llama", seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(mode=mode, gamma=3, n_stream_layers=2, adapter_rank=4, lora_rank=4, steps=80, batch_size=8,
                      seq_len=64, lr=5e-3, warmup=5, precision="fp32", checkpoint_every=0, log_every=5)
    data = periodic_data()
    summary = train(model, cfg, data, str(tmp_path), eval_data=data, progress=False, log=lambda *a: None)
    losses = [h["loss"] for h in summary["history"]]
    assert sum(losses[-3:]) / 3 < 0.92 * sum(losses[:3]) / 3, losses
    saved = json.loads((tmp_path / "streams_config.json").read_text())
    assert saved["mode"] == mode and saved["trained_steps"] == 80
    if mode == "lossless":
        # row adapters stay attached after training: base Linears now sit under "<name>.base"
        after = {k.replace(".base.", "."): v for k, v in model.state_dict().items() if "lora_" not in k}
        assert set(after) == set(before)
        assert all(torch.equal(before[k], after[k]) for k in before), "a base weight changed"
    else:
        assert (tmp_path / "lora" / "adapter_config.json").exists()
    assert summary["eval"]["tau_estimate"] >= 1.0


def test_trained_streams_reload_decode_exactly(tmp_path):
    model = tiny_model("llama", seed=0, logit_scale=1.0)
    cfg = TrainConfig(mode="lossless", gamma=3, n_stream_layers=2, adapter_rank=4, steps=30, batch_size=8,
                      seq_len=64, lr=5e-3, warmup=5, precision="fp32", checkpoint_every=0)
    data = periodic_data()
    train(model, cfg, data, str(tmp_path), progress=False, log=lambda *a: None)
    fresh = tiny_model("llama", seed=0, logit_scale=1.0)
    streams = StreamParams.load(str(tmp_path), fresh)
    engine = Engine(fresh, None, streams)
    ids = data[0][0, :10].tolist()
    ar = engine.generate(ids, DecodeConfig(mode="ar", max_new_tokens=20, stop_on_eos=False))
    ss = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=20, stop_on_eos=False))
    assert ss.token_ids == ar.token_ids
    metrics = evaluate_streams(fresh, streams, *data)
    assert len(metrics["stream_top1"]) == 3


def test_resume_continues_from_checkpoint(tmp_path):
    data = periodic_data()
    cfg = TrainConfig(mode="lossless", gamma=2, n_stream_layers=1, adapter_rank=0, steps=20, batch_size=4,
                      seq_len=64, precision="fp32", checkpoint_every=10)
    train(tiny_model("llama", seed=0), TrainConfig(**{**cfg.__dict__, "steps": 10}), data, str(tmp_path),
          progress=False, log=lambda *a: None)
    messages = []
    summary = train(tiny_model("llama", seed=0), cfg, data, str(tmp_path), resume=True, progress=False,
                    log=messages.append)
    assert messages and "resumed from step 10" in messages[0]
    assert summary["steps"] == 20

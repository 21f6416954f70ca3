"""Stream training: the loss falls in both modes; lossless training never touches a base weight."""

import json
from dataclasses import replace

import pytest
import torch

from specstream_core import DecodeConfig, Engine, SpecstreamError, StreamParams
from specstream_core.training.data import pack_examples as pack
from specstream_core.training.config import TrainConfig
from specstream_core.training.evaluate import evaluate_streams
from specstream_core.training.streams import train
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


def test_shared_lora_on_top_layers_only_trains_them(tmp_path):
    """`lora_layers` <= Ns: LoRA sits in the stream layers only, the lower layers' output is reused, the loss falls."""
    model = tiny_model("llama", seed=0)
    n = len(model.model.layers)
    cfg = TrainConfig(mode="shared", gamma=3, n_stream_layers=2, lora_rank=4, lora_layers=2, steps=60, batch_size=8,
                      seq_len=64, lr=5e-3, warmup=5, precision="fp32", checkpoint_every=0, log_every=5)
    assert cfg.frozen_bottom and not replace(cfg, lora_layers=0).frozen_bottom
    data = periodic_data()
    summary = train(model, cfg, data, str(tmp_path), eval_data=data, progress=False, log=lambda *a: None)
    losses = [sum(h[f"s{j}"] for j in (1, 2, 3)) for h in summary["history"]]  # the main term starts at 0 (KL)
    assert sum(losses[-3:]) / 3 < 0.92 * sum(losses[:3]) / 3, losses
    adapted = {int(k.split("layers.")[1].split(".")[0]) for k, _ in model.named_parameters() if "lora_" in k}
    assert adapted == {n - 2, n - 1}
    config = json.loads((tmp_path / "lora" / "adapter_config.json").read_text())
    assert config["layers_to_transform"] == [n - 2, n - 1]


def test_shared_main_rows_are_anchored_to_the_base_distribution(tmp_path):
    """main_target="kl": before training the adapted model is the base (LoRA B = 0), so the main term is 0;
    trained with a separate LoRA learning rate, the term stays small and the LoRA does move."""
    from specstream_core.training.objectives import StreamObjective
    from specstream_core.training.streams import build_streams, param_groups

    model = tiny_model("llama", seed=0)
    cfg = TrainConfig(mode="shared", gamma=2, n_stream_layers=2, lora_rank=4, lora_layers=2, steps=30, batch_size=8,
                      seq_len=64, lr=5e-3, lora_lr=1e-3, warmup=5, precision="fp32", checkpoint_every=0)
    peft_model, streams = build_streams(model, cfg)
    ids, weight = periodic_data(n=8)
    _, parts = StreamObjective(peft_model, streams, cfg)(ids, weight)
    assert float(parts["main"]) == pytest.approx(0.0, abs=1e-6)
    assert [g["lr"] for g in param_groups(peft_model, streams, cfg)] == [5e-3, 1e-3]
    with pytest.raises(SpecstreamError, match="main-target"):
        replace(cfg, main_target="soft")
    model = tiny_model("llama", seed=0)
    summary = train(model, cfg, periodic_data(), str(tmp_path), progress=False, log=lambda *a: None)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.detach().abs().max()) > 0 for p in lora_b), "the LoRA never moved"
    mains = [h["main"] for h in summary["history"] if "main" in h]
    assert mains and 0 < max(mains) < 1.0, mains


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


def test_shared_set_with_row_adapters_reloads_and_decodes_exactly(tmp_path):
    """Shared mode keeps the streams' row adapters beside the LoRA: the LoRA is saved under its own module
    names (not the adapters' `.base.`), merges into a fresh model, and speculative output equals plain."""
    from safetensors.torch import load_file

    from specstream_core.model.lora import apply_shared_lora

    model = tiny_model("llama", seed=0, logit_scale=1.0)
    cfg = TrainConfig(mode="shared", gamma=3, n_stream_layers=2, adapter_rank=4, lora_rank=4, lora_layers=2, steps=30,
                      batch_size=8, seq_len=64, lr=5e-3, warmup=5, precision="fp32", checkpoint_every=0)
    data = periodic_data()
    train(model, cfg, data, str(tmp_path), progress=False, log=quiet)
    keys = list(load_file(str(tmp_path / "lora" / "adapter_model.safetensors")))
    assert keys and not any(".base." in k for k in keys), keys[:3]
    fresh = apply_shared_lora(tiny_model("llama", seed=0, logit_scale=1.0), str(tmp_path))
    streams = StreamParams.load(str(tmp_path), fresh)
    assert streams.cfg.mode == "shared" and streams.adapters
    engine = Engine(fresh, None, streams)
    ids = data[0][0, :10].tolist()
    ar = engine.generate(ids, DecodeConfig(mode="ar", max_new_tokens=20, stop_on_eos=False))
    ss = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=20, stop_on_eos=False))
    assert ss.token_ids == ar.token_ids
    with torch.no_grad():  # the merged LoRA is the trained one: logits moved away from the untouched base
        assert not torch.allclose(fresh(torch.tensor([ids])).logits,
                                  tiny_model("llama", seed=0, logit_scale=1.0)(torch.tensor([ids])).logits)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int4"])
def test_a_shared_set_loads_at_each_cpu_precision_with_its_lora_merged_first(precision, tmp_path):
    """Engine.load merges the LoRA into the fp32 weights before int4 or the CPU kernel take them: the model
    differs from the base at that precision, and speculative output equals plain decoding."""
    from tiny_models import save_tiny_model_dir

    base = save_tiny_model_dir(tmp_path / "base")
    from transformers import AutoModelForCausalLM

    cfg = TrainConfig(mode="shared", gamma=3, n_stream_layers=2, adapter_rank=4, lora_rank=4, lora_layers=2, steps=10,
                      batch_size=8, seq_len=64, lr=5e-3, warmup=5, precision="fp32", checkpoint_every=0)
    data = periodic_data()
    train(AutoModelForCausalLM.from_pretrained(base), cfg, data, str(tmp_path / "set"), progress=False, log=quiet)
    engine = Engine.load(base, str(tmp_path / "set"), precision=precision)
    plain = Engine.load(base, None, precision=precision, fresh_streams=False)
    ids = data[0][0, :10].tolist()
    with torch.no_grad():
        moved = (engine.model(torch.tensor([ids])).logits - plain.model(torch.tensor([ids])).logits).abs().max()
    assert float(moved) > 1e-2
    ar = engine.generate(ids, DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False))
    ss = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=16, stop_on_eos=False))
    assert ss.token_ids == ar.token_ids


RESUME_CFG = TrainConfig(mode="lossless", gamma=2, n_stream_layers=1, adapter_rank=2, steps=20, batch_size=4,
                         seq_len=64, precision="fp32", checkpoint_every=10, warmup=30)  # warm-up > steps: the
# learning rate of the first 10 steps does not depend on `steps`, so 10 steps + 10 resumed = 20 straight


def quiet(*a):
    pass


def read_checkpoint(out):
    return torch.load(out / "checkpoint" / "checkpoint.pt", weights_only=True)


def assert_same_state(a, b):
    """Bit-identical trainable tensors, optimizer and scheduler state, and data order."""
    assert a["step"] == b["step"]
    assert set(a["streams"]) == set(b["streams"])
    assert all(torch.equal(a["streams"][k], b["streams"][k]) for k in a["streams"])
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and all(
        sa[i].keys() == sb[i].keys() and all(torch.equal(torch.as_tensor(sa[i][k]), torch.as_tensor(sb[i][k]))
                                             for k in sa[i]) for i in sa)
    assert a["scheduler"] == b["scheduler"]
    assert torch.equal(a["data_rng"], b["data_rng"])


@pytest.mark.parametrize("mode", ["lossless", "shared"])
def test_resume_continues_from_checkpoint_bit_identically(mode, tmp_path):
    """Weights, optimizer, scheduler and batch order come back: 10 steps + 10 resumed = 20 straight."""
    data = periodic_data()
    cfg = replace(RESUME_CFG, mode=mode, lora_rank=2)
    straight = tmp_path / "straight"
    train(tiny_model("llama", seed=0), cfg, data, str(straight), progress=False, log=quiet)
    resumed = tmp_path / "resumed"
    train(tiny_model("llama", seed=0), replace(cfg, steps=10), data, str(resumed), progress=False, log=quiet)
    assert read_checkpoint(resumed)["step"] == 10
    messages = []
    summary = train(tiny_model("llama", seed=0), cfg, data, str(resumed), resume=True, progress=False,
                    log=messages.append)
    assert any("resumed from step 10" in m for m in messages)
    assert any("steps changed from 10 to 20" in m for m in messages)
    assert summary["steps"] == 20
    assert_same_state(read_checkpoint(resumed), read_checkpoint(straight))
    assert (resumed / "streams.safetensors").read_bytes() == (straight / "streams.safetensors").read_bytes()
    if mode == "shared":
        lora = "lora/adapter_model.safetensors"
        saved = read_checkpoint(resumed)["lora"]
        assert saved and set(saved) == set(read_checkpoint(straight)["lora"])
        assert all(torch.equal(saved[k], read_checkpoint(straight)["lora"][k]) for k in saved)
        assert (resumed / lora).read_bytes() == (straight / lora).read_bytes()


def test_a_checkpoint_older_than_a_new_setting_resumes_when_the_setting_is_at_its_default(tmp_path):
    """Settings added later (main_target, lora_lr) are absent from older checkpoints: at their defaults they
    match (the older run had no other), changed they do not."""
    from specstream_core.training import checkpoint

    data = periodic_data()
    train(tiny_model("llama", seed=0), replace(RESUME_CFG, steps=10), data, str(tmp_path), progress=False, log=quiet)
    path = tmp_path / "checkpoint" / "checkpoint.pt"
    state = read_checkpoint(tmp_path)
    for key in ("main_target", "lora_lr"):
        del state["identity"]["settings"][key]
    checkpoint.save_atomic(state, str(path))
    with pytest.raises(SpecstreamError, match="lora_lr"):
        train(tiny_model("llama", seed=0), replace(RESUME_CFG, lora_lr=1e-3), data, str(tmp_path), resume=True,
              progress=False, log=quiet)
    summary = train(tiny_model("llama", seed=0), RESUME_CFG, data, str(tmp_path), resume=True, progress=False,
                    log=quiet)
    assert summary["steps"] == RESUME_CFG.steps


def test_a_time_budget_stop_leaves_a_checkpoint_to_resume_from(tmp_path):
    data = periodic_data()
    summary = train(tiny_model("llama", seed=0), replace(RESUME_CFG, minutes=1e-9), data, str(tmp_path),
                    progress=False, log=quiet)
    assert summary["steps"] == 1 and read_checkpoint(tmp_path)["step"] == 1  # not lost back to step 0
    messages = []
    train(tiny_model("llama", seed=0), replace(RESUME_CFG, steps=3), data, str(tmp_path), resume=True,
          progress=False, log=messages.append)
    assert any("resumed from step 1" in m for m in messages)


def test_resume_without_a_checkpoint_is_an_error(tmp_path):
    with pytest.raises(SpecstreamError, match="no checkpoint in .*checkpoint to resume from.*without --resume"):
        train(tiny_model("llama", seed=0), RESUME_CFG, periodic_data(), str(tmp_path), resume=True, progress=False,
              log=quiet)
    assert not (tmp_path / "streams.safetensors").exists()  # nothing was trained from scratch


def test_cli_resume_without_a_checkpoint_says_so_before_loading(tmp_path, capsys):
    from specstream_core.cli import main

    assert main(["train", "--base", str(tmp_path / "no-model"), "--out", str(tmp_path / "out"), "--resume"]) == 2
    assert "error: --resume: there is no checkpoint in" in capsys.readouterr().err  # not "model not found"


def test_resume_checks_the_base_model_settings_and_data(tmp_path):
    data = periodic_data()
    cfg = replace(RESUME_CFG, steps=2, checkpoint_every=2)
    train(tiny_model("llama", seed=0), cfg, data, str(tmp_path), progress=False, log=quiet)
    before = (tmp_path / "checkpoint" / "checkpoint.pt").read_bytes()
    for model, run_cfg, run_data, needles in (
            (tiny_model("llama", seed=1), cfg, data, ["base model", "fingerprint"]),
            (tiny_model("llama", seed=0), replace(cfg, lr=5e-3, adapter_rank=4), data,
             ["adapter_rank 2 -> 4", "lr 0.002 -> 0.005"]),
            (tiny_model("llama", seed=0), cfg, periodic_data(seed=1), ["training data"])):
        with pytest.raises(SpecstreamError) as info:
            train(model, run_cfg, run_data, str(tmp_path), resume=True, progress=False, log=quiet)
        assert "cannot resume from" in str(info.value) and all(n in str(info.value) for n in needles), info.value
    assert (tmp_path / "checkpoint" / "checkpoint.pt").read_bytes() == before  # left as it was


def test_an_older_checkpoint_with_other_shapes_is_a_clear_error(tmp_path):
    """The multi-file format of earlier versions still resumes, and its tensor shapes are checked."""
    from specstream_core.training.streams import build_streams

    ckpt = tmp_path / "checkpoint"
    model, streams = build_streams(tiny_model("llama", seed=0), replace(RESUME_CFG, adapter_rank=4))
    streams.save(str(ckpt))
    (ckpt / "state.json").write_text(json.dumps({"step": 10, "history": []}))
    torch.save({"optimizer": {}, "scheduler": {}}, ckpt / "optimizer.pt")
    with pytest.raises(SpecstreamError, match=r"stream tensor adapter\..* has shape \(4, 64\) there and \(2, 64\)"):
        train(tiny_model("llama", seed=0), RESUME_CFG, periodic_data(), str(tmp_path), resume=True, progress=False,
              log=quiet)


def test_init_from_continues_a_trained_stream_set(tmp_path):
    quiet = lambda *a: None  # noqa: E731
    cfg = TrainConfig(mode="lossless", gamma=3, n_stream_layers=2, adapter_rank=4, steps=40, batch_size=8, seq_len=64,
                      lr=5e-3, warmup=5, checkpoint_every=0, log_every=5)
    data = periodic_data()
    first = train(tiny_model("llama", seed=0), cfg, data, str(tmp_path / "a"), eval_data=data, progress=False, log=quiet)
    # zero steps of training from it: the same tensors, so the same eval as the run it started from
    again = train(tiny_model("llama", seed=0), replace(cfg, steps=1, lr=1e-12, init_from=str(tmp_path / "a")), data,
                  str(tmp_path / "b"), eval_data=data, progress=False, log=quiet)
    assert again["eval"]["stream_top1"] == pytest.approx(first["eval"]["stream_top1"], abs=1e-6)
    fresh = train(tiny_model("llama", seed=0), replace(cfg, steps=1, lr=1e-12), data, str(tmp_path / "c"),
                  eval_data=data, progress=False, log=quiet)
    assert fresh["eval"]["stream_top1"] != pytest.approx(first["eval"]["stream_top1"], abs=1e-6)
    # fewer streams: the first γ of them, unchanged (stream j sees only streams 1..j); more cannot start from it
    fewer = train(tiny_model("llama", seed=0), replace(cfg, steps=1, lr=1e-12, gamma=2, init_from=str(tmp_path / "a")),
                  data, str(tmp_path / "d"), eval_data=data, progress=False, log=quiet)
    assert fewer["eval"]["stream_top1"] == pytest.approx(first["eval"]["stream_top1"][:2], abs=1e-5)
    with pytest.raises(SpecstreamError, match="init-from"):
        train(tiny_model("llama", seed=0), replace(cfg, gamma=4, init_from=str(tmp_path / "a")), data,
              str(tmp_path / "d4"), progress=False, log=quiet)
    # a larger adapter rank grows the adapters: the new part starts at zero, so the eval is the same again
    grown = train(tiny_model("llama", seed=0), replace(cfg, steps=1, lr=1e-12, adapter_rank=8,
                                                       init_from=str(tmp_path / "a")), data,
                  str(tmp_path / "e"), eval_data=data, progress=False, log=quiet)
    assert grown["eval"]["stream_top1"] == pytest.approx(first["eval"]["stream_top1"], abs=1e-6)
    with pytest.raises(SpecstreamError, match=r"init-from .*adapter\..* has shape \(4, "):
        train(tiny_model("llama", seed=0), replace(cfg, adapter_rank=2, init_from=str(tmp_path / "a")), data,
              str(tmp_path / "f"), progress=False, log=quiet)
    # more stream layers: the top layers' adapters come from the smaller set, the added lower layer's start fresh
    from specstream_core.model.streams import read_stream_weights

    deeper = train(tiny_model("llama", seed=0), replace(cfg, steps=1, lr=1e-12, n_stream_layers=3,
                                                        init_from=str(tmp_path / "a")), data,
                   str(tmp_path / "g"), eval_data=data, progress=False, log=quiet)
    assert deeper["eval"]["stream_top1"] != pytest.approx(first["eval"]["stream_top1"], abs=1e-6)
    small, big = read_stream_weights(str(tmp_path / "a")), read_stream_weights(str(tmp_path / "g"))
    top = [n for n in small if n.startswith("adapter.")]
    added = sorted(set(big) - set(small))
    assert top and added and all(n.startswith("adapter.") for n in added)
    assert all(torch.allclose(big[n], small[n], atol=1e-6) for n in top)
    assert all(big[n].abs().max() < 1e-6 for n in added if n.endswith(".B"))  # fresh B (one step at lr 1e-12)


def test_init_from_a_shared_set_continues_its_lora_too(tmp_path):
    """Shared mode from a shared set: the set's LoRA, not a fresh one, so the continued run starts where it stood
    (zero steps: the same eval, the main rows' KL to the base as far from zero as the first run left it); a LoRA of
    another rank or on other layers is refused with one line naming --init-from."""
    quiet = lambda *a: None  # noqa: E731
    cfg = TrainConfig(mode="shared", gamma=2, n_stream_layers=2, adapter_rank=4, lora_rank=4, lora_layers=0, steps=30,
                      batch_size=8, seq_len=64, lr=5e-3, warmup=5, checkpoint_every=0, log_every=1)
    data = periodic_data()
    first = train(tiny_model("llama", seed=0), cfg, data, str(tmp_path / "a"), eval_data=data, progress=False, log=quiet)
    again = train(tiny_model("llama", seed=0), replace(cfg, steps=1, lr=1e-12, init_from=str(tmp_path / "a")), data,
                  str(tmp_path / "b"), eval_data=data, progress=False, log=quiet)
    assert again["eval"]["main_top1"] == pytest.approx(first["eval"]["main_top1"], abs=1e-6)
    assert again["eval"]["stream_top1"] == pytest.approx(first["eval"]["stream_top1"], abs=1e-6)
    assert again["history"][0]["main"] > 1e-4  # a fresh LoRA starts at KL 0
    for other in (dict(lora_rank=2), dict(lora_layers=1)):
        with pytest.raises(SpecstreamError, match="init-from .*LoRA"):
            train(tiny_model("llama", seed=0), replace(cfg, steps=1, init_from=str(tmp_path / "a"), **other), data,
                  str(tmp_path / "c"), progress=False, log=quiet)
    with pytest.raises(SpecstreamError, match="alpha-main"):
        replace(cfg, alpha_main=-1.0)


def test_a_continued_set_keeps_the_recommended_draft_of_the_set_it_started_from(tmp_path):
    """`train --init-from`: the new set records the old set's draft (per precision too) without the old
    measurements, and --recommend-* flags still win."""
    import argparse

    from specstream_core.cli.commands.train import _extra
    from specstream_core.model.streams import StreamParams

    old = tmp_path / "old"
    decode = {"topk": [1], "node_budget": 4, "lookup": 3, "ngrams": True, "measured": "1.35x on host A",
              "command": "draft_ab", "previous": {"node_budget": 3},
              "precisions": {"int4": {"node_budget": 3, "lookup": 2, "measured": "1.03x"}}}
    StreamParams.fresh(tiny_model("llama", seed=0), gamma=2).save(str(old), extra={"decode": decode, "training": "500 steps"})
    flags = dict(distill=True, recommend_topk=None, recommend_prune=None, recommend_budget=None, recommend_lookup=None,
                 recommend_ngrams=False)
    extra = _extra(argparse.Namespace(init_from=str(old), **flags))
    assert extra["training_before"] == "500 steps"
    kept = extra["decode"]
    assert {k: kept[k] for k in ("topk", "node_budget", "lookup", "ngrams")} == {"topk": [1], "node_budget": 4,
                                                                               "lookup": 3, "ngrams": True}
    assert kept["precisions"] == {"int4": {"node_budget": 3, "lookup": 2}} and str(old) in kept["inherited_from"]
    assert not {"measured", "command", "previous"} & set(kept)
    flags["recommend_budget"] = 6
    assert _extra(argparse.Namespace(init_from=str(old), **flags))["decode"]["node_budget"] == 6
    assert "decode" not in _extra(argparse.Namespace(init_from="", **{**flags, "recommend_budget": None}))


def test_checks_during_the_run_record_tau_against_training_time_and_change_nothing(tmp_path):
    """--eval-every: evaluation records (τ estimate, accuracy per stream) at the start and every N steps with the
    training time so far; a resumed run's records count on from the time the checkpoint had, and the streams trained are the same
    bit for bit as without the checks (they read held-out rows only)."""
    data = periodic_data()
    plain = tmp_path / "plain"
    train(tiny_model("llama", seed=0), RESUME_CFG, data, str(plain), eval_data=data, progress=False, log=quiet)
    checked = tmp_path / "checked"
    cfg = replace(RESUME_CFG, eval_every=5, eval_rows=4, steps=10)
    messages = []
    train(tiny_model("llama", seed=0), cfg, data, str(checked), eval_data=data, progress=False, log=messages.append)
    summary = train(tiny_model("llama", seed=0), replace(cfg, steps=20), data, str(checked), eval_data=data,
                    resume=True, progress=False, log=messages.append)
    evals = [r for r in summary["history"] if "eval" in r]
    assert [r["step"] for r in evals] == [0, 5, 10, 15, 20]  # where the streams started, then every 5 steps
    seconds = [r["seconds"] for r in evals]
    assert seconds[0] == 0 and all(a < b for a, b in zip(seconds, seconds[1:])), seconds
    assert all(r["eval"]["tau_estimate"] >= 1.0 and r["eval"]["rows"] == 4 for r in evals)
    assert any("step 15" in m and "τ estimate" in m for m in messages)
    assert (checked / "streams.safetensors").read_bytes() == (plain / "streams.safetensors").read_bytes()

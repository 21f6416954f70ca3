"""The training commands share one config (`training/config.py:RunConfig`) and one set of flags
(`cli/args.py:add_training_flags`): every command keeps its own defaults, a bad shared setting is refused
the same way by each before any model loads, and Medusa heads resume from a checkpoint as the layer draft does."""

from dataclasses import asdict, replace

import pytest
import torch
from safetensors.torch import load_file

from specstream_core.cli import build_parser, main
from specstream_core.cli.args import TRAINING_FLAGS, training_config_from
from specstream_core.errors import SpecstreamError
from specstream_core.model.medusa_heads import WEIGHTS_NAME
from specstream_core.training.config import (DraftTrainConfig, MedusaTrainConfig, RunConfig, TrainConfig,
                                             settings_differences)
from specstream_core.training.data import pack_examples
from specstream_core.training.medusa import train_heads
from tiny_models import hf_greedy, prompts, tiny_model

# what each command gave before the flags were shared (scripts/build_*.sh and users' scripts rely on them)
DEFAULTS = {
    "train": {"steps": 600, "minutes": 0.0, "batch_size": 8, "seq_len": 256, "lr": 2e-3, "seed": 0, "warmup": 30,
              "checkpoint_every": 100, "log_every": 10, "device": "cpu", "threads": 0, "resume": False,
              "distill": False, "examples_per_category": 1500, "precision": "fp32", "gamma": 4},
    "train-medusa": {"steps": 400, "minutes": 0.0, "batch_size": 8, "seq_len": 256, "lr": 1e-3, "seed": 0,
                     "warmup": 20, "log_every": 10, "device": "cpu", "threads": 0, "distill": True,
                     "examples_per_category": 500, "heads": 4, "distill_max_new_tokens": 128},
    "train-draft": {"steps": 600, "minutes": 0.0, "batch_size": 4, "seq_len": 256, "lr": 2e-3, "seed": 0,
                    "warmup": 20, "checkpoint_every": 50, "log_every": 10, "device": "cpu", "threads": 0,
                    "resume": False, "distill": False, "examples_per_category": 1500, "layers": 4, "lora_rank": 32},
}
KINDS = {"train": TrainConfig, "train-medusa": MedusaTrainConfig, "train-draft": DraftTrainConfig}


def test_every_shared_setting_has_its_flag():
    assert list(TRAINING_FLAGS) == list(RunConfig.shared_fields())


@pytest.mark.parametrize("command", sorted(DEFAULTS))
def test_each_command_keeps_its_defaults_and_builds_its_config(command):
    args = build_parser().parse_args([command, "--out", "x"])
    assert {k: getattr(args, k) for k in DEFAULTS[command]} == DEFAULTS[command]
    own = {"train-medusa": {"num_heads": 4}, "train-draft": {"n_layers": 4, "lora_rank": 32}}.get(command, {})
    cfg = training_config_from(args, KINDS[command], **own)
    assert isinstance(cfg, RunConfig)
    assert {k: getattr(cfg, k) for k in RunConfig.shared_fields()} == {k: getattr(args, k)
                                                                       for k in RunConfig.shared_fields()}


def test_old_flag_spellings_still_parse():
    parser = build_parser()
    args = parser.parse_args(["train-medusa", "--out", "x", "--no-distill", "--heads", "3", "--steps", "7",
                              "--distill-cache", "c.jsonl", "--no-accelerate"])
    assert (args.distill, args.heads, args.steps, args.distill_cache) == (False, 3, 7, "c.jsonl")
    args = parser.parse_args(["train", "--out", "x", "--distill", "--batch-size", "2", "--seq-len", "64",
                              "--lr", "3e-3", "--resume", "--seed", "5", "--threads", "1"])
    assert (args.distill, args.batch_size, args.seq_len, args.lr, args.resume, args.seed) == (True, 2, 64, 3e-3,
                                                                                               True, 5)


@pytest.mark.parametrize("command", sorted(DEFAULTS))
@pytest.mark.parametrize("flag, value, message", [("--steps", "0", "steps and batch size must be >= 1"),
                                                  ("--lr", "0", "--lr must be > 0"),
                                                  ("--minutes", "-1", "--minutes must be >= 0")])
def test_a_bad_shared_setting_is_refused_by_every_command_before_loading(command, flag, value, message, tmp_path,
                                                                         capsys):
    missing = str(tmp_path / "no-model")  # never reached: the settings are checked first
    assert main([command, "--base", missing, "--out", str(tmp_path / "out"), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err


def test_each_trainer_checks_its_own_fields():
    with pytest.raises(SpecstreamError, match="--heads must be between 1 and 8"):
        MedusaTrainConfig(num_heads=9)
    with pytest.raises(SpecstreamError, match="--gamma"):
        TrainConfig(gamma=0)
    with pytest.raises(SpecstreamError, match="--lora-rank"):
        DraftTrainConfig(lora_rank=0)
    with pytest.raises(SpecstreamError, match="steps and batch size"):
        DraftTrainConfig(batch_size=0)  # the shared check, inherited


def test_settings_differences_name_what_a_resume_changed():
    saved = asdict(DraftTrainConfig(steps=10, checkpoint_every=5))
    assert settings_differences(saved, asdict(DraftTrainConfig(steps=20, checkpoint_every=2, log_every=1)),
                                DraftTrainConfig) == []
    assert settings_differences(saved, asdict(DraftTrainConfig(steps=10, checkpoint_every=5, lr=1e-3)),
                                DraftTrainConfig) == ["lr 0.002 -> 0.001"]
    older = {k: v for k, v in saved.items() if k != "warmup"}  # a checkpoint from before a setting existed
    assert settings_differences(older, asdict(DraftTrainConfig(steps=10, checkpoint_every=5)), DraftTrainConfig) == []
    assert settings_differences(older, asdict(DraftTrainConfig(steps=10, warmup=3)), DraftTrainConfig) == [
        "warmup None -> 3"]


def test_medusa_heads_resume_bit_identically(tmp_path):
    model = tiny_model("llama", seed=4)
    data = pack_examples([(p, hf_greedy(model, p, 16)) for p in prompts(12, seed=5)], 64)
    # warm-up > steps: the first 5 steps' learning rates do not depend on how many steps were planned
    cfg = MedusaTrainConfig(steps=10, batch_size=4, seq_len=64, lr=1e-2, warmup=20, checkpoint_every=5)
    quiet = dict(progress=False, use_accelerate=False, log=lambda *_: None)
    train_heads(model, cfg, data, str(tmp_path / "straight"), **quiet)
    train_heads(model, replace(cfg, steps=5), data, str(tmp_path / "resumed"), **quiet)
    messages = []
    summary = train_heads(model, cfg, data, str(tmp_path / "resumed"), resume=True,
                          **{**quiet, "log": messages.append})
    assert "resumed from step 5" in messages and summary["steps"] == 10
    a, b = (load_file(str(tmp_path / d / WEIGHTS_NAME)) for d in ("straight", "resumed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(SpecstreamError, match="other settings.*lr"):
        train_heads(model, replace(cfg, lr=1e-3), data, str(tmp_path / "resumed"), resume=True, **quiet)

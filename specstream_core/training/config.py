"""The settings of a training run, validated once, here (no torch: the CLI builds its flags from them).

- `RunConfig`: what every trainer shares (how long, how big a batch, the learning rate and its schedule,
  the seed, when to log and checkpoint), written and checked once.
- `TrainConfig` (stream sets: `streams.py`), `MedusaTrainConfig` (Medusa heads: `medusa.py`) and
  `DraftTrainConfig` (the layer draft: `layer_draft.py`) add each trainer's own settings.

The CLI's flags for the shared fields come from `cli/args.py:add_training_flags`; each command gives its own
defaults there. A checkpoint records `asdict(cfg)`, and `settings_differences` says what a resumed run changed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from specstream_core.errors import SpecstreamError
from specstream_core.model.stream_config import check_gamma


@dataclass(frozen=True)
class RunConfig:
    """The settings every trainer shares."""

    steps: int = 600
    minutes: float = 0.0  # stop early after this many minutes (0 = no limit)
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 2e-3
    warmup: int = 30  # linear warm-up steps, then linear decay (`loop.linear_schedule`)
    seed: int = 0  # initial tensors and the order of training batches
    log_every: int = 10
    checkpoint_every: int = 100  # steps between checkpoints (0 = none but the last); resumable trainers only

    # settings a resumed run may change (more steps: the learning-rate schedule is stretched from there on)
    RESUME_MAY_CHANGE: ClassVar[tuple[str, ...]] = ("steps", "minutes", "checkpoint_every", "log_every")

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1 or self.seq_len < 8:
            raise SpecstreamError("steps and batch size must be >= 1 and seq_len >= 8")
        if not self.lr > 0:
            raise SpecstreamError(f"--lr must be > 0, got {self.lr}")
        if self.minutes < 0:
            raise SpecstreamError(f"--minutes must be >= 0 (0 = no limit), got {self.minutes}")
        if self.warmup < 0 or self.log_every < 1 or self.checkpoint_every < 0:
            raise SpecstreamError(f"warmup and checkpoint_every must be >= 0 and log_every >= 1, got {self.warmup}, "
                                  f"{self.checkpoint_every} and {self.log_every}")

    @classmethod
    def shared_fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(RunConfig))


@dataclass(frozen=True)
class TrainConfig(RunConfig):
    """Stream training (lossless or shared mode)."""

    mode: str = "lossless"  # lossless | shared
    gamma: int = 4
    n_stream_layers: int = 2
    adapter_rank: int = 16  # stream-rows-only LoRA (lossless)
    lora_rank: int = 16  # shared LoRA
    lora_layers: int = 0  # shared: LoRA on the top K layers only (0 = every layer); K <= Ns keeps the rest frozen
    prune_rank: int = 8
    alpha_main: float = 1.0
    alpha_stream: float = 0.1
    alpha_prune: float = 0.1
    precision: str = "fp32"  # fp32 | bf16 autocast (bf16 is far slower on CPUs without AMX)
    draft_vocab_size: int = 0  # streams score only the K most frequent answer tokens (0 = all)
    feature_cache_gb: float = 4.0  # lossless: keep the frozen layers' output per sequence, up to this size
    init_from: str = ""  # start from the trained tensors of this stream directory (same shapes) instead of fresh ones
    main_target: str = "kl"  # shared: the base's whole next-token distribution (kl) or the answers' tokens (answers = greedy)
    lora_lr: float = 0.0  # shared: the LoRA's learning rate (0 = lr)
    eval_every: int = 0  # steps between draft-quality checks on held-out answers during the run (0: at the end only)
    eval_rows: int = 32  # held-out rows each of those checks reads (the last check reads them all)

    RESUME_MAY_CHANGE: ClassVar[tuple[str, ...]] = RunConfig.RESUME_MAY_CHANGE + ("eval_every", "eval_rows")

    def __post_init__(self):
        super().__post_init__()
        if self.mode not in ("lossless", "shared"):
            raise SpecstreamError(f"--mode must be lossless or shared, got {self.mode!r}")
        check_gamma(self.gamma, "--gamma")
        if self.eval_every < 0 or self.eval_rows < 1:
            raise SpecstreamError(f"--eval-every must be >= 0 and --eval-rows >= 1, got {self.eval_every} and "
                                  f"{self.eval_rows}")
        if self.precision not in ("fp32", "bf16"):
            raise SpecstreamError(f"--precision must be fp32 or bf16, got {self.precision!r}")
        if self.main_target not in ("kl", "greedy", "answers"):
            raise SpecstreamError(f"--main-target must be kl, answers or greedy, got {self.main_target!r}")
        if self.lora_lr < 0:
            raise SpecstreamError(f"--lora-lr must be >= 0 (0 = --lr), got {self.lora_lr}")
        if self.lora_layers < 0:
            raise SpecstreamError(f"--lora-layers must be >= 0 (0 = every layer), got {self.lora_layers}")
        if not 0 <= self.alpha_main <= 1000:
            raise SpecstreamError(f"--alpha-main must be between 0 and 1000, got {self.alpha_main}")

    @property
    def frozen_bottom(self) -> bool:
        """Nothing below the stream-birth layer trains: its output can be computed once per sequence."""
        return self.mode == "lossless" or 0 < self.lora_layers <= self.n_stream_layers


MAX_MEDUSA_HEADS = 8


@dataclass(frozen=True)
class MedusaTrainConfig(RunConfig):
    """Medusa-style heads on the frozen base."""

    num_heads: int = 4
    decay: float = 0.8  # loss weight of head k: decay^(k-1) (Medusa's λ_k)

    def __post_init__(self):
        super().__post_init__()
        if not 1 <= self.num_heads <= MAX_MEDUSA_HEADS:
            raise SpecstreamError(f"--heads must be between 1 and {MAX_MEDUSA_HEADS}, got {self.num_heads}")
        if not 0 < self.decay <= 1:
            raise SpecstreamError(f"decay must be in (0, 1], got {self.decay}")


@dataclass(frozen=True)
class DraftTrainConfig(RunConfig):
    """The layer draft: the base's first `n_layers` layers with a LoRA of `lora_rank`."""

    n_layers: int = 4
    lora_rank: int = 32

    def __post_init__(self):
        super().__post_init__()
        if self.n_layers < 1 or self.lora_rank < 1:
            raise SpecstreamError(f"--layers and --lora-rank must be >= 1, got {self.n_layers} and {self.lora_rank}")


def settings_differences(saved: dict, new: dict, kind: type[RunConfig]) -> list[str]:
    """'key old -> new' for each setting that `new` (`asdict` of a `kind`) changes against the one a checkpoint
    recorded, but those a resumed run may change. A setting newer than the checkpoint counts only when it is off
    its default (the run it saved had no other)."""
    defaults = asdict(kind())
    diffs = []
    for key in sorted(set(saved) | set(new)):
        if key not in saved and new.get(key) == defaults.get(key):
            continue
        if key not in kind.RESUME_MAY_CHANGE and saved.get(key) != new.get(key):
            diffs.append(f"{key} {saved.get(key)!r} -> {new.get(key)!r}")
    return diffs

"""`TrainConfig`: the settings of a stream-training run (validated once, here)."""

from __future__ import annotations

from dataclasses import dataclass

from specstream_core.errors import SpecstreamError
from specstream_core.model.streams import check_gamma


@dataclass(frozen=True)
class TrainConfig:
    mode: str = "lossless"  # lossless | shared
    gamma: int = 4
    n_stream_layers: int = 2
    adapter_rank: int = 16  # stream-rows-only LoRA (lossless)
    lora_rank: int = 16  # shared LoRA
    lora_layers: int = 0  # shared: LoRA on the top K layers only (0 = every layer); K <= Ns keeps the rest frozen
    prune_rank: int = 8
    steps: int = 600
    minutes: float = 0.0  # stop early after this many minutes (0 = no limit)
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 2e-3
    warmup: int = 30
    alpha_main: float = 1.0
    alpha_stream: float = 0.1
    alpha_prune: float = 0.1
    precision: str = "fp32"  # fp32 | bf16 autocast (bf16 is far slower on CPUs without AMX)
    seed: int = 0
    checkpoint_every: int = 100
    log_every: int = 10
    draft_vocab_size: int = 0  # streams score only the K most frequent answer tokens (0 = all)
    feature_cache_gb: float = 4.0  # lossless: keep the frozen layers' output per sequence, up to this size
    init_from: str = ""  # start from the trained tensors of this stream directory (same shapes) instead of fresh ones
    main_target: str = "kl"  # shared: the base's whole next-token distribution (kl) or the answers' tokens (answers = greedy)
    lora_lr: float = 0.0  # shared: the LoRA's learning rate (0 = lr)

    def __post_init__(self):
        if self.mode not in ("lossless", "shared"):
            raise SpecstreamError(f"--mode must be lossless or shared, got {self.mode!r}")
        check_gamma(self.gamma, "--gamma")
        if self.steps < 1 or self.batch_size < 1 or self.seq_len < 8:
            raise SpecstreamError("steps and batch size must be >= 1 and seq_len >= 8")
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

"""The sizes `pretrain` trains (plain data: the command line lists them without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    seq_len: int
    batch_size: int
    lr: float
    warmup_steps: int
    examples_per_category: int
    general_fraction: float  # share of corpus characters taken from general offline text
    minutes: float
    max_steps: int | None = None
    max_position_embeddings: int = 1024
    weight_decay: float = 0.1


PRESETS = {
    # For tests: trains in seconds.
    "tiny": Preset(vocab_size=512, hidden_size=64, num_layers=2, num_heads=1, intermediate_size=128,
                   seq_len=128, batch_size=4, lr=3e-3, warmup_steps=5, examples_per_category=60,
                   general_fraction=0.1, minutes=0.5, max_steps=40),
    # The bundled model: ~9.4M parameters, ~75 minutes on one CPU thread (~630 tokens/s fp32).
    "default": Preset(vocab_size=4096, hidden_size=256, num_layers=8, num_heads=4, intermediate_size=1024,
                      seq_len=256, batch_size=4, lr=1e-3, warmup_steps=100, examples_per_category=4000,
                      general_fraction=0.12, minutes=75.0),
}

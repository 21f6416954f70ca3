"""A stream set's configuration on disk (`streams_config.json`) and its limits: what every reader of a
stream directory needs without loading tensors (the engine before loading a model, the hub, the lab)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from specstream_core.errors import SpecstreamError

FORMAT_VERSION = 1
CONFIG_NAME = "streams_config.json"
WEIGHTS_NAME = "streams.safetensors"
LORA_DIR = "lora"
MAX_GAMMA = 8


def check_gamma(gamma, name: str = "gamma", most: int = MAX_GAMMA) -> None:
    """The one check of a stream count γ (stream sets, training, the CLI's --gamma)."""
    if isinstance(gamma, bool) or not isinstance(gamma, int) or not 1 <= gamma <= most:
        raise SpecstreamError(f"{name} must be between 1 and {most}, got {gamma!r}")
ADAPTER_TARGETS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj", "gate_up_proj", "down_proj")


@dataclass(frozen=True)
class StreamConfig:
    gamma: int = 4  # number of speculative streams
    n_stream_layers: int = 2  # Ns: top layers that run multi-stream attention
    mode: str = "lossless"  # lossless | shared
    adapter_rank: int = 0  # stream-rows-only LoRA rank (lossless mode); 0 = none
    prune_rank: int = 8  # early-exit pruning adapter rank; 0 = none
    lora_rank: int = 0  # shared-mode LoRA rank (informational; the adapter lives in lora/)
    hidden_size: int = 0
    num_layers: int = 0
    model_type: str = ""
    format_version: int = FORMAT_VERSION
    trained_steps: int = 0
    draft_vocab_size: int = 0  # streams score only this many frequent tokens (0 = the whole vocabulary)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        check_gamma(self.gamma)
        if self.mode not in ("lossless", "shared"):
            raise SpecstreamError(f"stream mode must be 'lossless' or 'shared', got {self.mode!r}")
        if self.num_layers and not 1 <= self.n_stream_layers <= self.num_layers:
            raise SpecstreamError(
                f"n_stream_layers (Ns) must be between 1 and the model's {self.num_layers} layers, got {self.n_stream_layers}"
            )
        if self.adapter_rank < 0 or self.prune_rank < 0:
            raise SpecstreamError("adapter ranks must be >= 0")
        if self.draft_vocab_size < 0:
            raise SpecstreamError("draft_vocab_size must be >= 0")

    @property
    def birth_layer(self) -> int:
        """Index of the first multi-stream layer (N − Ns)."""
        return self.num_layers - self.n_stream_layers


def read_stream_config(directory: str) -> StreamConfig:
    path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isdir(directory):
        raise SpecstreamError(f"stream directory not found: {directory}")
    if not os.path.isfile(path):
        raise SpecstreamError(f"{directory} holds no {CONFIG_NAME}; is it a stream-adapter directory?")
    try:
        with open(path) as f:
            raw = json.load(f)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format_version {raw.get('format_version')!r}, this version reads {FORMAT_VERSION}")
        known = set(StreamConfig.__dataclass_fields__)
        return StreamConfig(**{k: v for k, v in raw.items() if k in known})
    except SpecstreamError:
        raise
    except (ValueError, TypeError) as exc:
        raise SpecstreamError(f"corrupt stream config {path}: {exc}") from None

"""Medusa-style heads: K extra decoding heads on the base model's final hidden state (a baseline).

Head k (1..K) maps the accepted position's final-normed main hidden state h_t through a residual
block, h + SiLU(W_k h + b_k), and the base model's own (shared, frozen) LM head, and predicts the
token k places after the main stream's next token, y_{t+1+k} — the same target as speculative stream
k. W_k starts at zero, so an untrained head predicts what the main stream predicts.

Full Medusa heads carry their own LM head each (4·(d² + d·V) parameters for K = 4); sharing the
base's keeps the bundled heads small: K·(d² + d) parameters.

`decoding.drafters.medusa.MedusaDrafter` turns the heads' top-k into a Cartesian draft tree (`tree.from_stream_topk`), which
our one tree verifier checks, so greedy output equals plain decoding. Saved as `medusa.safetensors`
+ `medusa_config.json` (never pickle).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from specstream_core.errors import SpecstreamError

CONFIG_NAME = "medusa_config.json"
WEIGHTS_NAME = "medusa.safetensors"


@dataclass(frozen=True)
class MedusaConfig:
    num_heads: int = 4
    hidden_size: int = 0
    trained_steps: int = 0
    shared_lm_head: bool = True
    extra: dict = field(default_factory=dict)


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + F.silu(self.linear(h))


class MedusaHeads(nn.Module):
    def __init__(self, cfg: MedusaConfig):
        super().__init__()
        if not 1 <= cfg.num_heads <= 8 or cfg.hidden_size < 1:
            raise SpecstreamError(f"Medusa heads: need 1..8 heads and a hidden size, got {cfg.num_heads}, {cfg.hidden_size}")
        self.cfg = cfg
        self.blocks = nn.ModuleList(ResBlock(cfg.hidden_size) for _ in range(cfg.num_heads))

    @classmethod
    def fresh(cls, model, num_heads: int = 4) -> "MedusaHeads":
        return cls(MedusaConfig(num_heads=num_heads, hidden_size=model.config.hidden_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., d] final-normed hidden -> [..., K, d] (feed to the shared LM head)."""
        return torch.stack([block(hidden) for block in self.blocks], dim=-2)

    def extra_parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save(self, out_dir: str, extra: dict | None = None) -> None:
        os.makedirs(out_dir, exist_ok=True)
        tensors = {k: v.detach().float().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(tensors, os.path.join(out_dir, WEIGHTS_NAME))
        cfg = asdict(self.cfg)
        cfg["extra"] = {**cfg.get("extra", {}), **(extra or {})}
        with open(os.path.join(out_dir, CONFIG_NAME), "w") as f:
            json.dump(cfg, f, indent=1)

    @classmethod
    def load(cls, directory: str, model=None) -> "MedusaHeads":
        cfg_path, weights = os.path.join(directory, CONFIG_NAME), os.path.join(directory, WEIGHTS_NAME)
        if not (os.path.isfile(cfg_path) and os.path.isfile(weights)):
            raise SpecstreamError(f"{directory} holds no Medusa heads ({CONFIG_NAME} + {WEIGHTS_NAME})")
        with open(cfg_path) as f:
            raw = json.load(f)
        cfg = MedusaConfig(**{k: v for k, v in raw.items() if k in MedusaConfig.__dataclass_fields__})
        if model is not None and cfg.hidden_size != model.config.hidden_size:
            raise SpecstreamError(f"Medusa heads in {directory} are for hidden size {cfg.hidden_size}, "
                                  f"the model has {model.config.hidden_size}")
        heads = cls(cfg)
        heads.load_state_dict(load_file(weights))
        if model is not None:
            heads.to(next(model.parameters()).device)
        return heads.eval()


def recommended_topk(directory: str) -> tuple[int, ...] | None:
    try:
        with open(os.path.join(directory, CONFIG_NAME)) as f:
            topk = json.load(f).get("extra", {}).get("decode", {}).get("topk")
        return tuple(topk) if topk else None
    except (OSError, ValueError):
        return None


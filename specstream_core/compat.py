"""All transformers-version glue lives here (transformers 5.x).

The engine drives the library's own modules (embedding, decoder layers, final norm, LM head) instead
of a forked modeling file. These helpers are the only places that know the attribute names and call
signatures of those modules.
"""

from __future__ import annotations

import torch
from torch import nn

# model_type -> family name shown to users. Each family is covered by the test suite.
SUPPORTED_MODEL_TYPES = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}


def supported_names() -> str:
    return ", ".join(SUPPORTED_MODEL_TYPES.values())


def causal_lm(model: nn.Module) -> nn.Module:
    """The causal LM itself, unwrapping a peft `PeftModel` (its LoRA layers stay injected)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) and type(model).__name__.startswith("Peft") else model


def inner_model(model: nn.Module) -> nn.Module:
    """The decoder stack (`LlamaModel` & co.)."""
    return causal_lm(model).model


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    return inner_model(model).layers


def embed(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return inner_model(model).embed_tokens(ids)


def rotary(model: nn.Module, h: torch.Tensor, position_ids: torch.Tensor):
    """(cos, sin) for `position_ids` [B, q]; RoPE enters the layers only through these."""
    return inner_model(model).rotary_emb(h, position_ids)


def run_layer(layer: nn.Module, h: torch.Tensor, mask: torch.Tensor | None, pe, cache) -> torch.Tensor:
    """One decoder layer. `mask` is an additive float mask [B, 1, q, keys] (keys = what the cache returns)."""
    out = layer(h, attention_mask=mask, position_embeddings=pe, cache=cache)
    return out[0] if isinstance(out, tuple) else out


def final_norm(model: nn.Module, h: torch.Tensor) -> torch.Tensor:
    return inner_model(model).norm(h)


def lm_head(model: nn.Module) -> nn.Module:
    return causal_lm(model).lm_head


def sliding_window(config) -> int | None:
    """Attention window in tokens, or None. Mistral sets it; Qwen2 only with use_sliding_window."""
    window = getattr(config, "sliding_window", None)
    if config.model_type == "qwen2" and not getattr(config, "use_sliding_window", False):
        return None
    return int(window) if window else None


def kv_shape(config) -> tuple[int, int]:
    """(number of key/value heads, head dim)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return kv_heads, head_dim


def set_attention_implementation(layer: nn.Module, impl: str) -> None:
    """Give one layer's attention its own config copy with another backend (eager returns weights)."""
    import copy

    attn = layer.self_attn
    cfg = copy.copy(attn.config)
    cfg._attn_implementation = impl
    attn.config = cfg

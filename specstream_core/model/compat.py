"""All transformers-version glue lives here (transformers 5.x).

The engine drives the library's own modules (embedding, decoder layers, final norm, LM head) instead
of a forked modeling file. These helpers are the only places that know the attribute names and call
signatures of those modules.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
import copy

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
    attn = layer.self_attn
    cfg = copy.copy(attn.config)
    cfg._attn_implementation = impl
    attn.config = cfg


# ---- shared-prefix attention (n continuations of one prompt, its K/V stored once) ----------------
SHARED_PREFIX_ATTENTION = "specstream_shared_prefix"
_shared_prefix = None  # set by `shared_prefix_attention`: layer_idx -> (keys, values) [H_kv, P, D]


def _shared_prefix_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Exact attention over [shared prefix | per-row suffix]: scores of both concatenated, one softmax.

    query [B, Hq, q, D]; key/value: each row's suffix [B, H_kv, S, D] (what the cache returned); the
    prefix [H_kv, P, D] is shared by all rows and never expanded: every row's queries meet it in one
    GEMM. attention_mask: additive [B, 1, q, P + S]. Returns [B, q, Hq, D] like transformers' sdpa.
    """
    if _shared_prefix is None:  # not inside a shared-prefix decoding: plain sdpa
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    pk, pv = _shared_prefix(module.layer_idx)  # [H_kv, P, D]
    B, Hq, q, D = query.shape
    kv_heads, P = pk.shape[0], pk.shape[1]
    S = key.shape[2]
    g = Hq // kv_heads  # query heads per key/value head (head h uses kv head h // g, as repeat_kv)
    scaling = scaling if scaling is not None else D ** -0.5
    qg = query.reshape(B, kv_heads, g * q, D)
    # prefix scores: all rows' queries against the one prefix, [H_kv, B*g*q, D] @ [H_kv, D, P]
    q_rows = qg.transpose(0, 1).reshape(kv_heads, B * g * q, D)
    s_prefix = torch.matmul(q_rows, pk.transpose(-1, -2)).reshape(kv_heads, B, g * q, P).transpose(0, 1)
    s_suffix = torch.matmul(qg, key.transpose(-1, -2))  # [B, H_kv, g*q, S]
    scores = torch.cat([s_prefix, s_suffix], dim=-1).reshape(B, kv_heads, g, q, P + S) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, None, :, : P + S]  # [B, 1, 1, q, P+S]
    probs = scores.softmax(dim=-1, dtype=torch.float32).to(query.dtype).reshape(B, kv_heads, g * q, P + S)
    p_rows = probs[..., :P].transpose(0, 1).reshape(kv_heads, B * g * q, P)
    out = torch.matmul(p_rows, pv).reshape(kv_heads, B, g * q, D).transpose(0, 1)  # [B, H_kv, g*q, D]
    out = out + torch.matmul(probs[..., P:], value)
    return out.reshape(B, Hq, q, D).transpose(1, 2).contiguous(), None


def register_shared_prefix_attention() -> str:
    """Register the shared-prefix attention with transformers' `AttentionInterface` (idempotent)."""
    from transformers import AttentionInterface

    if SHARED_PREFIX_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(SHARED_PREFIX_ATTENTION, _shared_prefix_forward)
    return SHARED_PREFIX_ATTENTION


@contextmanager
def shared_prefix_attention(model: nn.Module, prefix_kv):
    """Every decoder layer attends over [prefix_kv(layer) | what the cache returns] while inside.

    prefix_kv: layer_idx -> (keys, values) [H_kv, P, D] (`SharedPrefixCache.prefix_kv`). The layers'
    attention configs are swapped for copies naming the registered backend and restored on exit.
    """
    global _shared_prefix
    name = register_shared_prefix_attention()
    saved = [(layer, layer.self_attn.config) for layer in decoder_layers(model)]
    for layer, _ in saved:
        set_attention_implementation(layer, name)
    previous, _shared_prefix = _shared_prefix, prefix_kv
    try:
        yield
    finally:
        _shared_prefix = previous
        for layer, cfg in saved:
            layer.self_attn.config = cfg

"""All transformers-version glue lives here (transformers 5.x): the one compatibility layer.

The engine drives the library's own modules (embedding, decoder layers, final norm, LM head) instead
of a forked modeling file. These helpers are the only places that know the attribute names and call
signatures of those modules. What sets each family apart is in `families`; the attention implementations the
engine registers are in `compat_attention` and RoPE's tables in `compat_rope`, both re-exported here.
"""

from __future__ import annotations

import torch
from torch import nn

from specstream_core.model import compat_attention, compat_rope, families
from specstream_core.model.compat_attention import (  # noqa: F401  (re-exported: the glue's one namespace)
    ROW_EXACT_ATTENTION, SHARED_PREFIX_ATTENTION, _kernel_keys, _row_exact_forward, _scope, _shared_prefix_forward,
    kernel_step_keys, register_shared_prefix_attention, row_exact_attention, set_attention_implementation)
from specstream_core.model.compat_rope import ROPE_TABLE_MIN, _rope_table  # noqa: F401
from specstream_core.model.families import LLAMA_RMS_NORMS, SUPPORTED_MODEL_TYPES, refusal, supported_names  # noqa: F401

DIRECT_STEP = "_specstream_direct"  # the attribute under which direct_layers.bind keeps a layer's step


class PerLayer(dict):
    """What differs between a model's decoder layers (an attention mask, RoPE tables): {kind: value}, and each
    layer's kind (`kinds[layer_idx]`: its window, its layer type)."""

    def __init__(self, values: dict, kinds: tuple):
        super().__init__(values)
        self.kinds = kinds

    def of(self, layer: nn.Module):
        return self[self.kinds[layer.self_attn.layer_idx]]


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


def run_layer(layer: nn.Module, h: torch.Tensor, mask: torch.Tensor | None, pe, cache) -> torch.Tensor:
    """One decoder layer. `mask` is an additive float mask [B, 1, q, keys] (keys = what the cache returns), `pe` its
    RoPE tables; either may be a `PerLayer` (layers that differ: sliding windows, RoPE per layer type), of which the
    layer gets its own. Where the layer has a direct step (`direct_layers`: bound on the row-invariant kernel,
    checked to give the same result bit for bit), that step runs instead of the module dispatch."""
    if isinstance(mask, PerLayer):
        mask = mask.of(layer)
    if isinstance(pe, PerLayer):
        pe = pe.of(layer)
    step = layer.__dict__.get(DIRECT_STEP)
    if step is not None and step.usable():
        out = step(h, mask, pe, cache)
        if out is not None:
            return out
    out = layer(h, attention_mask=mask, position_embeddings=pe, cache=cache)
    return out[0] if isinstance(out, tuple) else out


def rms_norms(model: nn.Module) -> list[nn.Module]:
    """The decoder layers' and the final norm modules of Llama's form (`LLAMA_RMS_NORMS`; a family whose norms have
    another form, Gemma 3's (1 + weight), has none: they keep their own forward)."""
    mods = [m for layer in decoder_layers(model) for m in layer.modules()] + [inner_model(model).norm]
    return [m for m in mods if type(m).__name__ in LLAMA_RMS_NORMS]


def final_norm_module(model: nn.Module) -> nn.Module:
    return inner_model(model).norm


def final_norm(model: nn.Module, h: torch.Tensor) -> torch.Tensor:
    return final_norm_module(model)(h)


def lm_head(model: nn.Module) -> nn.Module:
    return causal_lm(model).lm_head


def kv_shape(config) -> tuple[int, int]:
    """(number of key/value heads, head dim)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return kv_heads, head_dim


def sliding_window(config) -> int | tuple | None:
    """The attention window(s) masks apply (`masks.additive_mask`): None where no layer has one, the window where
    every layer has the same (Mistral, Phi-3), else each layer's (`families.layer_windows`: Gemma 3's interleaved
    local layers, Qwen's from max_window_layers on)."""
    windows = families.layer_windows(config)
    if len(set(windows)) == 1:
        return windows[0]
    return windows


def rotary(model: nn.Module, h: torch.Tensor, position_ids: torch.Tensor):
    """(cos, sin) for `position_ids` [B, q]; RoPE enters the layers only through these. A family with a table per
    layer type (Gemma 3: local and global layers' bases) gets a `PerLayer` of them."""
    module = inner_model(model).rotary_emb
    config = causal_lm(model).config
    family = families.FAMILIES.get(config.model_type)
    if family is None or not family.rope_per_layer:
        return compat_rope.rotary(module, h, position_ids)
    types = tuple(config.layer_types[:config.num_hidden_layers])
    return PerLayer({t: compat_rope.rotary(module, h, position_ids, t) for t in set(types)}, types)


def attention_linear(layer: nn.Module) -> nn.Module:
    """The first Linear of a layer's attention (q_proj, or Phi-3's fused qkv_proj): what its projections run on."""
    attn = layer.self_attn
    return attn.q_proj if hasattr(attn, "q_proj") else attn.qkv_proj


def layer_path(model: nn.Module) -> dict:
    """Which path the decoder layers take and why: {"path": "kernel" | "modules", "why": ...}. "kernel": every layer
    runs as the kernel's whole-layer direct step (bound and checked bit for bit at load); "modules": transformers' own
    modules run them, because the family's layer form is one the kernel's steps do not compute, or the model is not
    on the row-invariant kernel (its precision or device), or the load-time check kept the modules."""
    layers = decoder_layers(model)
    family = families.FAMILIES.get(getattr(causal_lm(model).config, "model_type", ""))
    steps = [layer.__dict__.get(DIRECT_STEP) for layer in layers]
    if steps and all(step is not None for step in steps):
        whole = all(getattr(step, "whole", False) for step in steps)
        return {"path": "kernel", "why": "whole-layer steps on the row-invariant kernel" if whole else
                "direct layer steps on the row-invariant kernel (the kernel's fused parts, the rest torch's)"}
    if getattr(causal_lm(model).config, "specstream_kernel", "torch") != "rowinv":
        why = "the Linears are not on the row-invariant kernel (precision or device)"
    elif family is not None and not family.kernel_steps:
        why = f"{family.name}: {family.form}; the kernel's whole-layer steps do not compute it yet"
    else:
        why = "the layer steps were not bound (a load-time check kept the modules)"
    return {"path": "modules", "why": why}


def shared_prefix_attention(model: nn.Module, prefix_kv):
    """Every decoder layer attends over [prefix_kv(layer) | what the cache returns] while inside
    (`compat_attention.shared_prefix_attention`)."""
    return compat_attention.shared_prefix_attention(decoder_layers(model), prefix_kv)


def use_row_exact_attention(model: nn.Module) -> None:
    """Name the row-exact attention in every decoder layer, once (`compat_attention.use_row_exact_attention`)."""
    compat_attention.use_row_exact_attention(decoder_layers(model))

"""Which decoder layers the kernel's whole-layer steps compute, and how each family's modules map onto them.

The kernel's layer (csrc/layer_steps.c) is Llama's: norm, q/k/v, RoPE, attention, o, residual, norm, gate/up, SiLU,
down, residual. Families differ from it in a few places, each a field of `rowinv_steps.LayerForm` or a way of reading
the Linears:
- Llama, Mistral, Qwen2 (without biases): Llama's form;
- Qwen3: RMSNorm of q and of k over each head before RoPE (`q_norm`, `k_norm`: one more kernel step, `qk_norm`);
- Phi-3 / Phi-4: q/k/v one Linear (`qkv_proj`) and gate/up one Linear (`gate_up_proj`), read as they are (the kernel's
  front writes q's, k's and v's columns side by side, then gate's and up's, as those Linears lay them out); RoPE over
  the first `partial_rotary_factor` of each head (the step's R);
- OLMo 2: q/k norms over the whole projection, and the layer's two norms after the attention and after the MLP.
Gemma 3's layers (four norms of the (1 + w) form, GELU, sliding and global layers with their own RoPE) are not of a
form the kernel computes: they run on the library's modules (over the kernel's Linears), and `kernel_covers` says so.
Nothing here is trusted blindly: `direct_layers.bind` keeps a layer's steps only where they give its modules' outputs
bit for bit (`backends.base.probe`).
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from torch import nn

from specstream_core.model import compat

# decoder layer class -> its form's name; the forward of each is read from transformers 5.x (an engine image's layers,
# `backends.image_model`, are Llama's form with no forward of their own)
LLAMA_LAYERS = ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "ImageLayer")
FORMS = {**{name: "llama" for name in LLAMA_LAYERS}, "Qwen3DecoderLayer": "qk-norm per head",
         "Phi3DecoderLayer": "fused q/k/v and gate/up", "Olmo2DecoderLayer": "post-norms, q/k norm whole"}
# the modeling modules whose `apply_rotary_pos_emb` is Llama's rotation (Phi-3's: over the first R dimensions of a
# head, the rest passed as they are, which is Llama's where R = D); what layer_steps.c's RoPE computes
ROPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2")
# why the kernel's whole-layer steps do not compute a family's layers (the families it knows but leaves to the modules)
NOT_COVERED = {"Gemma3DecoderLayer": "Gemma 3's layers (four (1 + w) norms, GELU, per-layer RoPE and windows)"}


class LayerParts(NamedTuple):
    """A decoder layer's modules as the kernel's layer takes them."""
    qkv: list  # the Linears writing q's, k's and v's columns side by side: [q, k, v] or [qkv_proj]
    o: nn.Module
    gate_up: list  # [gate, up] or [gate_up_proj]
    down: nn.Module
    norms: tuple  # (the norm before (or, `post`, after) the attention, the one before (after) the MLP)
    act: nn.Module
    q_norm: nn.Module | None  # RMSNorms of q and k before RoPE, or None
    k_norm: nn.Module | None
    whole: bool  # q_norm, k_norm over the whole projection (OLMo 2), else over each head (Qwen3)
    post: bool  # the norms after the attention and the MLP (OLMo 2)
    llama: bool  # Llama's own form (the direct step's module-by-module path serves it too)


def parts(layer: nn.Module) -> LayerParts | None:
    """The layer's modules as the kernel's layer takes them, or None where its class is none of `FORMS`."""
    form = FORMS.get(type(layer).__name__)
    if form is None:
        return None
    attn, mlp = layer.self_attn, layer.mlp
    if form == "fused q/k/v and gate/up":
        return LayerParts([attn.qkv_proj], attn.o_proj, [mlp.gate_up_proj], mlp.down_proj,
                          (layer.input_layernorm, layer.post_attention_layernorm), mlp.activation_fn, None, None,
                          False, False, False)
    qkv, gate_up = [attn.q_proj, attn.k_proj, attn.v_proj], [mlp.gate_proj, mlp.up_proj]
    if form == "post-norms, q/k norm whole":
        return LayerParts(qkv, attn.o_proj, gate_up, mlp.down_proj,
                          (layer.post_attention_layernorm, layer.post_feedforward_layernorm), mlp.act_fn,
                          attn.q_norm, attn.k_norm, True, True, False)
    norms = (layer.input_layernorm, layer.post_attention_layernorm)
    if form == "qk-norm per head":
        return LayerParts(qkv, attn.o_proj, gate_up, mlp.down_proj, norms, mlp.act_fn, attn.q_norm, attn.k_norm,
                          False, False, False)
    return LayerParts(qkv, attn.o_proj, gate_up, mlp.down_proj, norms, mlp.act_fn, None, None, False, False, True)


def kernel_rope(attn: nn.Module):
    """The library's `apply_rotary_pos_emb` for this attention module where it is one of `ROPES` (an engine image's
    attention names its own: `image_model.image_rope`), else None."""
    own = attn.__dict__.get("rope")
    if own is not None:
        return own
    module = type(attn).__module__
    fn = getattr(sys.modules.get(module), "apply_rotary_pos_emb", None)
    known = module.startswith("transformers.models.") and module.rsplit(".", 1)[-1] in {f"modeling_{m}" for m in ROPES}
    return fn if known else None


def is_llama_rope(rope) -> bool:
    """Whether `rope` is Llama's rotation, which the kernel's cache write computes (`rowinv_steps.rope_store`): the
    library's, or what stands for it in an engine image's layers (`llama_rotation`: `backends.image_model`)."""
    if getattr(rope, "llama_rotation", False):
        return True
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return rope is apply_rotary_pos_emb


def attention_functions(attn: nn.Module) -> dict:
    """The attention functions by implementation name that this attention module's step may call: transformers'
    registry (`ALL_ATTENTION_FUNCTIONS`), or the engine image's own (`image_model.ImageAttention`)."""
    own = attn.__dict__.get("attention_functions")
    if own is not None:
        return own
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS


def kernel_covers(model: nn.Module) -> tuple[bool, str]:
    """(whether the kernel's whole-layer steps run this model's decoding steps now, why not where they do not): true
    where every decoder layer has a bound direct step that is a whole kernel layer (`direct_layers.bind` found it exact
    on this engine). A label for `--json` and the lab's model line; the layers it does not cover run on the library's
    modules, over the kernel's Linears where the engine's are."""
    layers = list(compat.decoder_layers(model))
    steps = [getattr(layer, compat.DIRECT_STEP, None) for layer in layers]
    if steps and all(s is not None and s.whole for s in steps):
        return True, ""
    name = type(layers[0]).__name__ if layers else "none"
    if name in NOT_COVERED:
        return False, f"{NOT_COVERED[name]} run on the library's modules"
    if name not in FORMS:
        return False, f"{name} is not a layer form the kernel computes; its modules run"
    bound = sum(s is not None and s.whole for s in steps)
    return False, (f"{bound} of {len(layers)} layers as whole kernel steps (the rest on the library's modules: "
                   "another precision or device, stream-row adapters on fused Linears, or not bit for bit)")

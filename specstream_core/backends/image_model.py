"""The model of an engine started from its image (`decoding.engine_image`): containers with the attribute names the
engine reads of a transformers Llama-form model (`model.embed_tokens`, `model.layers[i].self_attn.q_proj`, ...,
`model.norm`, `model.rotary_emb`, `lm_head`, `config`), holding the kernel's own modules (4-bit Linears from the
kernel cache, the 8-bit head, norms with the kernel's forward), and no modeling code of their own: every step runs as
the kernel's whole-layer steps, bound and checked against the full engine's outputs bit for bit where the image was
written. Where a step would need the library's modules (gradients, attention capture, a step the kernel's steps do
not take), a module here raises `ImageUnsupported` instead of computing anything.

`capture` takes what such a model is made of from a full engine's model (norms, RoPE's table of every position, the
attention's shape fields, the config's fields); `build` makes the model again from that and the kernel cache's
layouts.
"""

from __future__ import annotations

import json
import os

import torch
from torch import nn

from specstream_core.errors import SpecstreamError
from specstream_core.kernels import library as kernel_library
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.linears import int4, pack_cache, rowinv
from specstream_core.kernels.steps import layer_forms
from specstream_core.model import compat

ROPE_TABLE_LIMIT = 32 << 20  # bytes of (cos, sin) an image keeps at most


class ImageUnsupported(SpecstreamError, RuntimeError):
    """A step an engine started from its image cannot take: it needs the library's modules."""


def _unsupported(what: str):
    raise ImageUnsupported(f"{what}: an engine started from its image runs the kernel's layer steps only; "
                           "start it in full (SPECSTREAM_IMAGE=0)")


class ImageConfig:
    """A model config's fields as attributes (the full engine's `config.to_dict()`), plus what the engine sets on it."""

    def __init__(self, fields: dict):
        self.__dict__.update(fields)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class GenerationConfig:
    def __init__(self, eos_token_id):
        self.eos_token_id = eos_token_id


def image_rope(q, k, cos, sin):
    """Stands for Llama's `apply_rotary_pos_emb`: the kernel rotates q and k as it writes the cache
    (`rowinv_steps.rope_store`); a step outside it would need the library's function."""
    _unsupported("RoPE outside the kernel's cache write")


image_rope.llama_rotation = True  # `layer_forms.is_llama_rope`


class _OffKernel(nn.Module):
    """What `RowInvariantNorm.forward` falls back to where the kernel does not take a row (`super().forward`)."""

    def forward(self, x):
        _unsupported("an RMSNorm off the kernel")


class ImageNorm(rowinv.RowInvariantNorm, _OffKernel):
    """An RMSNorm of Llama's form: the kernel's forward on fp32 CPU rows (`RowInvariantNorm`), nothing else."""

    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.variance_epsilon = eps


class ImageRotary(nn.Module):
    """RoPE's (cos, sin) of every position the model serves, as the full engine's rotary module made them."""

    rope_type = "default"

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor, inv_freq: torch.Tensor):
        super().__init__()
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        if int(position_ids.max()) >= self.cos.shape[0]:
            _unsupported("a position past the model's context length")
        return self.cos[position_ids].to(x.dtype), self.sin[position_ids].to(x.dtype)


class ImageAttention(nn.Module):
    def __init__(self, config: ImageConfig, layer_idx: int, fields: dict, functions: dict):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.head_dim, self.scaling = fields["head_dim"], fields["scaling"]
        self.num_key_value_groups, self.is_causal = fields["num_key_value_groups"], fields["is_causal"]
        self.attention_dropout = fields.get("attention_dropout", 0.0)
        self.attention_functions = functions  # what its layer step attends with (`layer_forms.attention_functions`)
        self.rope = image_rope  # `layer_forms.kernel_rope`

    def forward(self, *args, **kwargs):
        _unsupported("an attention module")


class ImageMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.act_fn = nn.SiLU()

    def forward(self, x):
        _unsupported("an MLP module")


class ImageLayer(nn.Module):
    """A decoder layer of Llama's form (`layer_forms.LLAMA_LAYERS`)."""

    def __init__(self, attention: ImageAttention, norms: tuple[ImageNorm, ImageNorm]):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = norms  # first: a model's first parameter is on the CPU
        self.self_attn, self.mlp = attention, ImageMLP()

    def forward(self, *args, **kwargs):
        _unsupported("a decoder layer off the kernel's steps")


class ImageDecoder(nn.Module):
    def __init__(self, layers: list[ImageLayer], norm: ImageNorm, rotary: ImageRotary):
        super().__init__()
        self.layers, self.norm, self.rotary_emb = nn.ModuleList(layers), norm, rotary
        self.embed_tokens: nn.Module | None = None  # the 8-bit head's rows (`int8_head.TiedEmbedding`), set once it exists


class ImageCausalLM(nn.Module):
    def __init__(self, config: ImageConfig, decoder: ImageDecoder, eos_token_id):
        super().__init__()
        self.config, self.model = config, decoder
        self.generation_config = GenerationConfig(eos_token_id)
        self.lm_head: nn.Module | None = None  # the 8-bit head, from the kernel cache

    def forward(self, *args, **kwargs):
        _unsupported("the model's own forward")


def skeleton(config: ImageConfig, attention: dict, norms: list, final_norm: torch.Tensor, eps: float,
             rope: tuple, functions: dict, eos_token_id) -> ImageCausalLM:
    """The tree, its Linears as meta-device `nn.Linear`s of the config's shapes for `int4.quantize_model` to replace
    from the kernel cache's layouts; norms: each layer's two weights."""
    d, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    head_dim, inter = attention["head_dim"], config.intermediate_size
    layers = []
    for li in range(config.num_hidden_layers):
        attn = ImageAttention(config, li, attention, functions)
        shapes = {"q_proj": (d, heads * head_dim), "k_proj": (d, kv_heads * head_dim),
                  "v_proj": (d, kv_heads * head_dim), "o_proj": (heads * head_dim, d)}
        for name, (i, o) in shapes.items():
            setattr(attn, name, nn.Linear(i, o, bias=False, device="meta"))
        layer = ImageLayer(attn, (ImageNorm(norms[li][0], eps), ImageNorm(norms[li][1], eps)))
        for name, (i, o) in {"gate_proj": (d, inter), "up_proj": (d, inter), "down_proj": (inter, d)}.items():
            setattr(layer.mlp, name, nn.Linear(i, o, bias=False, device="meta"))
        layers.append(layer)
    model = ImageCausalLM(config, ImageDecoder(layers, ImageNorm(final_norm, eps), ImageRotary(*rope)), eos_token_id)
    model.lm_head = nn.Linear(d, config.vocab_size, bias=False, device="meta")
    return model


# ---- the kernel cache an image lives beside ---------------------------------------------------------------------
def cache_enabled() -> bool:
    return pack_cache.enabled()


def cache_folder() -> str:
    return pack_cache.folder()


def file_digest(path: str) -> str:
    return pack_cache.file_digest(path)


def build_name() -> str:
    """The kernel library's file name (a digest of its sources, compiler and flags), or "" without one."""
    return os.path.basename(getattr(kernel_library.library(), "_name", "") or "")


# ---- from a full engine's model, and back ----------------------------------------------------------------------
def rope_positions(config) -> int:
    """Positions of the (cos, sin) table an image keeps: every table `compat.rotary` makes for the positions the engine
    serves (at least ROPE_TABLE_MIN, doubling)."""
    top = max(1, int(config.max_position_embeddings)) - 1
    return max(compat.ROPE_TABLE_MIN, 1 << top.bit_length())


def ineligible(model, precision: str, backend: str) -> str | None:
    """Why a full engine's `model` (at `precision`, its backend named `backend`) has no image, or None."""
    layers = list(compat.decoder_layers(model))
    head, embed = compat.lm_head(model), compat.inner_model(model).embed_tokens
    if precision not in ("int4", "int4-a8") or backend != "rowinv":
        return "only int4 and int4-a8 engines on the row-invariant kernel have images"
    if any(type(layer).__name__ not in layer_forms.LLAMA_LAYERS or isinstance(layer, ImageLayer) for layer in layers):
        return "only layers of Llama's own form have images"
    if not all(getattr(layer.__dict__.get(compat.DIRECT_STEP), "whole", False) for layer in layers):
        return "not every layer runs as a whole kernel step"
    if compat.sliding_window(model.config) is not None:
        return "a sliding window"
    if rope_positions(model.config) * layers[0].self_attn.head_dim * 8 > ROPE_TABLE_LIMIT:
        return "RoPE's table of every position would be too large"
    if not isinstance(head, int8_head.Int8Linear) or not getattr(head, "pack_key", None):
        return "the head is not the kernel cache's 8-bit head"
    if model.__dict__.get(pack_cache.MODEL_KEY) != head.pack_key:
        return "the layouts are not in the kernel cache"
    if not isinstance(embed, int8_head.TiedEmbedding) and type(embed) is not nn.Embedding:
        return "the token embedding is neither a table nor read from the 8-bit head"
    return None


@torch.inference_mode()
def capture(model) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, fields) of a model `ineligible` passes: its norms, RoPE's table, its embedding table where the head
    does not hold it, and the config's and attention's fields."""
    inner, layers = compat.inner_model(model), list(compat.decoder_layers(model))
    tensors = {f"norm.{i}.{j}": n.weight.detach().contiguous() for i, layer in enumerate(layers)
               for j, n in enumerate((layer.input_layernorm, layer.post_attention_layernorm))}
    tensors["norm.final"] = inner.norm.weight.detach().contiguous()
    cos, sin = inner.rotary_emb(torch.zeros(1, 1, model.config.hidden_size),
                                torch.arange(rope_positions(model.config))[None])
    tensors.update({"rope.cos": cos[0].contiguous(), "rope.sin": sin[0].contiguous(),
                    "rope.inv_freq": inner.rotary_emb.inv_freq.detach().float().contiguous()})
    tied = isinstance(inner.embed_tokens, int8_head.TiedEmbedding)
    if not tied:
        tensors["embed"] = inner.embed_tokens.weight.detach().contiguous()
    attn = layers[0].self_attn
    config = json.loads(model.config.to_json_string(use_diff=False))
    config.update({k: v for k, v in vars(model.config).items() if k.startswith("specstream_")})
    fields = {"config": config, "eps": float(layers[0].input_layernorm.variance_epsilon),
              "pack_key": compat.lm_head(model).pack_key, "a8": bool(getattr(compat.lm_head(model), "a8", False)),
              "embedding": {"tied": tied, "padding_idx": inner.embed_tokens.padding_idx},
              "attention": {"head_dim": attn.head_dim, "scaling": attn.scaling, "is_causal": attn.is_causal,
                            "num_key_value_groups": attn.num_key_value_groups,
                            "attention_dropout": float(attn.attention_dropout)}}
    return tensors, fields


def build(fields: dict, tensors: dict[str, torch.Tensor], eos: list[int]) -> ImageCausalLM | None:
    """The model `capture` took, its Linears and head from the kernel cache's layouts (None where the cache no longer
    holds them); its layers' steps attend with the row-exact attention (`compat`)."""
    found = pack_cache.read(fields["pack_key"])
    if found is None:
        return None
    config = ImageConfig({**fields["config"], "_attn_implementation": "sdpa"})
    functions = {compat.ROW_EXACT_ATTENTION: compat._row_exact_forward}
    norms = [(tensors[f"norm.{i}.0"], tensors[f"norm.{i}.1"]) for i in range(config.num_hidden_layers)]
    rope = (tensors["rope.cos"], tensors["rope.sin"], tensors["rope.inv_freq"])
    model = skeleton(config, fields["attention"], norms, tensors["norm.final"], fields["eps"], rope, functions, eos)
    config.specstream_int4 = int4.quantize_model(model, kernel=True, a8=fields["a8"],
                                                 layouts=pack_cache.unflatten(*found))
    head, embedding = model.lm_head, fields["embedding"]
    head.pack_key = model.__dict__[pack_cache.MODEL_KEY] = fields["pack_key"]  # its draft-vocabulary layout, cached
    model.model.embed_tokens = (int8_head.TiedEmbedding(head, embedding["padding_idx"]) if embedding["tied"] else
                                nn.Embedding.from_pretrained(tensors["embed"], freeze=True,
                                                             padding_idx=embedding["padding_idx"]))
    return model

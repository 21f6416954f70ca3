"""Random models at the real shapes of the families' small checkpoints, for what a pass costs there (`pass-cost
--random-shape NAME`): the configs of Qwen3-0.6B, Gemma-3-1B and Phi-4-mini (sizes, layers, heads, key/value heads,
head size, MLP width, vocabulary, tied embeddings, RoPE, windows) written out here, with random weights. A pass
costs the same whatever the weights hold; τ needs trained streams, which a random model has none of.

Nothing of a large model is made in fp32 at once: the model is built on the meta device, and each Linear gets its
random weights when it is packed (`int4.quantize_model` takes its groups from `RandomGroups` one Linear at a time, an
fp32 temporary of one Linear at most), so Phi-4-mini (3.8 B weights) at int4 peaks near its 4-bit size (~3 GB) where
fp32 would need 15 GB. The LM head (tied to the token embedding in all three) is 8-bit groups, made a block of rows at
a time, and the embedding reads its rows from it. fp32 and bf16 make every Linear at once: small shapes only.
"""

from __future__ import annotations

import torch
from torch import nn

from specstream_core import backends
from specstream_core.decoding.engine import Engine
from specstream_core.errors import SpecstreamError
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.linears import int4, rowinv
from specstream_core.model import compat
from specstream_core.model.streams import StreamParams

# name -> (model type, config fields), from the checkpoints' config.json files
SHAPES: dict[str, tuple[str, dict]] = {
    "qwen3-0.6b": ("qwen3", {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                             "vocab_size": 151936, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
                             "max_position_embeddings": 40960, "rope_theta": 1000000.0, "hidden_act": "silu"}),
    "gemma-3-1b": ("gemma3_text", {"hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
                                   "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                                   "vocab_size": 262144, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
                                   "max_position_embeddings": 32768, "sliding_window": 512,
                                   "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh",
                                   "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0}),  # 5 local : 1 global
    # LongRoPE with factors of 1: the real checkpoint's factors change the tables' values, not what a pass computes
    "phi-4-mini": ("phi3", {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
                            "num_attention_heads": 24, "num_key_value_heads": 8, "vocab_size": 200064,
                            "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "partial_rotary_factor": 0.75,
                            "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                            "rope_theta": 10000.0, "sliding_window": 262144, "hidden_act": "silu",
                            "rope_scaling": "longrope", "pad_token_id": 199999}),  # factors of 1 for each rotated pair (`config_of`)
}
STD = 0.02  # the weights' spread (transformers' initializer_range)


def config_of(name: str):
    """The transformers config of a named real shape."""
    from transformers import AutoConfig

    if name not in SHAPES:
        raise SpecstreamError(f"unknown random shape {name!r}; choose one of {', '.join(SHAPES)}")
    model_type, fields = SHAPES[name]
    if fields.get("rope_scaling") == "longrope":
        head = fields.get("head_dim") or fields["hidden_size"] // fields["num_attention_heads"]
        pairs = int(head * fields.get("partial_rotary_factor", 1.0)) // 2
        fields = {**fields, "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * pairs,
                                             "long_factor": [1.0] * pairs}}
    config = AutoConfig.for_model(model_type, **fields)
    config._attn_implementation = "sdpa"
    return config


class RandomGroups:
    """`int4.quantize_model`'s ready groups, made when it asks for each: a Linear's random fp32 weights [N, K] (normal,
    std STD, from a generator seeded per Linear) quantized to 4-bit groups, the head's to 8-bit groups a block of rows
    at a time."""

    def __init__(self, linears: dict[str, nn.Module], seed: int):
        self.shapes = {key: (m.out_features, m.in_features) for key, m in linears.items()}
        self.seed = seed

    def __contains__(self, key: str) -> bool:
        return key in self.shapes

    def get(self, key: str):
        n, k = self.shapes[key]
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + sorted(self.shapes).index(key))
        if key != "lm_head":
            return int4.quantize_groups(torch.randn(n, k, generator=g) * STD)
        parts = [int8_head.quantize_groups(torch.randn(min(4096, n - r), k, generator=g) * STD)
                 for r in range(0, n, 4096)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def random_model(name: str, precision: str = "int4", seed: int = 0) -> nn.Module:
    """A model of the named real shape (`SHAPES`) with random weights, on the CPU in eval mode, at `precision` (int4,
    int4-a8: packed Linear by Linear; fp32, bf16: every Linear made at once) with its Linears on the row-invariant
    kernel, as `Engine.load` would leave a checkpoint of it."""
    from transformers import AutoModelForCausalLM

    if precision not in ("int4", "int4-a8", "fp32", "bf16"):
        raise SpecstreamError(f"random shapes are made at int4, int4-a8, fp32 or bf16, not {precision!r}")
    if not rowinv.available():
        raise SpecstreamError(f"random shapes run on the row-invariant kernel: {rowinv.unavailable_reason()}")
    config = config_of(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.eval().requires_grad_(False)
    linears = int4._linears(model)
    if precision in ("int4", "int4-a8"):
        embedding = compat.inner_model(model).embed_tokens  # a CPU stand-in holding no memory until the head is made
        embedding.weight = nn.Parameter(torch.zeros(1).expand(embedding.weight.shape), requires_grad=False)
        int4.quantize_model(model, RandomGroups(linears, seed), kernel=True, a8=precision == "int4-a8")
        _tied_embedding(model)
    else:
        g = torch.Generator().manual_seed(seed)
        for linear in linears.values():
            w = torch.randn(linear.out_features, linear.in_features, generator=g) * STD
            linear.weight = nn.Parameter(w, requires_grad=False)
        if config.tie_word_embeddings:
            compat.inner_model(model).embed_tokens.weight = compat.lm_head(model).weight
        rowinv.install(model, "rowinv", weight_dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    _fill_the_rest(model, config, seed)
    model.config.specstream_random_shape = name
    return model


def _tied_embedding(model: nn.Module) -> None:
    """The token embedding of a model whose tied head is 8-bit groups now: read from the head (`TiedEmbedding`), or a
    copy of its rows where the embedding scales them (Gemma's)."""
    inner, head = compat.inner_model(model), compat.lm_head(model)
    embedding = inner.embed_tokens
    if type(embedding) is nn.Embedding:
        inner.embed_tokens = int8_head.TiedEmbedding(head, embedding.padding_idx)
        return
    n = head.out_features  # the 8-bit head's rows, a block at a time
    rows = torch.cat([head.embed(torch.arange(r, min(r + 4096, n))) for r in range(0, n, 4096)])
    embedding.weight = nn.Parameter(rows, requires_grad=False)


def _fill_the_rest(model: nn.Module, config, seed: int) -> None:
    """What is still on the meta device after the Linears and the embedding: the norms (random around their identity:
    1 for weight * x, 0 for Gemma's (1 + weight) x) and the buffers made at construction (RoPE tables, Gemma's
    embedding scale), made again on the CPU."""
    g = torch.Generator().manual_seed(seed + 1)
    inner = compat.inner_model(model)
    centre = 0.0 if config.model_type == "gemma3_text" else 1.0
    for module in model.modules():
        for pname, p in list(module.named_parameters(recurse=False)):
            if p.is_meta:
                module._parameters[pname] = nn.Parameter(centre + 0.1 * torch.randn(p.shape, generator=g),
                                                         requires_grad=False)
        if hasattr(module, "scalar_embed_scale"):  # Gemma's scaled embedding
            module.embed_scale = torch.tensor(module.scalar_embed_scale)
    inner.rotary_emb = type(inner.rotary_emb)(config)
    meta = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if meta:
        raise SpecstreamError(f"random shape left on the meta device: {', '.join(meta[:5])}")
    if rowinv.uses_kernel(model):
        rowinv.adopt(model)  # the norms made just now get the kernel's forward


def random_engine(name: str, precision: str = "int4", gamma: int = 4, n_stream_layers: int | None = None,
                  seed: int = 0):
    """An `Engine` on `random_model(name, precision)` with fresh streams (γ `gamma`), no tokenizer (token ids only),
    prepared as `Engine.load` prepares a loaded model."""
    model = random_model(name, precision, seed)
    backends.prepare(model, precision)
    streams = StreamParams.fresh(model, gamma=gamma, n_stream_layers=n_stream_layers)
    return Engine(model, None, streams, name=f"random {name}", precision=precision)

"""The model families the engine runs, what sets each apart from Llama's layer form, and what it refuses.

Every family runs through transformers' own modules (`compat`); nothing here is a copy of modeling code. A family
differs from Llama's form only in what its own modules compute (q/k norms, fused projections, extra norms), in
its attention windows and in its RoPE tables, which `compat` reads per layer. Whether a model's layers then run as
the kernel's whole-layer steps or through the modules is decided at load (`compat.layer_path` says which and why).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str  # shown to users
    norms: tuple[str, ...]  # its RMSNorm classes whose forward is Llama's (the kernel's row-invariant norm computes it)
    form: str = ""  # how its layers differ from Llama's, where they do ("" for Llama's form)
    rope_per_layer: bool = False  # one RoPE table per layer type (`rotary_emb(h, positions, layer_type)`)
    kernel_steps: bool = True  # the kernel's whole-layer steps compute its layer form (else: the module path)


# model_type -> family. Each family is covered by the test suite (tests/test_families*.py, test_lossless.py).
FAMILIES = {
    "llama": Family("Llama", ("LlamaRMSNorm",)),
    "qwen2": Family("Qwen2", ("Qwen2RMSNorm",)),
    "mistral": Family("Mistral", ("MistralRMSNorm",)),
    "qwen3": Family("Qwen3", ("Qwen3RMSNorm",), "RMSNorm on q and k per head"),
    "phi3": Family("Phi-3", ("Phi3RMSNorm",), "fused qkv_proj and gate_up_proj"),
    "gemma3_text": Family("Gemma 3", (), "(1 + weight) RMSNorms, norms after attention and MLP, q/k norms, "
                          "a scaled embedding", rope_per_layer=True, kernel_steps=False),
    "olmo2": Family("OLMo 2", ("Olmo2RMSNorm",), "norms after attention and MLP, q/k norms over the whole projection"),
}
SUPPORTED_MODEL_TYPES = {k: f.name for k, f in FAMILIES.items()}
# RMSNorm classes whose forward is Llama's: weight * (x.float() * rsqrt(mean(x^2) + variance_epsilon))
LLAMA_RMS_NORMS = tuple(n for f in FAMILIES.values() for n in f.norms)

# model types the engine cannot run yet, by what is missing (checked before anything loads)
MIXTURE_OF_EXPERTS = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "dbrx", "jamba",
                      "granitemoe", "phimoe", "llama4", "gpt_oss", "minimax", "qwen3_next")
MULTIMODAL = ("gemma3", "llava", "llava_next", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "idefics3", "mllama",
              "paligemma", "smolvlm", "pixtral", "mistral3", "llama4", "phi4_multimodal", "gemma3n", "internvl")


def supported_names() -> str:
    return ", ".join(SUPPORTED_MODEL_TYPES.values())


def refusal(config) -> str | None:
    """One line naming what the engine lacks to run a model of this config, or None where it runs it."""
    model_type = getattr(config, "model_type", None)
    supported = f"supported families: {supported_names()}"
    if getattr(config, "is_encoder_decoder", False):
        return (f"unsupported architecture {model_type!r}: an encoder-decoder model; the engine decodes with a "
                f"decoder-only stack and has no cross-attention to an encoder ({supported})")
    if model_type in MULTIMODAL or getattr(config, "vision_config", None) is not None:
        text = " (its text model alone, model_type 'gemma3_text', is supported)" if model_type == "gemma3" else ""
        return (f"unsupported architecture {model_type!r}: a multimodal model; the engine takes token ids only and "
                f"has no image or audio encoder{text} ({supported})")
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    if model_type in MIXTURE_OF_EXPERTS or (experts and int(experts) > 1):
        return (f"unsupported architecture {model_type!r}: a mixture-of-experts model; the engine has no expert "
                f"routing in its layer steps or stream adapters ({supported})")
    if model_type not in FAMILIES:
        return f"unsupported architecture {model_type!r}; {supported}"
    for name in ("final_logit_softcapping", "attn_logit_softcapping"):
        if getattr(config, name, None) is not None:
            return (f"unsupported {FAMILIES[model_type].name} variant: {name} is set; the engine's heads and "
                    "row-exact attention have no logit soft-capping")
    if getattr(config, "use_bidirectional_attention", False):
        return f"unsupported {FAMILIES[model_type].name} variant: bidirectional attention (an embedding model)"
    return None


def layer_windows(config) -> tuple[int | None, ...]:
    """Each decoder layer's attention window in tokens (None: the whole context), as the family's own modules apply
    it: per layer type where the config lists them (`layer_types`: Qwen2/Qwen3 from max_window_layers on, Gemma 3's
    interleaved local layers), else the config's one window for every layer (Mistral, Phi-3)."""
    window = getattr(config, "sliding_window", None)
    layers = config.num_hidden_layers
    if config.model_type in ("qwen2", "qwen3") and not getattr(config, "use_sliding_window", False):
        window = None
    types = getattr(config, "layer_types", None)
    if types and config.model_type in ("qwen2", "qwen3", "gemma3_text"):
        return tuple(int(window) if window and t == "sliding_attention" else None for t in types[:layers])
    return (int(window) if window else None,) * layers

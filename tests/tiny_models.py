"""Tiny Llama / Qwen2 / Mistral / Qwen3 / Phi-3 / Gemma 3 / OLMo 2 models built from configs, with decisive
(non-tied) logits."""

from __future__ import annotations

import torch

VOCAB = 128


FAMILIES = ("qwen3", "phi3", "gemma3_text", "olmo2")  # the families beyond Llama's form (tests/test_families*.py)
# Gemma 3's local (sliding-window) layers interleaved with global ones, as its checkpoints have them (5:1 there)
GEMMA3_LAYERS = ("sliding_attention", "full_attention")


def tiny_config(family: str, vocab: int = VOCAB, layers: int = 4, hidden: int = 64, **overrides):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    common.update(overrides)
    if family == "llama":
        return LlamaConfig(**common)
    if family == "qwen2":
        return Qwen2Config(**common)
    if family == "mistral":
        return MistralConfig(**{"sliding_window": None, **common})
    return _family_config(family, common)


def _family_config(family: str, common: dict):
    """Qwen3, Phi-3, Gemma 3 (text) and OLMo 2 configs of the same tiny size."""
    from transformers import Gemma3TextConfig, Olmo2Config, Phi3Config, Qwen3Config

    if family == "qwen3":
        return Qwen3Config(**{"head_dim": 16, **common})
    if family == "phi3":
        return Phi3Config(**{"sliding_window": None, **common})
    if family == "gemma3_text":
        layer_types = [GEMMA3_LAYERS[i % 2] for i in range(common["num_hidden_layers"])]
        return Gemma3TextConfig(**{"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 512,
                                   "layer_types": layer_types, **common})
    if family == "olmo2":
        return Olmo2Config(**common)
    raise ValueError(family)


def tiny_model(family: str = "llama", seed: int = 0, logit_scale: float = 8.0, **kw):
    """A random model whose next-token distributions are peaked enough that argmax never hinges on
    float rounding (the LM head is scaled up)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(family, **kw)
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
        for p in model.model.layers.parameters():
            if p.dim() == 2:
                p.mul_(4.0)  # stronger mixing: outputs depend on context, not just the last token
    model.generation_config.eos_token_id = None  # never stop early in equality tests
    model.generation_config.pad_token_id = 0
    return model


def prompts(n: int, vocab: int = VOCAB, seed: int = 0, min_len: int = 3, max_len: int = 24) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        out.append(torch.randint(3, vocab, (length,), generator=g).tolist())
    return out


def hf_greedy(model, ids: list[int], max_new_tokens: int, **kw) -> list[int]:
    inp = torch.tensor([ids])
    out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False, max_new_tokens=max_new_tokens,
                         min_new_tokens=max_new_tokens, **kw)
    return out[0, len(ids):].tolist()


def save_tiny_model_dir(path) -> str:
    """A tiny Llama with a character-level tokenizer saved to `path`, as a user would pass with --base."""
    _save_char_tokenizer(path)
    tiny_model("llama", seed=3, max_position_embeddings=64).save_pretrained(path)
    return str(path)


def save_tiny_family_dir(path, family: str, seed: int = 3, **kw) -> str:
    """A tiny random checkpoint of `family` (FAMILIES, or llama/qwen2/mistral) with the character-level tokenizer,
    saved by transformers' `save_pretrained` to `path` as a user would pass with --base (fp32 weights)."""
    _save_char_tokenizer(path)
    tiny_model(family, seed=seed, **kw).save_pretrained(path)
    return str(path)


def _save_char_tokenizer(path) -> None:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{chr(97 + i): 3 + i for i in range(26)}, " ": 29}
    vocab.update({f"w{i}": 30 + i for i in range(98)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(path)

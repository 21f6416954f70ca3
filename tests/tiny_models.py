"""Tiny Llama / Qwen2 / Mistral models built from configs, with decisive (non-tied) logits."""

from __future__ import annotations

import torch

VOCAB = 128


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
        return MistralConfig(sliding_window=None, **common)
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
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{chr(97 + i): 3 + i for i in range(26)}, " ": 29}
    vocab.update({f"w{i}": 30 + i for i in range(98)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(path)
    tiny_model("llama", seed=3, max_position_embeddings=64).save_pretrained(path)
    return str(path)

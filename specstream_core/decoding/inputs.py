"""What a decoding starts from: each prompt's token ids, checked against the engine's context length, each row's
default drafter (`loop.start`, `loop.start_batch`), and the model's end-of-sequence ids."""

from __future__ import annotations

from specstream_core.decoding.config import DecodeConfig
from specstream_core.decoding.drafters import Drafter, RootOnly, StreamDrafter, StreamLookupDrafter
from specstream_core.errors import SpecstreamError

MAX_BATCH = 256


def default_drafter(engine, cfg: DecodeConfig) -> Drafter:
    if cfg.mode == "ar":
        return RootOnly()
    if engine.streams is None:
        raise SpecstreamError("speculative decoding needs stream parameters (or another drafter)")
    depth = min(len(cfg.tree_topk), engine.streams.cfg.gamma)
    if cfg.lookup:
        if cfg.ngrams and engine.ngrams is None:
            raise SpecstreamError("ngrams: this stream set has no n-gram store (ngrams.npz); build one with "
                                  "`python -m specstream_core ngrams`, or decode with ngrams off")
        return StreamLookupDrafter(cfg.tree_topk[:depth], cfg.node_budget, cfg.lookup,
                                   store=engine.ngrams if cfg.ngrams else None)
    return StreamDrafter(cfg.tree_topk[:depth], cfg.node_budget)


def prompt_ids(engine, prompt, cfg: DecodeConfig) -> list[int]:
    """Token ids of one prompt (text or ids), checked against the context length."""
    if isinstance(prompt, str):
        return engine.encode(prompt, cfg.max_new_tokens)
    if not (isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt)):
        raise SpecstreamError(f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}")
    engine.check_length(len(prompt), cfg.max_new_tokens)
    return list(prompt)


def prepare_prompts(engine, prompts, cfg: DecodeConfig) -> list[list[int]]:
    """Token ids of every prompt, with one clear error for a bad batch or a bad prompt."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise SpecstreamError("generate_batch needs a non-empty list of prompts")
    if len(prompts) > MAX_BATCH:
        raise SpecstreamError(f"at most {MAX_BATCH} prompts per batch, got {len(prompts)}; split the input")
    out = []
    for i, prompt in enumerate(prompts):
        try:
            out.append(prompt_ids(engine, prompt, cfg))
        except SpecstreamError as exc:
            raise SpecstreamError(f"prompt {i}: {exc}") from None
    return out


def eos_ids(model) -> set[int]:
    """The model's end-of-sequence token ids: its generation config's, else its config's."""
    eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    return set(eos if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else []))

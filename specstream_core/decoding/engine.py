"""The engine: a base model, its tokenizer and (optionally) stream parameters, ready to decode.

    base, streams = model.defaults.resolve(None, None)  # SmolLM2-135M-Instruct and its lossless streams
    engine = Engine.load(base, streams_dir=streams)
    result = engine.generate("Write a SQL query that counts the rows of table t.", DecodeConfig(mode="ss"))
"""

from __future__ import annotations

import os
from functools import lru_cache

import torch

from specstream_core import backends
from specstream_core.model import compat, exactness, hub, msa
from specstream_core.decoding import loop
from specstream_core.decoding.config import DecodeConfig, Result, decode_fields
from specstream_core.decoding.drafters import Drafter
from specstream_core.decoding.drafters.ngram_store import NgramStore
from specstream_core.decoding.inputs import eos_ids
from specstream_core.model.chat import encode_prompt
from specstream_core.errors import SpecstreamError
from specstream_core.model.loading import DEFAULT_PRECISION, LoadConfig, check_architecture, is_exact, load_model, load_tokenizer
from specstream_core.model.streams import StreamParams, read_stream_config, warn_fresh
from specstream_core.model.lora import apply_shared_lora  # noqa: F401 - re-exported (tests, users)


class Engine:
    def __init__(self, model, tokenizer=None, streams: StreamParams | None = None, name: str = "model",
                 precision: str = "fp32", chat: bool = True, ngrams: NgramStore | None = None,
                 stream_weights: str = "auto"):
        check_architecture(model.config)
        self.chat = chat  # wrap text prompts in the tokenizer's chat template, when it has one
        self.model, self.tokenizer, self.streams, self.name, self.precision = model, tokenizer, streams, name, precision
        self.ngrams = ngrams  # the stream set's n-gram store (drafters/ngram_store.py), if it has one
        self.device = next(model.parameters()).device
        self.window = compat.sliding_window(model.config)
        self.context_length = int(getattr(model.config, "max_position_embeddings", 2048))
        self.eos_ids = eos_ids(model)
        self.backend = backends.choose(model, precision, streams)  # what runs scores, attention and layer steps
        self.set_stream_weights(stream_weights)
        self._causal_cache: dict[int, torch.Tensor] = {}
        self.token_text = lru_cache(maxsize=65536)(self._token_text)

    def set_stream_weights(self, kind: str = "auto") -> str:
        """What the stream rows of the multi-stream layers are computed with ("auto", "same", "int4-a8"); drafts change,
        output never does. Rebinds the backend's layer steps (`Backend.bind`). Returns the resolved kind."""
        self.stream_weights = self.backend.bind(kind, msa.forward)
        return self.stream_weights

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def load(cls, base: str, streams_dir: str | None = None, precision: str = DEFAULT_PRECISION, device: str = "cpu",
             gamma: int = 4, n_stream_layers: int | None = None, exact_nf4: bool = True,
             fresh_streams: bool = True, chat: bool = True, kernel: str | None = None,
             stream_weights: str = "auto") -> "Engine":
        """Base model (directory or hub id) + stream directory (or hub id); fresh streams when none is given.

        precision: auto (int4-a8 on a GGUF-converted base such as the default model, int4 there without
        AVX512-VNNI, else the checkpoint's own dtype as transformers loads it; `resolve_precision`), fp32,
        bf16, nf4, int8, int4 or int4-a8. chat: wrap text prompts as a user turn of the model's chat template (when it
        has one). kernel: the CPU fp32/bf16 Linears (auto, rowinv, torch; default: $SPECSTREAM_KERNEL or auto); the
        backend follows from them (`backends.choose`). stream_weights: `set_stream_weights`."""
        if streams_dir is not None:
            streams_dir = hub.local_dir(streams_dir)  # a hub repo id: its snapshot
            read_stream_config(streams_dir)  # fail on a bad adapter before loading a large model
        load = LoadConfig(base, precision=precision, device=device, exact_nf4=exact_nf4, shared_lora=streams_dir,
                          **({"kernel": kernel} if kernel else {}))  # resolves "auto"
        model = load_model(load)  # a shared-mode set's LoRA merged into the weights before quantizing
        backends.prepare(model, load.precision)  # decoding only (an exact 8-bit head): training reads the head's weight
        tokenizer = load_tokenizer(base)
        streams = ngrams = None
        if streams_dir is not None:
            streams = StreamParams.load(streams_dir, model)
            ngrams = NgramStore.load(streams_dir)
            if ngrams is not None:
                ngrams.check_vocab(model.config.vocab_size)
        elif fresh_streams:
            warn_fresh(gamma)
            streams = StreamParams.fresh(model, gamma=gamma, n_stream_layers=n_stream_layers)
        return cls(model, tokenizer, streams, name=os.path.basename(base.rstrip("/")) or base,
                   precision=load.precision, chat=chat, ngrams=ngrams, stream_weights=stream_weights)

    @property
    def row_exact(self) -> bool:
        """Row-invariant Linears (the backend's), so row-exact attention makes a pass's main rows exact."""
        return self.backend.row_exact

    @property
    def exact(self) -> bool:
        """Whether speculative output provably equals plain decoding at this engine's precision."""
        return is_exact(self.precision, self.device.type, self.backend.name)

    # ---- tokens ----------------------------------------------------------------------------------
    def encode(self, prompt: str, max_new_tokens: int = 0) -> list[int]:
        if self.tokenizer is None:
            raise SpecstreamError("this engine has no tokenizer; pass token ids")
        if not isinstance(prompt, str) or not prompt.strip():
            raise SpecstreamError("the prompt is empty")
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:  # a non-UTF-8 byte in argv, "\ud800" from JSON: the tokenizer raises
            raise SpecstreamError(f"the prompt is not Unicode text: a lone surrogate at character {exc.start + 1}") from None
        ids = encode_prompt(self.tokenizer, prompt, self.chat)
        self.check_length(len(ids), max_new_tokens)
        return ids

    def check_length(self, prompt_len: int, max_new_tokens: int) -> None:
        if prompt_len == 0:
            raise SpecstreamError("the prompt is empty")
        if prompt_len + max_new_tokens > self.context_length:
            raise SpecstreamError(
                f"prompt of {prompt_len} tokens + {max_new_tokens} new tokens exceeds the model's context "
                f"length of {self.context_length} tokens; shorten the prompt or lower max new tokens"
            )

    def decode_text(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _token_text(self, token: int) -> str:
        if self.tokenizer is None:
            return str(token)
        return self.tokenizer.decode([token], skip_special_tokens=False)

    # ---- model pieces the decoders use -------------------------------------------------------
    def logits(self, normed_hidden: torch.Tensor) -> torch.Tensor:
        """Shared LM head on already final-normed rows."""
        return self.backend.logits(normed_hidden)

    def head_scores(self, main: torch.Tensor, streams: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A pass's main rows' logits [..., V] and, where one read of the head gives them too, its stream rows' scores
        over the draft vocabulary [..., K] (`draft_scores` of every row); else None: the drafter scores the node it
        takes (`Backend.head_scores`)."""
        return self.backend.head_scores(main, streams)

    def greedy_picks(self, main: torch.Tensor, streams: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(each main row's greedy token [...], the stream rows' draft scores or None): the argmax of `head_scores`'
        logits (the first of equal largest values, as torch's), without the whole logits where the backend can."""
        return self.backend.greedy_picks(main, streams)

    def draft_logits(self, normed_hidden: torch.Tensor) -> torch.Tensor:
        """Stream rows' logits [..., V]: over the stream set's draft vocabulary when it has one."""
        if self.streams is None:
            return self.backend.lm_head(normed_hidden)
        return self.streams.draft_logits(self.backend.lm_head, normed_hidden, self.model.config.vocab_size)

    def draft_scores(self, normed_hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Stream rows' logits over the draft vocabulary and its token ids (None: the whole vocabulary)."""
        if self.streams is None:
            return self.backend.lm_head(normed_hidden), None
        return self.streams.draft_scores(self.backend.lm_head, normed_hidden)

    def causal(self, n: int) -> torch.Tensor:
        if n not in self._causal_cache:
            self._causal_cache[n] = torch.tril(torch.ones(n, n, dtype=torch.bool, device=self.device))[None]
        return self._causal_cache[n]

    def trace_meta(self, cfg: DecodeConfig) -> dict:
        s = self.streams.cfg if self.streams is not None else None
        return {"model": self.name, "precision": self.precision, "device": str(self.device), "mode": cfg.mode,
                "gamma": s.gamma if s else 0, "n_stream_layers": s.n_stream_layers if s else 0,
                "num_layers": self.model.config.num_hidden_layers, "stream_mode": s.mode if s else None,
                "topk": list(cfg.tree_topk), "prune_threshold": cfg.prune_threshold, "node_budget": cfg.node_budget,
                "lookup": cfg.lookup, "ngrams": bool(cfg.ngrams), "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p, "seed": cfg.seed,
                "max_new_tokens": cfg.max_new_tokens, "no_repeat_ngram_size": cfg.no_repeat_ngram_size,
                "repetition_penalty": cfg.repetition_penalty, "equals": exactness.for_engine(self, cfg)}

    # ---- decoding ------------------------------------------------------------------------------
    def recommended_decode(self) -> dict:
        """The draft settings the stream set records as fastest measured at this engine's precision (tree, pruning, node
        budget, prompt-lookup tokens, the n-gram store), as DecodeConfig fields; else a chain as deep as the streams."""
        if self.streams is None:
            return {}
        stored = (self.streams.cfg.extra or {}).get("decode") or {}
        fields = {"tree_topk": (1,) * min(4, self.streams.cfg.gamma),
                  **decode_fields(stored, self.backend.draft_precision())}
        if self.ngrams is None:  # a stream set copied without its n-gram store still decodes, without it
            fields.pop("ngrams", None)
        return fields

    def settle(self, cfg: DecodeConfig) -> DecodeConfig:
        """cfg with the draft settings it leaves None (the default) taken from this stream set's
        recommendation: `DecodeConfig(mode="ss")` decodes with the fastest measured draft."""
        return cfg.settled(self.recommended_decode())

    def decode_config(self, **settings) -> DecodeConfig:
        """A DecodeConfig with this stream set's recommended draft settings; `settings` override them."""
        return self.settle(DecodeConfig(**settings))

    def start(self, prompt: str | list[int], cfg: DecodeConfig, drafter: Drafter | None = None) -> loop.SingleDecoding:
        """A step-wise decoding of one prompt (`.step()` per forward pass, `.run()` to finish): the loop
        of `decoding/loop.py` with B = 1."""
        return loop.start(self, prompt, cfg, drafter)

    def generate(self, prompt: str | list[int], cfg: DecodeConfig, drafter: Drafter | None = None) -> Result:
        return self.start(prompt, cfg, drafter).run()

    def start_batch(self, prompts: list[str | list[int]], cfg: DecodeConfig, share_prefix: bool | None = None,
                    drafter_factory=None):
        """A step-wise batched decoding (`specstream_core.decoding.loop`): one forward pass per step for all rows."""
        return loop.start_batch(self, prompts, cfg, share_prefix, drafter_factory)

    def generate_batch(self, prompts: list[str | list[int]], cfg: DecodeConfig,
                       share_prefix: bool | None = None, drafter_factory=None) -> list[Result]:
        """Decode several prompts together; results in input order, per-sequence stats. Greedy rows equal
        `generate(prompt, cfg)`; with sampling, row i uses seed (cfg.seed or 0) + i. share_prefix (None = when all
        prompts are the same): store the common prompt's K/V once."""
        return self.start_batch(prompts, cfg, share_prefix, drafter_factory).run()

    def generate_n(self, prompt: str | list[int], n: int, cfg: DecodeConfig) -> list[Result]:
        """n continuations of one prompt (samples with seeds seed, seed+1, ...), the prompt's K/V stored once."""
        if not isinstance(n, int) or n < 1:
            raise SpecstreamError(f"n must be a positive integer, got {n!r}")
        return self.generate_batch([prompt] * n, cfg, share_prefix=n > 1)

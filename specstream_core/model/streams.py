"""Speculative-stream parameters: what Speculative Streaming adds to a base model.

- `γ` stream identifier embeddings `P_j ∈ R^d` (streams are born at layer N−Ns as main state + P_j);
- `Ns`, the number of top layers that run multi-stream attention;
- optional stream-rows-only LoRA adapters on those layers (lossless mode: main rows untouched);
- the rank-r early-exit pruning adapter at layer N−Ns (main hidden → low-rank residual map → final
  norm → shared LM head) that scores tree transitions inside the forward pass.

Saved as `streams.safetensors` + `streams_config.json` (never pickle). Shared mode adds a peft LoRA
adapter directory `lora/` applied to main and stream rows alike.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from contextlib import contextmanager
from dataclasses import asdict

import torch
from torch import nn

from specstream_core.backends import ROWS
from specstream_core.model import compat, hub
from specstream_core.model.stream_config import (ADAPTER_TARGETS, CONFIG_NAME, FORMAT_VERSION, LORA_DIR, MAX_GAMMA,  # noqa: F401
                                                 WEIGHTS_NAME, StreamConfig, check_gamma, read_stream_config)
from specstream_core.errors import SpecstreamError
from safetensors.torch import save_file
from safetensors.torch import load_file

class RowState:
    """Shared switch telling stream-row adapters how many leading rows are main rows."""

    def __init__(self):
        self.n_main: int | None = None  # None: no stream rows present, adapters add nothing

    @contextmanager
    def streams_after(self, n_main: int):
        previous, self.n_main = self.n_main, n_main
        try:
            yield
        finally:
            self.n_main = previous


class StreamRowLoRA(nn.Module):
    """Wraps a Linear: `base(x)` for every row plus a LoRA delta on stream rows only.

    Rows are laid out `[main rows | stream rows]` along dim -2; main rows are returned bit-identical.
    """

    def __init__(self, base: nn.Module, rank: int, state: RowState, in_features: int, out_features: int):
        super().__init__()
        self.base = base
        self.state = state
        self.lora_A = nn.Linear(in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.__dict__["draft"] = None  # a cheaper copy of base for the stream rows (kernels/draft_weights.py); not saved

    def set_draft(self, draft: nn.Module | None) -> None:
        self.__dict__["draft"] = draft

    def forward(self, x):
        n = self.state.n_main
        if n is None or n >= x.shape[-2]:
            return self.base(x)
        return ROWS.adapter_rows(self, x, n)  # the backend's Linears for stream rows (kernel, tiles or torch)

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A^T [K, r] and B^T [r, N] in bf16, contiguous, as the kernel's `lora_rows` takes them (stream rows only draft:
        bf16 factors halve what a pass reads for them); made again whenever A or B changes, in place (bound layer
        steps hold their addresses)."""
        a, b = self.lora_A.weight, self.lora_B.weight
        key = self._weights_key()
        if getattr(self, "_factors_key", None) != key:
            with torch.inference_mode(False), torch.no_grad():
                fresh = [w.detach().t().to(torch.bfloat16) for w in (a, b)]
                kept = getattr(self, "_factors", None)
                if kept is not None and all(k.shape == f.shape for k, f in zip(kept, fresh)):
                    for k, f in zip(kept, fresh):
                        k.copy_(f)
                else:
                    self._factors = tuple(f.contiguous() for f in fresh)
            self._factors_key = key
        return self._factors

    def _weights_key(self) -> tuple:
        """What A and B are now (place, and version where not inference tensors): the factors made from them are
        made again when it changes."""
        return tuple((w.data_ptr(), None if w.is_inference() else w._version) for w in (self.lora_A.weight, self.lora_B.weight))

    def tiled_factors(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A and B laid out for the backend's kernel where the base runs on one (AMX tiles: `CpuKernel.adapter_factors`),
        else None. Made again whenever A or B changes."""
        return ROWS.adapter_factors(self)


class PruneHead(nn.Module):
    """Low-rank residual map on the layer-(N−Ns) main state; logits come from final norm + LM head."""

    def __init__(self, hidden: int, rank: int):
        super().__init__()
        self.down = nn.Linear(hidden, rank, bias=False)
        self.up = nn.Linear(rank, hidden, bias=False)
        nn.init.zeros_(self.up.weight)  # starts as a plain early exit

    def forward(self, h):
        return h + self.up(self.down(h.to(self.down.weight.dtype))).to(h.dtype)


class StreamParams(nn.Module):
    """All stream parameters of one model. Attach with `attach(model)` to install row adapters."""

    def __init__(self, cfg: StreamConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.embeddings = nn.Parameter(torch.zeros(cfg.gamma, d))
        self.prune = PruneHead(d, cfg.prune_rank) if cfg.prune_rank else None
        self.adapters = nn.ModuleDict()  # "L.attn.q_proj" -> StreamRowLoRA (filled by attach)
        self.rows = RowState()
        self._attached_to: nn.Module | None = None
        # draft vocabulary (the FR-Spec idea): stream rows are scored against these token ids only; main
        # rows always use the full head, so verification and output are unchanged
        self.register_buffer("draft_vocab", torch.arange(cfg.draft_vocab_size) if cfg.draft_vocab_size else None)
        self._draft_head: tuple | None = None  # (head cut to the draft vocabulary, source weights, (device, dtype))
        self.cheap_draft_head = False  # that cut an 8-bit copy (kernels/draft_weights.py, set by the backend's bind)

    # ---- construction ------------------------------------------------------------------
    @classmethod
    def fresh(cls, model, gamma: int = 4, n_stream_layers: int | None = None, adapter_rank: int = 0,
              prune_rank: int = 8, mode: str = "lossless", seed: int = 0,
              draft_vocab: list[int] | None = None) -> "StreamParams":
        config = model.config
        n_layers = config.num_hidden_layers
        ns = n_stream_layers if n_stream_layers is not None else max(1, n_layers // 4)
        cfg = StreamConfig(gamma=gamma, n_stream_layers=ns, mode=mode, adapter_rank=adapter_rank,
                           prune_rank=prune_rank, hidden_size=config.hidden_size, num_layers=n_layers,
                           model_type=config.model_type, draft_vocab_size=len(draft_vocab or ()))
        params = cls(cfg)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            params.embeddings.normal_(0.0, 0.02, generator=gen)
            if draft_vocab:
                params.set_draft_vocab(draft_vocab, config.vocab_size)
        params.attach(model)
        return params

    def attach(self, model) -> "StreamParams":
        """Place parameters on the model's device and wrap top-layer Linears with row adapters."""
        device = next(model.parameters()).device
        self.to(device)
        if self.cfg.adapter_rank and not self.adapters:
            ROWS.unbind(model)  # layer steps bound to the Linears the adapters now wrap
            layers = compat.decoder_layers(model)
            for li in range(self.cfg.birth_layer, self.cfg.num_layers):
                for parent_name, parent in (("attn", layers[li].self_attn), ("mlp", layers[li].mlp)):
                    for name in ADAPTER_TARGETS:
                        base = getattr(parent, name, None)
                        if base is None:
                            continue
                        wrapper = StreamRowLoRA(base, self.cfg.adapter_rank, self.rows,
                                                base.in_features, base.out_features).to(device)
                        ROWS.own_linears(model, [wrapper.lora_A, wrapper.lora_B])
                        setattr(parent, name, wrapper)
                        self.adapters[f"{li}_{parent_name}_{name}"] = wrapper
        self._attached_to = model
        return self

    def detach(self) -> None:
        """Restore the model's original Linears (row adapters removed)."""
        model = self._attached_to
        if model is None:
            return
        ROWS.unbind(model)
        for parent, name, wrapper in self._adapter_places():
            setattr(parent, name, wrapper.base)
        self.adapters = nn.ModuleDict()
        self._attached_to = None

    def _adapter_places(self) -> list[tuple[nn.Module, str, StreamRowLoRA]]:
        """(parent module, attribute, row adapter) of every adapter installed on the attached model."""
        if self._attached_to is None:
            return []
        layers = compat.decoder_layers(self._attached_to)
        places = []
        for key, wrapper in self.adapters.items():
            li, parent_name, name = key.split("_", 2)
            parent = layers[int(li)].self_attn if parent_name == "attn" else layers[int(li)].mlp
            places.append((parent, name, wrapper))
        return places

    @contextmanager
    def unwrapped(self):
        """The model's own Linears back in place for a while, the row adapters kept: a shared-mode run's
        peft LoRA is then saved and loaded under its own module names (`….q_proj.lora_A`, not `….base.…`)."""
        places = self._adapter_places()
        for parent, name, wrapper in places:
            setattr(parent, name, wrapper.base)
        try:
            yield
        finally:
            for parent, name, wrapper in places:
                setattr(parent, name, wrapper)

    # ---- the draft vocabulary -------------------------------------------------------------
    def set_draft_vocab(self, ids, vocab_size: int) -> None:
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if ids.numel() != self.cfg.draft_vocab_size or (ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size)):
            raise SpecstreamError(f"draft vocabulary needs {self.cfg.draft_vocab_size} token ids in [0, {vocab_size})")
        if torch.unique(ids).numel() != ids.numel():
            raise SpecstreamError("draft vocabulary has repeated token ids")
        self.draft_vocab = ids.to(self.embeddings.device)
        self._draft_head = None

    def draft_head(self, head: nn.Module) -> nn.Module:
        """The LM head cut to the draft vocabulary's rows (a frozen Linear [K, d], or a quantized head's own
        `rows`: model/int8_head.Int8Linear, model/int4.Int4Linear); cut once, reused every step until the head's weights change."""
        source = next(t for t in (getattr(head, name, None) for name in ("weight", "q8", "q4")) if t is not None)
        cached = self._draft_head
        if cached is None or cached[1] is not source or cached[2] != (source.device, source.dtype):
            idx = self.draft_vocab.to(source.device)
            sub = ROWS.cut_head(head, source, idx, self.cheap_draft_head)
            cached = (sub, source, (source.device, source.dtype))
            self._draft_head = cached
        return cached[0]

    def draft_scores(self, head: nn.Module, normed_hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Stream-row logits over the draft vocabulary ([..., K]) and its token ids ([K]; None: K is the
        whole vocabulary, in order). What a drafter ranks: no need to spread them over the vocabulary."""
        if self.draft_vocab is None:
            return head(normed_hidden), None
        sub_head = self.draft_head(head)
        return sub_head(ROWS.head_input(sub_head, normed_hidden)), self.draft_vocab

    def draft_logits(self, head: nn.Module, normed_hidden: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Stream-row logits over the full vocabulary ([..., V]); tokens outside the draft vocabulary
        get -inf, so they are never drafted (and cost nothing to score)."""
        sub, ids = self.draft_scores(head, normed_hidden)
        if ids is None:
            return sub
        full = sub.new_full((*sub.shape[:-1], vocab_size), float("-inf"))
        return full.scatter_(-1, ids.to(sub.device).expand_as(sub), sub)

    def trainable_parameters(self):
        """Stream embeddings, row adapters' LoRA factors and the pruning head (never base weights)."""
        params = [self.embeddings]
        if self.prune is not None:
            params += list(self.prune.parameters())
        for wrapper in self.adapters.values():
            params += [wrapper.lora_A.weight, wrapper.lora_B.weight]
        return params

    def extra_parameter_count(self) -> int:
        return sum(p.numel() for p in self.trainable_parameters())

    # ---- persistence ----------------------------------------------------------------------
    def named_tensors(self) -> dict[str, torch.Tensor]:
        """The trained tensors under their file names (the one naming: saved files, checkpoints, loading)."""
        tensors = {"embeddings": self.embeddings}
        if self.prune is not None:
            tensors["prune.down"] = self.prune.down.weight
            tensors["prune.up"] = self.prune.up.weight
        for key, wrapper in self.adapters.items():
            tensors[f"adapter.{key}.A"] = wrapper.lora_A.weight
            tensors[f"adapter.{key}.B"] = wrapper.lora_B.weight
        return tensors

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """`named_tensors` as float32 CPU copies, plus the draft vocabulary: what a stream file holds."""
        out = {k: v.detach().float().cpu().contiguous() for k, v in self.named_tensors().items()}
        if self.draft_vocab is not None:
            out["draft_vocab"] = self.draft_vocab.detach().cpu().to(torch.int64).contiguous()
        return out

    def save(self, directory: str, extra: dict | None = None) -> None:
        os.makedirs(directory, exist_ok=True)
        save_file(self.state_tensors(), os.path.join(directory, WEIGHTS_NAME))
        cfg = asdict(self.cfg)
        if extra:
            cfg["extra"] = {**cfg.get("extra", {}), **extra}
        with open(os.path.join(directory, CONFIG_NAME), "w") as f:
            json.dump(cfg, f, indent=2)

    @classmethod
    def load(cls, directory: str, model) -> "StreamParams":
        cfg = read_stream_config(directory)
        config = model.config
        if cfg.hidden_size != config.hidden_size or cfg.num_layers != config.num_hidden_layers:
            raise SpecstreamError(
                f"streams in {directory} were made for hidden size {cfg.hidden_size} and {cfg.num_layers} layers; "
                f"this model has {config.hidden_size} and {config.num_hidden_layers}"
            )
        params = cls(cfg)
        params.attach(model)
        tensors = read_stream_weights(directory)
        expected = set(params.state_tensors())
        if set(tensors) != expected:
            missing = sorted(expected - set(tensors))[:3]
            unexpected = sorted(set(tensors) - expected)[:3]
            raise SpecstreamError(f"stream weights in {directory} do not match their config (missing {missing}, unexpected {unexpected})")
        with torch.no_grad():
            for name, target in params.named_tensors().items():
                source = tensors[name]
                if source.shape != target.shape:
                    raise SpecstreamError(f"stream tensor {name} in {directory} has shape {tuple(source.shape)}, expected {tuple(target.shape)}")
                if not torch.isfinite(source).all():
                    raise SpecstreamError(f"stream tensor {name} in {directory} contains NaN or inf")
                target.copy_(source.to(target.dtype))
            if params.draft_vocab is not None:
                params.set_draft_vocab(tensors["draft_vocab"], config.vocab_size)
        return params

    # ---- the Hugging Face Hub (thin wrappers: specstream_core/hub.py) ---------------------------
    @classmethod
    def from_pretrained(cls, name_or_path: str, model, **kwargs) -> "StreamParams":
        """A local directory or a hub repo id; see hub.from_pretrained."""
        return hub.from_pretrained(cls, name_or_path, model, **kwargs)

    def save_pretrained(self, directory: str, **kwargs) -> str:
        """save() plus a README.md model card; see hub.save_pretrained."""
        return hub.save_pretrained(self, directory, **kwargs)

    def push_to_hub(self, repo_id: str, **kwargs) -> str:
        return hub.push_to_hub(self, repo_id, **kwargs)


def read_stream_weights(directory: str) -> dict[str, torch.Tensor]:
    path = os.path.join(directory, WEIGHTS_NAME)
    if not os.path.isfile(path):
        raise SpecstreamError(f"{directory} holds no {WEIGHTS_NAME}")
    try:
        return load_file(path)
    except Exception as exc:  # safetensors raises its own error types for truncated/corrupt files
        raise SpecstreamError(f"corrupt stream weights {path}: {str(exc).splitlines()[0]}") from None


def warn_fresh(gamma: int) -> None:
    warnings.warn(
        f"using {gamma} fresh, untrained speculative streams: output is still exact, but drafts will "
        "rarely be accepted (train streams with `python -m specstream_core train`)",
        stacklevel=2,
    )

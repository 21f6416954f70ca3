"""The backend interface: what the method asks of the machine that runs a model, and torch's answers.

The loop, `msa` and the stream rows never ask which instruction set, precision or device runs them; they ask a
`Backend` (chosen once, when an engine is made: `backends.choose`) for

- scores: the LM head's logits of a pass's main rows, with its stream rows' draft scores where one read gives both
  (`head_scores`), and verification as one call (`verification`: greedy picks where only argmaxes are needed);
- attention: the context a decoding step or a prefill runs in (`attention`), row-exact where the Linears are
  row-invariant, so a speculative pass computes its main rows as a plain pass would;
- layer steps: a run of layers, or a speculative step's two runs, as one call where the backend has one
  (`run_stack`, `stream_stack_ready` / `run_stream_stack`; None: `msa` runs the modules);
- the stream rows' Linears: a row adapter's forward on stream rows (`adapter_rows`), the draft head's cut
  (`cut_head`), what the draft head takes (`head_input`);
- bind: the stream rows' weights and the direct layer steps, kept only where `probe` finds them exact.

This class is the reference: torch's Linears and sdpa. `TorchBackend` adds row-exact attention for torch's int4
kernel; `CpuKernel` (the row-invariant CPU kernel) overrides what its kernels compute.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

from specstream_core.kernels import draft_weights
from specstream_core.kernels.heads import greedy
from specstream_core.kernels.steps import direct_layers
from specstream_core.model import compat, masks
from specstream_core.model.cache import KVCache


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """The greedy choice, torch's `logits.argmax(-1)` (the first of equal largest values): the kernel's where it runs
    (`greedy.argmax`, ~10x faster)."""
    return greedy.argmax(logits)


def input_dtype(module: nn.Module) -> torch.dtype:
    weight = getattr(module, "weight", None)
    return weight.dtype if weight is not None else torch.float32  # int4 layers take fp32 and cast inside


class Backend:
    """torch's Linears and attention (sdpa); nothing bound. Subclasses override what their kernels compute."""

    name = "torch"  # what the Linears run on (`loading.is_exact`'s kernel)
    row_exact = False  # a pass's main rows are computed as one-row passes compute them (row-invariant Linears)

    @classmethod
    def fits(cls, model: nn.Module, precision: str) -> bool:
        """Whether this backend runs `model` (the first in `backends.BACKENDS` that fits does)."""
        return True

    @classmethod
    def prepare(cls, model: nn.Module, precision: str) -> None:
        """Changes to a freshly loaded model for decoding only (`Engine.load`; training reads the weights as loaded)."""

    def __init__(self, model: nn.Module, precision: str, streams=None):
        self.model, self.precision, self.streams = model, precision, streams
        self.lm_head = compat.lm_head(model)
        if self.row_exact:
            compat.use_row_exact_attention(model)

    def layer_path(self) -> tuple[bool, str]:
        """(whether the kernel's whole-layer steps run the decoder layers, why not where they do not)."""
        return False, "the Linears are not on the row-invariant kernel (precision or device): the library's modules run"

    def draft_precision(self) -> str:
        """The name a stream set records this precision's fastest draft under (`decode_fields`)."""
        return self.precision

    # ---- scores -----------------------------------------------------------------------------------------
    def logits(self, normed_hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on already final-normed rows [..., d] -> [..., V]."""
        return self.lm_head(normed_hidden)

    def head_scores(self, main: torch.Tensor, streams: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(main rows' logits [..., V], stream rows' draft scores [..., K] where the same read gives them, else None:
        the drafter scores the node it takes)."""
        return self.logits(main), None

    def greedy_picks(self, main: torch.Tensor, streams: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(each main row's greedy token [...], the stream rows' draft scores or None)."""
        logits, scored = self.head_scores(main, streams)
        return argmax(logits), scored

    def verification(self, main: torch.Tensor, streams: torch.Tensor | None, greedy: bool):
        """What a pass's verification reads, in one call: (greedy picks [B, m] where `greedy` (only argmaxes are
        needed), else logits [B, m, V]; the stream rows' draft scores or None)."""
        return self.greedy_picks(main, streams) if greedy else self.head_scores(main, streams)

    # ---- attention --------------------------------------------------------------------------------------
    def attention(self, rows, per_row: bool, causal_prompt: bool):
        """The context a pass runs in: row-exact attention (`compat.row_exact_attention`; rows: the stream
        parameters' RowState or None; per_row: a decoding step; causal_prompt: one prompt on an empty cache) where
        the Linears are row-invariant, else the model's own attention."""
        if not self.row_exact:
            return nullcontext()
        return compat.row_exact_attention(rows, per_row=per_row, causal_prompt=causal_prompt)

    # ---- layer steps (msa): none here, the modules run ---------------------------------------------------
    @staticmethod
    def run_stack(layers, h: torch.Tensor, mask, pe, cache) -> torch.Tensor | None:
        """Consecutive layers' step in one call, or None (the caller runs them one by one)."""
        return None

    @staticmethod
    def stream_stack_ready(lower, upper) -> tuple | None:
        """What `run_stream_stack` takes where a speculative step's two runs of layers can be one call, else None."""
        return None

    @staticmethod
    def kernel_norm(module: nn.Module) -> tuple | None:
        """What `run_stream_stack` takes to apply the final norm inside its call, or None (the caller applies it)."""
        return None

    @staticmethod
    def run_stream_stack(ready: tuple, h, mask, pe, top_mask, top_pe, cache, carriers, embeddings, norm=None):
        """A speculative step's layers in one call: (main rows entering the upper layers, the upper layers' output),
        or None (the caller runs the pieces)."""
        return None

    # ---- the stream rows' Linears ----------------------------------------------------------------------
    @classmethod
    def adapter_rows(cls, adapter, x: torch.Tensor, n: int) -> torch.Tensor:
        """A stream-row adapter's (`streams.StreamRowLoRA`) forward where rows n.. of x are stream rows: its base on
        every row, plus the LoRA delta on the stream rows."""
        y = adapter.base(x)
        y[..., n:, :] += cls.adapter_delta(adapter, x[..., n:, :]).to(y.dtype)  # in place: y is a fresh output
        return y

    @staticmethod
    def adapter_delta(adapter, rows: torch.Tensor) -> torch.Tensor:
        return adapter.lora_B(adapter.lora_A(rows.to(adapter.lora_A.weight.dtype)))

    @staticmethod
    def adapter_factors(adapter) -> tuple[torch.Tensor, torch.Tensor] | None:
        """An adapter's factors laid out for a kernel of the backend (None: its own Linears)."""
        return None

    @staticmethod
    def own_linears(model: nn.Module, modules: list[nn.Module]) -> None:
        """Give new Linears beside a model's (a row adapter's factors) what the model's own Linears run on."""

    @staticmethod
    def cut_head(head: nn.Module, source: torch.Tensor, idx: torch.Tensor, cheap: bool) -> nn.Module:
        """The LM head cut to the draft vocabulary's rows `idx` (source: its weight); cheap: an 8-bit copy where
        the backend has one (`draft_weights`)."""
        if hasattr(head, "rows"):
            return head.rows(idx)
        bias = head.bias[idx].detach() if getattr(head, "bias", None) is not None else None
        sub = nn.Linear(head.in_features, idx.numel(), bias=bias is not None, device=source.device,
                        dtype=source.dtype).requires_grad_(False)
        sub.weight.data = source.detach()[idx].contiguous()
        if bias is not None:
            sub.bias.data = bias
        return sub

    @staticmethod
    def head_input(sub_head: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """x as the draft head takes it."""
        return x.to(input_dtype(sub_head))

    @staticmethod
    def unbind(model: nn.Module) -> None:
        """Drop the layer steps bound to a model's layers (its Linears are about to change)."""
        direct_layers.unbind(compat.decoder_layers(model))

    # ---- binding ----------------------------------------------------------------------------------------
    def bind(self, kind: str, forward) -> str:
        """The stream rows' weights (`draft_weights`: "auto", "same", "int4-a8"; drafts change, output never does)
        and, where the backend is row-exact, direct layer steps, kept only if `probe` (a prompt and a step through
        `forward`, msa's) gives every output bit for bit with and without them. Returns the resolved kind."""
        layers = compat.decoder_layers(self.model)
        direct_layers.unbind(layers)
        if self.streams is not None and self.row_exact:
            kind = draft_weights.apply(self.streams, self.model, kind)
        else:
            kind = draft_weights.resolve(kind, None, self.model)
        if self.row_exact:  # an engine image's model carries the full engine's probe outputs (`decoding.engine_image`)
            direct_layers.bind(layers, lambda: probe(self, forward), getattr(self.model, "probe_reference", None))
        return kind


@torch.inference_mode()
def probe(backend: Backend, forward) -> list[torch.Tensor]:
    """A prompt, then a 3-node chain step carrying the streams (when there are any), as the loop runs them (forward:
    `msa.forward`), and the prompt as a batch of two (a batch's prefill runs layer by layer): their outputs, for
    `direct_layers.bind` to compare with and without direct layer steps."""
    model, streams = backend.model, backend.streams
    device = next(model.parameters()).device
    n = 8
    ids = torch.arange(n + 3, device=device)[None] % model.config.vocab_size
    cache = KVCache.for_model(model, batch=1, capacity=n + 3 * (1 + (streams.cfg.gamma if streams else 0)) + 4)
    rows = streams.rows if streams is not None else None
    with backend.attention(rows, per_row=False, causal_prompt=True):
        prompt = forward(model, ids[:, :n], torch.arange(n, device=device)[None],
                         masks.causal_visibility(n, 1, device), cache=cache)
    cache.advance(n)
    carriers = torch.arange(3, device=device)[None] if streams is not None else None
    with backend.attention(rows, per_row=True, causal_prompt=False):
        step = forward(model, ids[:, n:], torch.arange(n, n + 3, device=device)[None],
                       masks.causal_visibility(3, 1, device), streams=streams, carriers=carriers, cache=cache)
    pair = KVCache.for_model(model, batch=2, capacity=n)  # the same prompt twice: a batch's prefill, layer by layer
    with backend.attention(rows, per_row=False, causal_prompt=False):
        batch = forward(model, ids[:, :n].expand(2, n), torch.arange(n, device=device).expand(2, n),
                        masks.causal_visibility(n, 2, device), cache=pair)
    return [prompt.main, step.main] + ([step.streams] if step.streams is not None else []) + [batch.main]

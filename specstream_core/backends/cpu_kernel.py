"""The row-invariant CPU kernel as a backend (`specstream_core/kernels/`): engines whose Linears run on it.

- scores: the LM head laid out with the draft vocabulary first (`merged_head`: one read scores a pass's main rows and
  its stream rows), and greedy verification of an exact 8-bit head from a read of it against 8-bit activations
  (`certified_head`), each made once per head weight and draft vocabulary;
- attention: the kernel's (`rowinv.attend`; `rowinv_steps.TiledStreams` where the stream layers' Linears are on AMX
  tiles), over the keys `rowinv_steps.mask_keys` lists;
- layer steps: runs of bound direct steps as one kernel call (`direct_layers.run_stack`,
  `layer_stacks.run_stream_stack`);
- the stream rows: their adapters' delta on AMX tiles or the kernel's `lora_rows`, 4-bit copies of the stream layers
  (`draft_weights`), the draft head's 8-bit copy. These run wherever the kernel's library does (`rowinv.enabled()`),
  whatever the model's Linears, and fall back to torch's call by call (gradients, `rowinv.torch_linears()`).
"""

from __future__ import annotations

import torch
from torch import nn

from specstream_core.backends.base import Backend
from specstream_core.kernels import amx_tiles, draft_weights
from specstream_core.kernels.heads import certified_head, greedy, int8_head, merged_head
from specstream_core.kernels.linears import rowinv
from specstream_core.kernels.steps import direct_layers, layer_forms, layer_stacks, rowinv_steps
from specstream_core.model import compat


class CpuKernel(Backend):
    """Engines whose Linears run on the row-invariant kernel (fp32, bf16, int4, int4-a8 on a CPU)."""

    name = "rowinv"
    row_exact = True

    @classmethod
    def fits(cls, model: nn.Module, precision: str) -> bool:
        return rowinv.uses_kernel(model)

    @classmethod
    def prepare(cls, model: nn.Module, precision: str) -> None:
        """An fp32 model's head as 8-bit groups where it is them exactly (`int8_head.use_exact_head`): the same logits
        from a quarter of the head's bytes; a token embedding tied to an 8-bit head that holds its weights exactly
        read from that head (`int8_head.tie_embedding`: the same vectors, without the fp32 table)."""
        if not cls.fits(model, precision):
            return
        if precision == "fp32":
            int8_head.use_exact_head(model)
        int8_head.tie_embedding(model)

    def __init__(self, model: nn.Module, precision: str, streams=None):
        super().__init__(model, precision, streams)
        self._head_memo: tuple = (None, None)  # (what it was made for, `merged_head`)
        self._certified_memo: tuple = (None, None)  # (what it was made for, `certified_head`)
        self._tiled: tuple | None = None  # (the model, the row state, `_tiled_streams` for them): asked every step
        if streams is not None and getattr(self.lm_head, "a8", False):  # the 8-bit head laid out now, while the
            self.merged_head()  # engine is still small: its two copies meet below the first decoding's peak

    def layer_path(self) -> tuple[bool, str]:
        """Whether every decoder layer runs as a whole kernel step (`layer_forms.kernel_covers`: the families whose
        form the kernel computes, bound and found exact at `bind`), and why not where not."""
        return layer_forms.kernel_covers(self.model)

    def draft_precision(self) -> str:
        return rowinv.draft_precision(self.precision)

    # ---- scores -----------------------------------------------------------------------------------------
    def logits(self, normed_hidden: torch.Tensor) -> torch.Tensor:
        head = self.merged_head()
        return self.lm_head(normed_hidden) if head is None else head.scores(normed_hidden)[0]

    def head_scores(self, main: torch.Tensor, streams: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Where one read of the head gives them (`merged_head`: bf16 on AMX tiles, int4-a8's 8-bit head), the stream
        rows' scores over the draft vocabulary too."""
        head = self.merged_head() if streams is not None and not self.streams.cheap_draft_head else None
        return (self.logits(main), None) if head is None else head.scores(main, streams)

    def greedy_choices(self, main: torch.Tensor, streams: torch.Tensor | None) -> tuple | None:
        """Each main row's greedy token [...] without its whole logits, and the stream rows' draft scores as
        `head_scores` gives them (or None), where the head is an exact 8-bit head on fp32 activations and the
        8-bit-activation kernel runs (`certified_head`: fp32 and int4 engines); else None."""
        head = self.certified_head()
        if head is None:
            return None
        drafts = streams is not None and self.streams is not None and self.streams.cheap_draft_head
        return head.choose(main, streams if drafts else None)

    def greedy_picks(self, main: torch.Tensor, streams: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`greedy_choices` where it runs, else the argmax of `head_scores`' logits."""
        picks = self.greedy_choices(main, streams)
        if picks is None:
            logits, scored = self.head_scores(main, streams)
            picks = greedy.argmax(logits), scored
        return picks

    def certified_head(self):
        """`certified_head.CertifiedHead` of the LM head (the stream set's draft vocabulary first), or None; made once
        per head and draft vocabulary."""
        ids = self.streams.draft_vocab if self.streams is not None else None
        weight = getattr(self.lm_head, "q8", None)
        key = (None if weight is None else weight.data_ptr(), None if ids is None else ids.data_ptr())
        if self._certified_memo[0] != key:
            made = certified_head.CertifiedHead.of(self.lm_head, ids) if weight is not None else None
            self._certified_memo = (key, made)
        return self._certified_memo[1]

    def merged_head(self):
        """The LM head with the stream set's draft vocabulary first (`MergedHead.of`), or None; made once per head
        weight and draft vocabulary."""
        ids = self.streams.draft_vocab if self.streams is not None else None
        weight = next((t for t in (getattr(self.lm_head, n, None) for n in ("weight", "q8")) if t is not None), None)
        key = (None if weight is None else weight.data_ptr(), None if ids is None else ids.data_ptr())
        del weight  # an 8-bit head laid out anew lets its old copy go
        if self._head_memo[0] != key:
            made = merged_head.MergedHead.of(self.lm_head, ids)  # an 8-bit head is laid out anew: its new copy's key
            weight = next((t for t in (getattr(self.lm_head, n, None) for n in ("weight", "q8")) if t is not None), None)
            self._head_memo = ((None if weight is None else weight.data_ptr(), key[1]), made)
        return self._head_memo[1]

    # ---- attention --------------------------------------------------------------------------------------
    def attention(self, rows, per_row: bool, causal_prompt: bool):
        """Row-exact attention whose decoding steps and prefills go through the kernel's attention, over the keys
        `rowinv_steps.mask_keys` lists (a prefill: each prompt row over the keys before it, as a step computes a row).
        A prefill stays one sdpa call where the kernel does not take its rows (not fp32) and where the Linears round
        activations to 8 bits (int4-a8): there a last-bit difference in the prompt's attention is rounded up into
        other answers (the README's SQL prompt among them), so the prompt keeps the arithmetic transformers' own
        generate uses on the same model."""
        kernel = self.kernel_attention()
        return compat.row_exact_attention(rows, per_row=per_row, causal_prompt=causal_prompt, kernel=kernel,
                                          kernel_keys=rowinv_steps.mask_keys,
                                          kernel_prefill=kernel is rowinv.attend and self.precision != "int4-a8")

    def kernel_attention(self):
        """`rowinv.attend`, or `rowinv_steps.TiledStreams` where the stream layers' Linears are on AMX tiles. (int4 on
        torch's kernel keeps sdpa's arithmetic: its Linears round activations to bf16, where a last-bit difference in
        attention would often change a token against transformers' generate on the same int4 model.)"""
        return self._tiled_streams() or rowinv.attend

    def _tiled_streams(self):
        """`rowinv_steps.TiledStreams` where stream rows run through layers whose Linears are on AMX tiles (their
        attention on tiles too, as the layer steps compute it there), else None."""
        if self.streams is None:
            return None
        kept = self._tiled
        if kept is None or kept[0] is not self.model or kept[1] is not self.streams.rows:
            lin = compat.attention_linear(compat.decoder_layers(self.model)[-1])
            lin = getattr(lin, "base", lin)
            tiles = isinstance(lin, rowinv.RowInvariantLinear) and lin.on_tiles()
            kept = (self.model, self.streams.rows, rowinv_steps.TiledStreams(self.streams.rows) if tiles else None)
            self._tiled = kept
        return kept[2]

    # ---- layer steps (msa) ------------------------------------------------------------------------------
    # (each a call of the kernel layer's function as it stands, so what replaces one there, replaces it here too)
    @staticmethod
    def run_stack(layers, h: torch.Tensor, mask, pe, cache) -> torch.Tensor | None:
        return direct_layers.run_stack(layers, h, mask, pe, cache)

    @staticmethod
    def stream_stack_ready(lower, upper) -> tuple | None:
        return layer_stacks.stream_stack_ready(lower, upper)

    @staticmethod
    def run_stream_stack(ready: tuple, h, mask, pe, top_mask, top_pe, cache, carriers, embeddings, norm=None):
        return layer_stacks.run_stream_stack(ready, h, mask, pe, top_mask, top_pe, cache, carriers, embeddings, norm)

    @staticmethod
    def kernel_norm(module: nn.Module) -> tuple | None:
        """The final norm inside the call where it is the kernel's."""
        return rowinv_steps.kernel_norm(module)

    # ---- the stream rows' Linears ----------------------------------------------------------------------
    @classmethod
    def adapter_rows(cls, adapter, x: torch.Tensor, n: int) -> torch.Tensor:
        """Main rows on the base, stream rows on its 4-bit copy where it has one (`draft_weights`, from MIN_ROWS
        stream rows); the delta on AMX tiles where the base runs on them, else by the kernel's `lora_rows` on fp32
        rows, as the kernel's layer steps compute it; else torch's."""
        grad = torch.is_grad_enabled()
        if adapter.draft is not None and x.shape[-2] - n >= draft_weights.MIN_ROWS and not grad:
            main, rest = x[..., :n, :].contiguous(), x[..., n:, :].contiguous()
            y = torch.cat([adapter.base(main), adapter.draft(rest.to(torch.float32)).to(main.dtype)], dim=-2)
        else:
            y = adapter.base(x)
        kernel = not grad and rowinv.enabled()
        tiles = cls.adapter_factors(adapter) if kernel else None
        rows = x[..., n:, :]
        delta = None
        if tiles is not None:  # the base on AMX tiles: the delta too, as the kernel's layer steps compute it
            t = rowinv.linear_tiled(rows, tiles[0], None, adapter.lora_A.out_features)
            delta = rowinv.linear_tiled(t, tiles[1], None, adapter.lora_B.out_features).to(y.dtype)
        elif kernel and rows.dtype is torch.float32 and rows.is_cpu and adapter.lora_A.weight.dtype is torch.float32:
            delta = rowinv_steps.lora_rows(rows, *adapter.factors())  # as the kernel's layer steps compute it
        if delta is None:
            delta = cls.adapter_delta(adapter, rows).to(y.dtype)
        y[..., n:, :] += delta  # in place: y is a fresh output the base layer's backward does not need
        return y

    @staticmethod
    def adapter_factors(adapter) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A and B in bf16 as AMX tiles (`amx_tiles.tiled`) where the base Linear runs on tiles (bf16 weights on a CPU
        with AMX) and the rank is a multiple of 32: there the stream rows' delta runs on tiles too (25 rows cost about
        one); else None. Made again whenever A or B changes, or the kernel library does."""
        if not (isinstance(adapter.base, rowinv.RowInvariantLinear) and adapter.base.on_tiles()):
            return None
        lib = rowinv.library()
        key = adapter._weights_key() + (id(lib),)
        if getattr(adapter, "_tiles_key", None) != key:
            made = [amx_tiles.tiled(w.detach().to(torch.bfloat16), lib) for w in (adapter.lora_A.weight, adapter.lora_B.weight)]
            adapter._tiles, adapter._tiles_key = (None if any(m is None for m in made) else tuple(made)), key
        return adapter._tiles

    @staticmethod
    def own_linears(model: nn.Module, modules: list[nn.Module]) -> None:
        """A few stream rows: the kernel's call is far cheaper than MKL's."""
        if rowinv.uses_kernel(model):
            for module in modules:
                rowinv.make_row_invariant(module)

    @staticmethod
    def cut_head(head: nn.Module, source: torch.Tensor, idx: torch.Tensor, cheap: bool) -> nn.Module:
        """cheap (the stream rows on 4-bit copies): an 8-bit copy against 8-bit activations (fp32's exact 8-bit head:
        its own rows); else the head's own rows, on the kernel where the head is."""
        if cheap and getattr(head, "bias", None) is None and not getattr(head, "a8", False):
            return (head.rows(idx, a8=True) if isinstance(head, int8_head.Int8Linear)
                    else draft_weights.head_rows(source.detach()[idx]))
        sub = Backend.cut_head(head, source, idx, cheap)
        if not hasattr(head, "rows") and isinstance(head, rowinv.RowInvariantLinear):
            rowinv.make_row_invariant(sub)
        return sub

    @staticmethod
    def head_input(sub_head: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if isinstance(sub_head, rowinv.RowInvariantLinear) and sub_head.runs_kernel(x):
            return x
        return Backend.head_input(sub_head, x)

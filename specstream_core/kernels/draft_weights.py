"""Stream rows on cheaper weights: a 4-bit copy of each multi-stream layer's Linears for the stream rows alone.

Stream rows only draft: verification reads the main rows, and main rows never attend to stream rows. So what a
stream row is computed with changes which tokens are drafted (τ), never the output. On fp32 or bf16 Linears a γ = 4
pass sends 25 rows through each multi-stream layer, 20 of them stream rows; there a few rows cost little more than one
row's read of the weights, but 25 rows are bound by arithmetic. A 4-bit copy against 8-bit activations
(`kernels/linears/int4_a8.py`, the default model's own precision) computes those 20 rows in a fraction of the time, while the 5
main rows keep the layer's own weights; on the row-invariant kernel a main row's sums are the same whatever other
rows its call has, so the output stays bit for bit that of plain decoding (tests/test_draft_weights.py).

- "int4-a8": each stream-row adapter (`streams.StreamRowLoRA`) gets a 4-bit copy of its base Linear (`draft`), and
  the stream rows' LM head over the draft vocabulary an 8-bit copy (`StreamParams.draft_head`);
- "same": the layers' own weights for every row;
- "auto" (the default): "int4-a8" where it runs and pays: fp32 or bf16 Linears on the row-invariant kernel, a CPU with
  AVX512-VNNI; else "same". bf16 Linears on AMX tiles (`amx_tiles`) keep "same": 25 rows there cost about what
  one does, and the copies only add their own read of the weights (pass-cost, γ = 4 in bf16 on a Xeon with AMX:
  1.29× a plain pass on the layers' own weights, 1.33× with the copies).

The copies are quantized from the weights in memory (asymmetric groups of 32, `int4.quantize_groups`); on a base
converted from a Q4_1 GGUF file, such as the default model, that gives back the file's own groups (they dequantize to
the fp32 weights bit for bit), so a stream row then differs from its fp32 self only by its activations' 8-bit rounding.
Measured on the default model (`pass-cost --stream-weights same,int4-a8`, docs/bench/pass-cost.json): a γ = 4 pass 1.58× → 1.45× a plain
pass in fp32, 1.85× → 1.58× in bf16; the stream set's own draft (one stream) 1.03–1.04× from the 8-bit draft head.
"""

from __future__ import annotations

import torch
from torch import nn

from specstream_core.errors import SpecstreamError
from specstream_core.kernels.linears import int4, int4_a8, rowinv
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.steps import rowinv_steps

KINDS = ("auto", "same", "int4-a8")
# the copies take a step's stream rows where there are at least this many. On the default model the stream set's draft
# runs one stream (4 stream rows beside 4 main rows), which the main rows' read of the weights carries almost free: with
# the copies from 4 rows it ran level with 8 (1.00x per prompt in fp32 and bf16, 40 eval prompts, ad-hoc A/B); 2 rows
# (γ = 1) gained nothing in fp32 (pass-cost, 19.8 -> 20.2 ms); 6 rows (γ = 2) moved within this host's noise
MIN_ROWS = 8


def usable(params, model) -> bool:
    """Whether the stream rows of `params` on `model` can take 4-bit copies: row adapters on fp32 or bf16 Linears
    of the row-invariant kernel, input sizes in groups of 32, and the 8-bit-activation kernel on this CPU."""
    wrappers = list(params.adapters.values())
    return (bool(wrappers) and rowinv.uses_kernel(model) and int4_a8.available()
            and all(isinstance(w.base, rowinv.RowInvariantLinear) and w.base.bias is None
                    and w.base.weight.dtype in (torch.float32, torch.bfloat16) and w.base.in_features % int4.GROUP == 0
                    for w in wrappers))


def resolve(kind: str, params, model) -> str:
    """"auto" made concrete ("int4-a8" where `usable`, else "same"); an unusable "int4-a8" is an error."""
    if kind not in KINDS:
        raise SpecstreamError(f"unknown stream-row weights {kind!r}; choose one of {', '.join(KINDS)}")
    ok = params is not None and usable(params, model)
    if kind == "int4-a8" and not ok:
        raise SpecstreamError("4-bit stream-row weights need a stream set with row adapters, on fp32 or bf16 Linears of the "
                              "row-invariant kernel (--dtype fp32 or bf16, no --quantize) and a CPU with AVX512-VNNI")
    return "int4-a8" if kind == "int4-a8" or (kind == "auto" and ok and not on_tiles(params)) else "same"


def on_tiles(params) -> bool:
    """Whether the stream layers' Linears run on AMX tiles (bf16 where the CPU has them: `amx_tiles`)."""
    wrappers = list(params.adapters.values())
    return bool(wrappers) and all(isinstance(w.base, rowinv.RowInvariantLinear) and w.base.on_tiles() for w in wrappers)


def apply(params, model, kind: str = "auto") -> str:
    """Give the stream rows of `params` (attached to `model`) the weights `kind` names, in place; returns the
    resolved kind. The caller rebinds direct layer steps (`Engine.set_stream_weights` does)."""
    kind = resolve(kind, params, model)
    for wrapper in params.adapters.values():
        wrapper.set_draft(copy_of(wrapper.base) if kind == "int4-a8" else None)
    params.cheap_draft_head = kind == "int4-a8"
    params._draft_head = None
    return kind


def copy_of(linear: nn.Module) -> nn.Module:
    """A 4-bit copy (groups of 32) of a Linear on 8-bit activations, on the kernel."""
    q, scale, low = int4.quantize_groups(linear.weight.detach().float())
    return int4.Int4Linear(q, scale, low, kernel=True, a8=True).requires_grad_(False)


def head_rows(weight: torch.Tensor) -> nn.Module:
    """An 8-bit copy of LM-head rows [K, d] on 8-bit activations (the stream rows' head)."""
    q, scale = int8_head.quantize_groups(weight.detach().float())
    return int8_head.Int8Linear(q, scale, None, kernel=True, a8=True).requires_grad_(False)


def kernel_drafts(front_parts: list | None, down: nn.Module, kernel_part, count: int, fused: bool):
    """A layer's draft Linears as the kernel's whole-layer step takes them (`rowinv_steps.draft_linears`), from the
    direct step's parts of its q, k, v, o, gate and up copies (`front_parts`, None where none has one) and its down
    projection (its `draft`); kernel_part: `direct_layers._kernel_part`; count: the front's calls; fused: q/k/v or
    gate/up one call. None where the layer has no copies; False where the kernel cannot take them (not all there, one
    call each: seven, or Phi-3's four)."""
    down_draft = getattr(down, "draft", None)
    if front_parts is None and down_draft is None:
        return None
    down_part = kernel_part(down_draft) if down_draft is not None else None
    if (front_parts is None or down_part is None or any(p is None for p in front_parts) or fused
            or count != len(front_parts)):
        return False
    return rowinv_steps.draft_linears(front_parts, down_part, MIN_ROWS)

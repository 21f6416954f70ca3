"""RoPE's (cos, sin) tables, made by the model's own rotary module (part of the transformers glue: `compat.rotary`
is the one entry)."""

from __future__ import annotations

import torch
from torch import nn

from specstream_core.model import devices


def rotary(module: nn.Module, h: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None):
    """(cos, sin) of the rotary module (`rotary_emb`) for `position_ids` [B, q] (of `layer_type`'s RoPE, where the
    module keeps one per layer type: Gemma 3). A decoding step (no gradients) of a model whose RoPE is fixed
    ("default" rope_type) reads them from a table the module made once (`_rope_table`: two index ops instead of the
    module's ~12 ops a step)."""
    table = None if torch.is_grad_enabled() else _rope_table(module, h, position_ids, layer_type)
    if table is None:
        return _call(module, h, position_ids, layer_type)
    return table[0][position_ids], table[1][position_ids]


ROPE_TABLE_MIN = 4096  # positions a table holds at first (it doubles as decoding goes further)


def _call(module: nn.Module, h: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None):
    return module(h, position_ids) if layer_type is None else module(h, position_ids, layer_type)


def _rope_table(module: nn.Module, h: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None):
    """(cos [L, D], sin [L, D]) of positions 0..L-1 in h's dtype, made by the module itself, or None where a table
    cannot stand for it: RoPE that depends on the sequence (dynamic, YaRN), or results that differ from the module's
    own for these positions (checked once per table, value for value: each position's values are elementwise
    functions of it alone, so they should not)."""
    rope_type = getattr(module, "rope_type", "default")
    if layer_type is not None:  # one RoPE per layer type: its own rope_type and inverse frequencies
        rope_type = rope_type.get(layer_type) if isinstance(rope_type, dict) else None
    inv_freq = getattr(module, "inv_freq" if layer_type is None else f"{layer_type}_inv_freq", None)
    if rope_type != "default" or inv_freq is None or position_ids.numel() == 0:
        return None
    limit = devices.rope_positions_limit(module, h.device)  # a table for every position: no host sync (CUDA)
    top = int(position_ids.max()) if limit is None else None
    key = (h.dtype, h.device, inv_freq.data_ptr())
    name = "_specstream_rope" if layer_type is None else f"_specstream_rope_{layer_type}"  # (key, table or None)
    memo = module.__dict__.get(name)
    if memo is not None and memo[0] == key and (memo[1] is None or top is None or top < memo[1][0].shape[0]):
        return memo[1]
    size = max(ROPE_TABLE_MIN, 1 << top.bit_length()) if top is not None else max(ROPE_TABLE_MIN, limit)
    cos, sin = _call(module, h[:1, :1], torch.arange(size, device=h.device)[None], layer_type)
    table = (cos[0], sin[0])
    direct = _call(module, h, position_ids, layer_type)
    same = torch.equal(table[0][position_ids], direct[0]) and torch.equal(table[1][position_ids], direct[1])
    module.__dict__[name] = (key, table if same else None)
    return table if same else None

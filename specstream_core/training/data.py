"""Training data shared by every trainer: packed (prompt, answer) examples and shifted targets.

`IGNORE` marks a position without a target (the loss skips it), here and nowhere else.
"""

from __future__ import annotations

import torch

from specstream_core.errors import SpecstreamError

IGNORE = -100


def pack_examples(examples: list[tuple[list[int], list[int]]], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt ids, answer ids) pairs -> packed ids [N, seq_len] and loss mask (answer tokens only)."""
    ids, weight = [], []
    for prompt, answer in examples:
        ids += prompt + answer
        weight += [0] * len(prompt) + [1] * len(answer)
    n = len(ids) // seq_len
    if n == 0:
        raise SpecstreamError(f"not enough training text for one sequence of {seq_len} tokens")
    ids_t = torch.tensor(ids[: n * seq_len]).view(n, seq_len)
    w_t = torch.tensor(weight[: n * seq_len], dtype=torch.bool).view(n, seq_len)
    return ids_t, w_t


def shifted_targets(ids: torch.Tensor, weight: torch.Tensor, shift: int) -> torch.Tensor:
    """Targets `shift` tokens ahead ([B, T]); positions without a (weighted) target are IGNORE."""
    B, T = ids.shape
    out = torch.full_like(ids, IGNORE)
    if shift < T:
        tgt = ids[:, shift:].clone()
        tgt[~weight[:, shift:]] = IGNORE
        out[:, : T - shift] = tgt
    return out

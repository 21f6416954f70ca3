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


def one_per_row(examples: list[tuple[list[int], list[int]]], seq_len: int,
                pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt ids, answer ids) pairs -> ids [N, seq_len], one example a row, and the loss mask.

    Unlike `pack_examples`, every answer token is seen after exactly its own prompt, as in decoding: a packed
    row would show an example after the tail of another one, and streams trained on the base model's
    own answers would learn predictions the base never makes. Longer examples lose their end; padding
    (right) carries no loss, and causal attention keeps it from touching the tokens before it."""
    rows = [(p + a)[:seq_len] for p, a in examples if a and len(p) < seq_len]
    if not rows:
        raise SpecstreamError(f"no example has answer tokens within {seq_len} tokens")
    ids = torch.full((len(rows), seq_len), pad_id, dtype=torch.long)
    weight = torch.zeros((len(rows), seq_len), dtype=torch.bool)
    i = 0
    for p, a in examples:
        if not a or len(p) >= seq_len:
            continue
        row = rows[i]
        ids[i, : len(row)] = torch.tensor(row)
        weight[i, len(p): len(row)] = True
        i += 1
    return ids, weight


def shifted_targets(ids: torch.Tensor, weight: torch.Tensor, shift: int) -> torch.Tensor:
    """Targets `shift` tokens ahead ([B, T]); positions without a (weighted) target are IGNORE."""
    B, T = ids.shape
    out = torch.full_like(ids, IGNORE)
    if shift < T:
        tgt = ids[:, shift:].clone()
        tgt[~weight[:, shift:]] = IGNORE
        out[:, : T - shift] = tgt
    return out

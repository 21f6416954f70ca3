"""Where two greedy outputs of one prompt part, and by how much the plain model preferred its own token there.

At a precision that is not exact (bf16, fp16 or nf4 on CUDA: a pass over many rows may round differently from
a pass over one) speculative and plain decoding can part at a near-tie. This says where, and how near:

    where = first_difference(plain_ids, speculative_ids)         # None when one is a prefix of the other
    info = difference_at(engine, prompt_ids, plain_ids, speculative_ids)
    info["margin"]   # plain pass's logit of its token minus that of the speculative token (≥ 0: a near-tie is ~0)
"""

from __future__ import annotations

import torch


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where a and b hold different tokens; None where they agree on their common length."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


@torch.inference_mode()
def difference_at(engine, prompt_ids: list[int], plain: list[int], speculative: list[int]) -> dict | None:
    """{"position", "plain_token", "speculative_token", "margin", "runner_up_gap"} at the first difference, from
    one plain forward pass of the model over the prompt and the common prefix; None where the outputs agree.
    margin: logit(plain token) - logit(speculative token); runner_up_gap: the top two logits' difference."""
    at = first_difference(plain, speculative)
    if at is None:
        return None
    ids = torch.tensor([list(prompt_ids) + list(plain[:at])], device=engine.device)
    logits = engine.model(ids).logits[0, -1].float()  # [V]
    top = torch.topk(logits, 2).values.tolist()  # one host read, after the pass
    return {"position": at, "plain_token": int(plain[at]), "speculative_token": int(speculative[at]),
            "margin": float(logits[plain[at]] - logits[speculative[at]]), "runner_up_gap": top[0] - top[1]}

"""`AssistantDrafter`: assisted generation's draft through the one tree verifier. A small causal LM sharing the
base's vocabulary (the layer draft of `model/layer_draft.py`: the base's first layers with a trained delta)
proposes a chain greedily, one token per call of its own, from a KV cache it keeps between passes; the verifier
keeps what the base model chooses, so greedy output equals plain decoding on the same engine.

The chain's length follows transformers' "heuristic" schedule for assisted generation: two more tokens after a
pass that accepted every draft token, one fewer (at least one) after a pass that did not.
"""

from __future__ import annotations

import torch

from specstream_core.decoding.drafters.base import Drafter, RowOutput
from specstream_core.decoding.tree import Tree, chain


class AssistantDrafter(Drafter):
    def __init__(self, draft, num_tokens: int = 5, max_tokens: int = 12):
        self.draft = draft
        self.device = next(draft.parameters()).device
        self.num_tokens = max(1, min(num_tokens, max_tokens))
        self.max_tokens = max_tokens
        self.max_nodes = 1 + max_tokens
        self.max_depth = max_tokens
        self.cache = None  # the draft's KV cache (a transformers Cache) of the tokens in `seen`
        self.seen: list[int] = []
        self.proposed = 0  # draft tokens in the last chain

    def propose(self, root: int, history: list[int]) -> Tree:
        seq = history + [root]
        keep = 0
        for a, b in zip(self.seen, seq[:-1]):  # the cached prefix this context still starts with
            if a != b:
                break
            keep += 1
        if self.cache is not None and keep:
            self.cache.crop(keep - len(self.seen))  # drop the rejected drafts' K/V (a negative count removes)
        else:
            self.cache, keep = None, 0
        ids = torch.tensor([seq[keep:]], device=self.device)  # [1, new tokens]
        tokens = []
        with torch.inference_mode():
            for _ in range(self.num_tokens):
                out = self.draft(input_ids=ids, cache=self.cache, use_cache=True)
                self.cache = out.cache
                # one host sync per draft token: the next call's input
                tokens.append(int(out.logits[0, -1].argmax()))
                ids = torch.tensor([[tokens[-1]]], device=self.device)
        self.seen = seq + tokens[:-1]  # the last draft token was never fed
        self.proposed = len(tokens)
        return chain(root, tokens)

    def observe(self, out: RowOutput, node: int) -> None:
        """node: the accepted node of the chain (its depth: 0 = none of the drafts)."""
        if not self.proposed:
            return
        if node >= self.proposed:
            self.num_tokens = min(self.max_tokens, self.num_tokens + 2)
        else:
            self.num_tokens = max(1, self.num_tokens - 1)

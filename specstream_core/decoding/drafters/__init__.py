"""Drafters: what proposes a draft tree for the verifier. One verifier serves them all.

- `StreamDrafter`: Speculative Streaming — the γ streams of the last accepted node, computed in the
  same forward pass that verified it (so drafting costs no extra pass);
- `PromptLookupDrafter`: copies the continuation of the latest earlier occurrence of the current
  n-gram (prompt lookup decoding, no parameters).
Both return a `Tree` rooted at the token the main stream already chose.
"""

from __future__ import annotations

import torch

from specstream_core.decoding.tree import Tree, chain, from_stream_topk


class Drafter:
    uses_streams = False  # True: the verifier must run stream rows and hand back their hidden states
    uses_main_hidden = False  # True: the verifier hands over the accepted node's final main hidden state

    def propose(self, root: int, history: list[int]) -> Tree:
        raise NotImplementedError

    def observe_streams(self, stream_logits: torch.Tensor) -> None:
        """Receive the accepted node's stream logits [γ, V] (stream drafters only)."""

    def observe_main_hidden(self, hidden: torch.Tensor) -> None:
        """Receive the accepted node's final-normed main hidden state [d] (head drafters such as Medusa)."""


class TopkDrafter(Drafter):
    """A tree from per-depth top-k of a [depth, V] logits block (the streams' or Medusa heads')."""

    def __init__(self, topk: tuple[int, ...], budget: int):
        self.topk = topk  # k per depth
        self.budget = budget
        self._top: tuple[list[list[int]], list[list[float]]] = ([], [])

    def _observe_logits(self, logits: torch.Tensor) -> None:
        depth = len(self.topk)
        probs = logits[:depth].float().softmax(dim=-1)  # [depth, V]
        top = torch.topk(probs, max(self.topk), dim=-1)
        # one host sync per step: the tree is built on the host
        values, indices = top.values.tolist(), top.indices.tolist()
        self._top = ([indices[j][:k] for j, k in enumerate(self.topk)],
                     [values[j][:k] for j, k in enumerate(self.topk)])

    def propose(self, root: int, history: list[int]) -> Tree:
        tokens, probs = self._top
        return from_stream_topk(root, tokens, probs, self.budget)


class StreamDrafter(TopkDrafter):
    uses_streams = True  # len(topk) <= γ depths are drafted

    def observe_streams(self, stream_logits: torch.Tensor) -> None:
        self._observe_logits(stream_logits)


class PromptLookupDrafter(Drafter):
    def __init__(self, max_ngram: int = 3, num_tokens: int = 10):
        self.max_ngram = max_ngram
        self.num_tokens = num_tokens

    def propose(self, root: int, history: list[int]) -> Tree:
        seq = history + [root]
        for n in range(min(self.max_ngram, len(seq) - 1), 0, -1):
            tail = seq[-n:]
            for start in range(len(seq) - n - 1, -1, -1):
                if seq[start:start + n] == tail:
                    follow = seq[start + n:start + n + self.num_tokens]
                    if follow:
                        return chain(root, follow)
        return chain(root, [])

"""Prompt lookup decoding: copy the continuation of the latest earlier occurrence of the current
n-gram (no parameters, no extra rows in the pass)."""

from __future__ import annotations

from specstream_core.decoding.drafters.base import Drafter
from specstream_core.decoding.tree import Tree, chain


class PromptLookupDrafter(Drafter):
    def __init__(self, max_ngram: int = 3, num_tokens: int = 10):
        self.max_ngram = max_ngram
        self.num_tokens = num_tokens
        self.max_nodes = 1 + num_tokens
        self.max_depth = num_tokens

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

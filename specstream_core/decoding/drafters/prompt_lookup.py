"""Prompt lookup decoding: copy the continuation of the latest earlier occurrence of the current
n-gram (no parameters, no extra rows in the pass)."""

from __future__ import annotations

from specstream_core.decoding.drafters.base import Drafter, prompt_lookup
from specstream_core.decoding.tree import Tree, chain


class PromptLookupDrafter(Drafter):
    def __init__(self, max_ngram: int = 3, num_tokens: int = 10):
        self.max_ngram = max_ngram
        self.num_tokens = num_tokens
        self.max_nodes = 1 + num_tokens
        self.max_depth = num_tokens

    def propose(self, root: int, history: list[int]) -> Tree:
        return chain(root, prompt_lookup(history + [root], self.max_ngram, self.num_tokens))

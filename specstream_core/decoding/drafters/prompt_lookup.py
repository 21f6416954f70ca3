"""Prompt lookup decoding: copy the continuation of the latest earlier occurrence of the current
n-gram (no parameters) — alone (`PromptLookupDrafter`) or grafted onto the
streams' tree (`StreamLookupDrafter`)."""

from __future__ import annotations

from specstream_core.decoding.drafters.base import Drafter, StreamDrafter
from specstream_core.decoding.tree import Tree, chain, graft_chain


def prompt_lookup(seq: list[int], max_ngram: int, num_tokens: int, min_ngram: int = 1) -> list[int]:
    """The tokens (at most num_tokens) that followed the latest earlier occurrence of seq's longest
    matching tail n-gram (min_ngram <= n <= max_ngram); [] when no such n-gram occurred before."""
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start:start + n] == tail:
                follow = seq[start + n:start + n + num_tokens]
                if follow:
                    return follow
    return []


class PromptLookupDrafter(Drafter):
    def __init__(self, max_ngram: int = 3, num_tokens: int = 10):
        self.max_ngram = max_ngram
        self.num_tokens = num_tokens
        self.max_nodes = 1 + num_tokens
        self.max_depth = num_tokens

    def propose(self, root: int, history: list[int]) -> Tree:
        return chain(root, prompt_lookup(history + [root], self.max_ngram, self.num_tokens))


class StreamLookupDrafter(StreamDrafter):
    """Speculative Streaming's tree with prompt lookup's copy grafted on (FastSeq-style reuse of the
    context): where the text repeats an earlier n-gram, the tokens that followed it extend the tree,
    sharing the stream nodes they agree with. Every node still carries streams, so the next tree comes
    from whichever node is accepted. `lookup` caps the copied tokens; the tree keeps within `budget`."""

    def __init__(self, topk: tuple[int, ...], budget: int, lookup: int, max_ngram: int = 3, min_ngram: int = 1):
        super().__init__(topk, budget)
        self.lookup = lookup
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.max_depth = max(self.max_depth, lookup)
        self.max_nodes = min(budget, self.max_nodes + lookup)

    def propose(self, root: int, history: list[int]) -> Tree:
        tree = super().propose(root, history)
        copied = prompt_lookup(history + [root], self.max_ngram, self.lookup, self.min_ngram)
        return graft_chain(tree, copied, self.max_nodes) if copied else tree

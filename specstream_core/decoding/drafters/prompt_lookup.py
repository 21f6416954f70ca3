"""Prompt lookup decoding: copy the continuation of the latest earlier occurrence of the current
n-gram (no parameters) — alone (`PromptLookupDrafter`) or grafted onto the
streams' tree (`StreamLookupDrafter`), which copies from the stream set's n-gram store where the
context has no longer match (`ngram_store.py`)."""

from __future__ import annotations

from specstream_core.decoding.drafters.base import Drafter, StreamDrafter
from specstream_core.decoding.drafters.ngram_store import NgramStore
from specstream_core.decoding.tree import Tree, cartesian_size, chain, graft_chain


def prompt_lookup(seq: list[int], max_ngram: int, num_tokens: int, min_ngram: int = 1) -> list[int]:
    """The tokens (at most num_tokens) that followed the latest earlier occurrence of seq's longest
    matching tail n-gram (min_ngram <= n <= max_ngram); [] when no such n-gram occurred before."""
    return lookup_match(seq, max_ngram, num_tokens, min_ngram)[0]


def lookup_match(seq: list[int], max_ngram: int, num_tokens: int, min_ngram: int = 1) -> tuple[list[int], int]:
    """prompt_lookup's tokens and the length n of the tail n-gram they follow (0: none)."""
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start:start + n] == tail:
                follow = seq[start + n:start + n + num_tokens]
                if follow:
                    return follow, n
    return [], 0


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
    from whichever node is accepted. `lookup` caps the copied tokens; the tree keeps within `budget`.

    With a `store`, where the context's match is shorter than STORE_BELOW tokens the copy comes from
    the store instead, when the store matches a longer tail (measured: a 1-token match in the context
    is followed correctly 19 % of the time, a 4-token match in the store 57 %)."""
    STORE_BELOW = 2

    def __init__(self, topk: tuple[int, ...], budget: int, lookup: int, max_ngram: int = 3, min_ngram: int = 1,
                 store: NgramStore | None = None):
        super().__init__(topk, budget)
        self.lookup = lookup
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.store = store
        self.max_depth = max(self.max_depth, lookup)
        self.max_nodes = min(budget, self.max_nodes + lookup)
        # a streams' tree larger than the budget would fill it and leave a copy no node: it keeps room for the copy
        self.reserve_copy = cartesian_size(topk) > budget

    def propose(self, root: int, history: list[int]) -> Tree:
        seq = history + [root]
        copied, n = lookup_match(seq, self.max_ngram, self.lookup, self.min_ngram)
        if self.store is not None and n < self.STORE_BELOW:
            stored, m = self.store.continuation(seq, self.lookup)
            if m > n:
                copied = stored
        if not copied:
            return self.tree(root, self.budget)
        tree = self.tree(root, max(1, self.budget - len(copied)) if self.reserve_copy else self.budget)
        return graft_chain(tree, copied, self.max_nodes)

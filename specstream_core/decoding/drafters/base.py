"""The drafter interface: what proposes a draft tree for the one verifier, and what it learns from
each verified pass.

    tree = drafter.propose(root, history)   # before the pass: a Tree rooted at the pending token
    drafter.observe(out, node)              # after it: the row's pass output and its accepted node

`observe` gets every drafter the same thing (a `RowOutput`); a stream drafter reads the accepted
node's stream rows, a head drafter (Medusa) its final main hidden state, prompt lookup nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specstream_core.decoding.tree import Tree, cartesian_size, chain, from_stream_topk


@dataclass
class RowOutput:
    """One row's share of a forward pass, in the row's own (survivor) node order."""
    main: torch.Tensor  # [m, d] final-normed main rows
    streams: torch.Tensor | None  # [s, γ, d] final-normed stream rows of each carrier (None: no streams ran)
    carriers: list[int] | None  # main row of each carrier (None: every main row carries, in order)
    # normed stream rows -> (logits over the draft vocabulary, its token ids or None for the whole vocabulary)
    draft_scores: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]
    # what draft_scores gives for every carrier's stream rows ([s, γ, K], its token ids), where the pass scored them
    # with its main rows (`Engine.head_scores`), else None
    scored: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def stream_rows(self, node: int) -> torch.Tensor:
        """[γ, d] stream rows of `node`."""
        return self.streams[self._carrier(node)]

    def node_scores(self, node: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`draft_scores` of `node`'s stream rows: taken from the pass where it scored them, else computed now."""
        if self.scored is not None:
            return self.scored[0][self._carrier(node)], self.scored[1]
        return self.draft_scores(self.stream_rows(node))

    def _carrier(self, node: int) -> int:
        return node if self.carriers is None else self.carriers.index(node)


class Drafter:
    uses_streams = False  # True: the pass must run stream rows (the verifier then hands them to `observe`)
    max_nodes: int | None = None  # most nodes a proposed tree has (None: the decode config's node budget)
    max_depth = 0  # deepest draft token (sizes the per-depth acceptance statistics)

    def propose(self, root: int, history: list[int]) -> Tree:
        raise NotImplementedError

    def observe(self, out: RowOutput, node: int) -> None:
        """What the pass computed for this row, and the node it accepted last (its next root's parent)."""


class RootOnly(Drafter):
    """No draft: plain decoding is the same loop with a one-node tree (the pending token)."""
    max_nodes = 1

    def propose(self, root: int, history: list[int]) -> Tree:
        return chain(root, [])


class TopkDrafter(Drafter):
    """A tree from per-depth top-k of a [depth, V] logits block (the streams' or Medusa heads')."""

    def __init__(self, topk: tuple[int, ...], budget: int):
        self.topk = topk  # k per depth
        self.budget = budget
        self.max_depth = len(topk)
        self.max_nodes = min(budget, cartesian_size(topk))
        self._top: tuple[list[list[int]], list[list[float]]] = ([], [])

    def _observe_logits(self, logits: torch.Tensor, ids: torch.Tensor | None = None) -> None:
        """logits [depth, V'] over the token ids `ids` [V'] (None: the whole vocabulary, V' = V, in order)."""
        depth = len(self.topk)
        probs = logits[:depth].float().softmax(dim=-1)  # [depth, V']
        top = torch.topk(probs, max(self.topk), dim=-1)
        tokens = top.indices if ids is None else ids.to(top.indices.device)[top.indices]
        # one host sync per step: the tree is built on the host
        values, indices = top.values.tolist(), tokens.tolist()
        self._top = ([indices[j][:k] for j, k in enumerate(self.topk)],
                     [values[j][:k] for j, k in enumerate(self.topk)])

    def propose(self, root: int, history: list[int]) -> Tree:
        return self.tree(root, self.budget)

    def tree(self, root: int, budget: int) -> Tree:
        """The Cartesian tree of the last observed top-k, its best `budget` nodes."""
        tokens, probs = self._top
        return from_stream_topk(root, tokens, probs, budget)


class StreamDrafter(TopkDrafter):
    """Speculative Streaming: the γ streams of the last accepted node, computed in the same forward
    pass that verified it (so drafting costs no extra pass); len(topk) <= γ depths are drafted."""
    uses_streams = True

    def observe(self, out: RowOutput, node: int) -> None:
        if out.streams is None:  # an engine without stream parameters: nothing to draft from (root-only trees)
            return
        self._observe_logits(*out.node_scores(node))

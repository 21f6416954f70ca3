"""Draft trees: built from per-stream top-k, limited by a node budget, pruned by transition scores.

Nodes are kept in topological (breadth-first) order: node 0 is the root (the token the main stream
already chose, always correct), a parent always comes before its children. Tree shapes are data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Tree:
    tokens: list[int]  # token of each node
    parents: list[int]  # parent index (-1 for the root)
    depths: list[int]  # 0 for the root, j for stream j's tokens
    probs: list[float]  # drafter's probability of the node's token (1.0 at the root)
    copied: set[int] = field(default_factory=set)  # nodes copied from the context (prompt lookup), not drafted

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.tokens]
        for i, p in enumerate(self.parents):
            if p >= 0:
                out[p].append(i)
        return out

    def visibility(self, device=None) -> torch.Tensor:
        """[n, n] bool: node i may attend node k iff k is i or an ancestor of i."""
        n = len(self.tokens)
        rows: list[list[bool]] = []  # built in Python: a torch op per node cost more than the step's attention
        for i, p in enumerate(self.parents):
            row = list(rows[p]) if p >= 0 else [False] * n  # parents come before their children
            row[i] = True
            rows.append(row)
        return torch.tensor(rows, dtype=torch.bool).reshape(n, n).to(device)

    def subset(self, keep: list[int]) -> "Tree":
        """The tree restricted to `keep` (ascending, closed under parents), parents re-indexed."""
        new_index = {old: new for new, old in enumerate(keep)}
        return Tree(
            tokens=[self.tokens[i] for i in keep],
            parents=[new_index[self.parents[i]] if self.parents[i] >= 0 else -1 for i in keep],
            depths=[self.depths[i] for i in keep],
            probs=[self.probs[i] for i in keep],
            copied={new_index[i] for i in self.copied if i in new_index},
        )

    def path_to(self, node: int) -> list[int]:
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def chain(root: int, tokens: list[int], probs: list[float] | None = None) -> Tree:
    """A linear draft: root followed by tokens (prompt lookup, draft models, one-stream trees)."""
    n = len(tokens)
    return Tree([root, *tokens], list(range(-1, n)), list(range(n + 1)), [1.0, *(probs or [1.0] * n)])


def cartesian_size(topk: tuple[int, ...]) -> int:
    """Nodes of the full Cartesian-product tree of per-depth top-k (`from_stream_topk` before its budget), root included."""
    size = width = 1
    for k in topk:
        width *= k
        size += width
    return size


def from_stream_topk(root: int, top_tokens: list[list[int]], top_probs: list[list[float]], budget: int) -> Tree:
    """Cartesian-product tree: stream j's top-k tokens are the children of every depth-(j-1) node.

    top_tokens[j-1]: the k_j candidate tokens of stream j (best first). With more nodes than `budget`,
    the nodes with the highest product of stream probabilities along their path are kept (a child's
    product never exceeds its parent's, so the kept set is always a tree).
    """
    tokens, parents, depths, probs, scores = [root], [-1], [0], [1.0], [1.0]
    frontier = [0]
    for depth, (cands, cand_probs) in enumerate(zip(top_tokens, top_probs), start=1):
        next_frontier = []
        for parent in frontier:
            for tok, p in zip(cands, cand_probs):
                tokens.append(tok)
                parents.append(parent)
                depths.append(depth)
                probs.append(p)
                scores.append(scores[parent] * p)
                next_frontier.append(len(tokens) - 1)
        frontier = next_frontier
    tree = Tree(tokens, parents, depths, probs)
    if len(tree) <= budget:
        return tree
    order = sorted(range(len(tree)), key=lambda i: (-scores[i], i))[:budget]
    return tree.subset(sorted(order))


def graft_chain(tree: Tree, tokens: list[int], budget: int, prob: float = 1.0) -> Tree:
    """`tree` with a linear draft grafted on at the root: the draft follows the tree's nodes while they
    agree with it (a trie) and continues as new nodes, appended in order, until the tree has `budget`
    nodes, marked as copied, with probability `prob` (the drafter's confidence in a copied token)."""
    out = Tree(list(tree.tokens), list(tree.parents), list(tree.depths), list(tree.probs), set(tree.copied))
    children = tree.children()
    node = 0
    for token in tokens:
        match = next((c for c in children[node] if out.tokens[c] == token), None) if node < len(children) else None
        if match is None:
            if len(out) >= budget:
                break
            out.tokens.append(token)
            out.parents.append(node)
            out.depths.append(out.depths[node] + 1)
            out.probs.append(prob)
            match = len(out) - 1
            out.copied.add(match)
        node = match
    return out


def prune_by_threshold(tree: Tree, transition: list[float], threshold: float) -> list[int]:
    """Nodes kept when every edge on their path has transition probability >= threshold."""
    alive = [True] * len(tree)
    for i, p in enumerate(tree.parents):
        if p >= 0:
            alive[i] = alive[p] and transition[i] >= threshold
    return [i for i, a in enumerate(alive) if a]

"""Verification: which draft-tree path the base model accepts, plus one bonus token.

Greedy: follow the child whose token equals the argmax of its parent's logits, as far as possible.
Sampling: multi-candidate rejection sampling with deterministic (top-k) drafts. At node u with target
distribution p (after temperature / top-k / top-p), try its children c in order: accept c with
probability p(c); on rejection set p(c) = 0 and renormalise. If no child is accepted, draw the bonus
token from what is left of p. Every emitted token is therefore distributed exactly as the base model's
(the draft is a point mass on c, so min(1, p/q) = p(c) and the residual is p without c).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specstream_core.decoding.config import SamplingConfig  # noqa: F401 - re-exported

from specstream_core.decoding.tree import Tree
from specstream_core.backends import argmax


def target_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """[..., V] logits -> probabilities after temperature, top-k and top-p (transformers' order)."""
    scores = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < scores.shape[-1]:
        kth = torch.topk(scores, cfg.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - cfg.top_p)
        remove_sorted[..., -1:] = False  # keep at least one token
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        scores = scores.masked_fill(remove, float("-inf"))
    return scores.softmax(dim=-1)


@dataclass
class Verdict:
    path: list[int]  # accepted node indices, root first
    bonus: int  # token chosen after the last accepted node


def verify_greedy(tree: Tree, logits: torch.Tensor) -> Verdict:
    """logits: [n, V] main-stream logits of the tree's nodes."""
    # one host sync per step: the walk needs the argmaxes on the host
    return walk_greedy(tree, argmax(logits).tolist())


def walk_greedy(tree: Tree, choice: list[int]) -> Verdict:
    """The longest path of the tree that follows each node's greedy choice (choice[i]: node i's argmax token)."""
    children = tree.children()
    path = [0]
    while True:
        node = path[-1]
        nxt = next((c for c in children[node] if tree.tokens[c] == choice[node]), None)
        if nxt is None:
            return Verdict(path, choice[node])
        path.append(nxt)


def verify_sampling(tree: Tree, logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> Verdict:
    # one host transfer per step: the walk draws uniform numbers on the host generator
    probs = target_probs(logits, cfg).cpu().double()
    children = tree.children()
    path = [0]
    while True:
        node = path[-1]
        p = probs[node].clone()
        accepted = None
        for c in children[node]:
            tok = tree.tokens[c]
            total = p.sum()
            if total <= 0:
                break
            if torch.rand((), generator=generator, dtype=torch.float64) < p[tok] / total:
                accepted = c
                break
            p[tok] = 0.0
        if accepted is None:
            bonus = int(torch.multinomial(p / p.sum(), 1, generator=generator))
            return Verdict(path, bonus)
        path.append(accepted)


def sample_token(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> int:
    """One token from [V] logits (plain decoding and the first token after the prompt)."""
    if cfg.greedy:
        return int(argmax(logits.reshape(-1)))
    probs = target_probs(logits, cfg).cpu().double()
    return int(torch.multinomial(probs, 1, generator=generator))

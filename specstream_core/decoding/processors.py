"""Logits processors on the device, per draft-tree node: no-repeat-n-gram blocking and repetition penalty.

    logits = processors.apply(cfg, logits, context_ids, tree)   # [m, V] -> [m, V] (float32)

`cfg` is anything with `no_repeat_ngram_size` and `repetition_penalty` (a `DecodeConfig`). Row i of
`logits` predicts the token after tree node i, so it is processed against node i's own context:

    context_ids  +  the tokens on the tree path root → i   (root and node i included)

`context_ids` are the tokens *before* the root (prompt + output so far, without the root). With
`tree=None`, `logits` is one row ([V] or [1, V]) predicting the token after the whole `context_ids`
(plain decoding, the prompt pass). The batched decoder calls this once per sequence with that
sequence's rows, context and tree. Nothing happens (the input is returned as is) when both settings
are off.

Semantics are transformers' exactly (`RepetitionPenaltyLogitsProcessor` then
`NoRepeatNGramLogitsProcessor`, in `generate`'s order, on float32 scores), so greedy speculative output
equals `generate(no_repeat_ngram_size=n, repetition_penalty=p)` token for token:
- repetition penalty: every token that occurs in the context has its logit divided by p (positive
  logits) or multiplied by p (negative ones), once however often it occurs;
- n-gram blocking: every n-gram window of the context whose first n−1 tokens equal the context's last
  n−1 tokens bans its last token (logit −inf); contexts shorter than n ban nothing.

All of it is tensor work, no Python loop over the vocabulary, the history or the nodes: the windows of
the shared context come from one `unfold`; the windows that end inside the tree are the last n tokens
of each node's context (one per node, gathered from the ancestor-token matrix) and count for node i
when they belong to one of i's ancestors (the tree's visibility matrix).
"""

from __future__ import annotations

import torch

from specstream_core.decoding.tree import Tree

_PAD = -1  # stands for "no token" left of a short context; never equals a real token id


def active(cfg) -> bool:
    return getattr(cfg, "no_repeat_ngram_size", 0) > 0 or getattr(cfg, "repetition_penalty", 1.0) != 1.0


def apply(cfg, logits: torch.Tensor, context_ids, tree: Tree | None = None) -> torch.Tensor:
    """Processed logits, same shape as `logits`; see the module docstring for what each row sees."""
    if not active(cfg):
        return logits
    device = logits.device
    single = tree is None
    ctx = torch.as_tensor(context_ids, dtype=torch.long, device=device).reshape(-1)
    if single:  # one row after the whole context: a one-node tree whose root is the last context token
        if ctx.numel() == 0:
            return logits
        ctx, tokens, parents, max_depth = ctx[:-1], ctx[-1:], [-1], 0
    else:
        tokens = torch.tensor(tree.tokens, dtype=torch.long, device=device)
        parents, max_depth = tree.parents, max(tree.depths)
    scores = logits.reshape(-1, logits.shape[-1]).float()  # [m, V], transformers processes float32
    if scores.shape[0] != tokens.numel():
        raise ValueError(f"{scores.shape[0]} logit rows for a tree of {tokens.numel()} nodes")
    seen = _ancestry(parents, max_depth, device)  # [m, m] node i sees node k (k is i or one of its ancestors)
    if cfg.repetition_penalty != 1.0:
        scores = _repetition_penalty(scores, ctx, tokens, seen, cfg.repetition_penalty)
    if cfg.no_repeat_ngram_size > 0:
        scores = _no_repeat_ngram(scores, ctx, tokens, seen, cfg.no_repeat_ngram_size)
    return scores.reshape(logits.shape)


def _ancestry(parents: list[int], max_depth: int, device) -> torch.Tensor:
    """[m, m] bool: k is i or an ancestor of i: the self-or-parent relation squared log2(depth) times."""
    m = len(parents)
    par = torch.tensor(parents, dtype=torch.long, device=device)
    seen = torch.eye(m, dtype=torch.bool, device=device)
    has_parent = par >= 0
    seen[torch.arange(m, device=device)[has_parent], par[has_parent]] = True  # self + parent
    reach = 1
    while reach < max_depth:  # paths of length <= 2·reach: (seen @ seen) in boolean algebra
        seen = (seen.float() @ seen.float()) > 0
        reach *= 2
    return seen


def _repetition_penalty(scores, ctx, tokens, seen, penalty: float) -> torch.Tensor:
    m, vocab = scores.shape
    # tokens each node's context holds: the shared context (one row) or its own path ([m, m] ids)
    mask = torch.zeros(m, vocab + 1, dtype=torch.bool, device=scores.device)  # column V: ids past the head
    mask[:, ctx.clamp(max=vocab)] = True
    path_ids = torch.where(seen, tokens.clamp(max=vocab)[None, :], vocab)  # [m, m], unseen nodes -> spare column
    mask.scatter_(1, path_ids, True)
    mask = mask[:, :vocab]
    penalized = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(mask, penalized, scores)


def _no_repeat_ngram(scores, ctx, tokens, seen, n: int) -> torch.Tensor:
    m, vocab = scores.shape
    device = scores.device
    depth = seen.sum(dim=1) - 1  # [m] node depth = number of strict ancestors
    max_depth = int(depth.max())  # host sync: sizes the ancestor-token matrix (tree is on the host anyway)
    # ancestor-token matrix: anc[i, d] = token of i's ancestor at depth d (d <= depth[i]; else 0)
    at_depth = depth[None, :] == torch.arange(max_depth + 1, device=device)[:, None]  # [D+1, m]
    anc = (seen.long() * tokens[None, :]) @ at_depth.long().T  # [m, D+1]
    # each node's context, right-aligned: the shared context's last n tokens, then its path
    tail = ctx[-n:]
    tail = torch.cat([torch.full((n - tail.numel(),), _PAD, dtype=torch.long, device=device), tail])
    full = torch.cat([tail[None, :].expand(m, n), anc], dim=1)  # [m, n + D + 1]
    cols = depth[:, None] + 1 + torch.arange(n, device=device)[None, :]  # last n columns of node i's context
    last_n = full.gather(1, cols)  # [m, n]: node i's context's last n tokens (its newest window)
    prefix = last_n[:, 1:]  # [m, n-1]: what an n-gram must start with to be completed next
    ctx_len = ctx.numel() + depth + 1  # [m]

    banned = torch.zeros(m, vocab + 1, dtype=torch.bool, device=device)  # column V: nothing banned
    # 1. windows inside the shared context
    if ctx.numel() >= n:
        windows = ctx.unfold(0, n, 1)  # [W, n]
        match = (windows[None, :, :-1] == prefix[:, None, :]).all(dim=-1)  # [m, W]
        banned.scatter_(1, torch.where(match, windows[None, :, -1].clamp(max=vocab), vocab), True)
    # 2. windows ending at a tree node k: k's newest window, for every node k on i's path
    valid = ctx_len >= n  # k's newest window lies inside its context
    match = (last_n[None, :, :-1] == prefix[:, None, :]).all(dim=-1) & seen & valid[None, :]  # [m, m]
    banned.scatter_(1, torch.where(match, last_n[None, :, -1].clamp(max=vocab), vocab), True)
    banned[ctx_len < n] = False  # transformers bans nothing before the context holds n tokens
    return scores.masked_fill(banned[:, :vocab], float("-inf"))

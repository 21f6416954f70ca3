"""A draft's τ without decoding: replay it over answers already decoded.

Lossless decoding emits the same tokens whatever the draft, and a node's stream rows see only its own
context. So once an answer is known, one teacher-forced pass in which every position carries its streams
(`stream_rows`) holds every stream row any decoding of that answer would compute. `replay` then steps a
drafter over the answer, exactly as the loop does (`propose` before a pass, `observe` of the accepted
node after it, greedy acceptance of the longest matching path plus the bonus token), and counts passes:
a draft's τ on many prompts in seconds, where timing it (`bench`, `scripts/draft_ab.py`) takes minutes.
It says nothing of what a pass costs. `scripts/draft_sim.py` runs it on the eval prompts;
tests/test_draft_replay.py checks it against decoding.
"""

from __future__ import annotations

import torch

from specstream_core.decoding.drafters import Drafter, RowOutput
from specstream_core.decoding.tree import Tree
from specstream_core.model import masks, msa


@torch.inference_mode()
def stream_rows(engine, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """[len(answer) + 1, γ, d]: the final-normed stream rows of the prompt's last position and of every answer
    position, in one causal pass over prompt + answer."""
    ids = torch.tensor([prompt + answer], device=engine.device)
    T = ids.shape[1]
    pos = torch.arange(T, device=ids.device)[None]
    out = msa.forward(engine.model, ids, pos, masks.causal_visibility(T, 1, ids.device), streams=engine.streams,
                      carriers=pos)
    return out.streams[0, len(prompt) - 1:]


def accepted(tree: Tree, truth: list[int]) -> int:
    """How many draft tokens greedy verification accepts: the tree's longest path from the root whose tokens are
    `truth` (the tokens after the root), in order."""
    children, node, n = tree.children(), 0, 0
    while n < len(truth):
        node = next((c for c in children[node] if tree.tokens[c] == truth[n]), None)
        if node is None:
            break
        n += 1
    return n


@torch.inference_mode()
def replay(engine, drafter: Drafter, prompt: list[int], answer: list[int], rows: torch.Tensor) -> tuple[int, int]:
    """(passes, draft nodes) of decoding `answer` after `prompt` with `drafter`, rows = `stream_rows(...)`.
    Passes count the prefill, which emits answer[0] (the first root), as `Result.stats` counts them."""
    def observe(i: int) -> None:  # the accepted node: the token before answer[i] (for i = 0, the prompt's last)
        drafter.observe(RowOutput(None, rows[i:i + 1], None, engine.draft_scores), 0)

    observe(0)
    i, passes, nodes = 0, 1, 0
    while i < len(answer) - 1:  # answer[i], the root, is emitted already
        tree = drafter.propose(answer[i], prompt + answer[:i])
        passes, nodes, i = passes + 1, nodes + len(tree), i + accepted(tree, answer[i + 1:]) + 1
        if i < len(answer) - 1:
            observe(i)
    return passes, nodes

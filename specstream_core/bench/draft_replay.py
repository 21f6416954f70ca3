"""A draft's τ without decoding: replay it over answers already decoded.

Lossless decoding emits the same tokens whatever the draft, and a node's stream rows see only its own
context. So once an answer is known, one teacher-forced pass in which every position carries its streams
(`stream_rows`) holds every stream row any decoding of that answer would compute. `replay` then steps a
drafter over the answer, exactly as the loop does (`propose` before a pass, `observe` of the accepted
node after it, greedy acceptance of the longest matching path plus the bonus token), and counts passes:
a draft's τ on many prompts in seconds, where timing it (`bench`, `bench ab`) takes minutes.
It says nothing of what a pass costs. `python -m specstream_core draft-tau` runs it on the chat corpus's
eval prompts (`run`, drafts by name: `draft_config`); tests/test_draft_replay.py checks it against decoding.
"""

from __future__ import annotations

import collections
from dataclasses import replace

import torch

from specstream_core.bench.results import read_json
from specstream_core.decoding.config import DecodeConfig
from specstream_core.decoding.drafters import Drafter, RowOutput
from specstream_core.decoding.loop import default_drafter
from specstream_core.decoding.tree import Tree, cartesian_size
from specstream_core.errors import SpecstreamError
from specstream_core.model import masks, msa
from specstream_core.bench.draft_names import DRAFT, DRAFT_HELP, parse_draft  # noqa: F401 - re-exported


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


# ---- drafts by name, and a run over prompts ------------------------------------------------------------


def draft_config(engine, name: str, max_new_tokens: int) -> DecodeConfig:
    """The decode config of a named draft (`DRAFT_HELP`); its drafter is `loop.default_drafter`'s."""
    m = parse_draft(name)
    cfg = engine.decode_config(mode="ss", max_new_tokens=max_new_tokens)
    topk = tuple(int(c) for c in m[4]) if m[4] else cfg.tree_topk
    if name.startswith("default"):
        return replace(cfg, tree_topk=topk)
    if name.startswith("streams"):
        return replace(cfg, tree_topk=topk, node_budget=cartesian_size(topk), lookup=0, ngrams=False)
    return replace(cfg, node_budget=int(m[1]), lookup=int(m[2]), ngrams=bool(m[3]), tree_topk=topk)


class Tally:
    """Tokens, passes and draft nodes per (draft, category), the streams' top-1 hits per depth, and checks."""

    def __init__(self, prompts: int):
        self.prompts = prompts
        self.counts = collections.defaultdict(lambda: [0, 0, 0])
        self.hits = collections.Counter()  # depth j: hits; -j: chances
        self.checked, self.agreed = collections.Counter(), collections.Counter()

    def stream_hits(self, engine, rows: torch.Tensor, answer: list[int]) -> None:
        """Row i's stream j guesses answer[i + j] (its main row guessed answer[i])."""
        with torch.inference_mode():
            scores, ids = engine.draft_scores(rows)
            top1 = scores.argmax(-1) if ids is None else ids[scores.argmax(-1)]  # [len + 1, γ]
        truth = torch.tensor(answer, device=top1.device)
        for j in range(1, top1.shape[1] + 1):
            self.hits[j] += int((top1[:max(0, len(answer) - j), j - 1] == truth[j:]).sum())
            self.hits[-j] += max(0, len(answer) - j)

    def summary(self, drafts: list[str], categories: list[str], gamma: int) -> dict:
        tau = {d: {c: self.counts[(d, c)][0] / max(1, self.counts[(d, c)][1]) for c in categories} for d in drafts}
        # decoding steps: passes less the prefills (one a prompt), which draft nothing
        steps = {d: sum(self.counts[(d, c)][1] for c in categories) - self.prompts for d in drafts}
        return {"prompts": self.prompts, "tau": tau,
                "mean_tau": {d: sum(tau[d].values()) / len(categories) for d in drafts},
                "nodes_per_step": {d: sum(self.counts[(d, c)][2] for c in categories) / max(1, steps[d]) for d in drafts},
                "stream_top1": {j: self.hits[j] / max(1, self.hits[-j]) for j in range(1, gamma + 1)},
                "checked": {d: [self.agreed[d], self.checked[d]] for d in drafts if self.checked[d]}}


def run(engine, prompts: list[tuple[str, str | list[int]]], drafts: list[str], max_new_tokens: int, check: int = 0,
        progress=None) -> dict:
    """Decode each (category, prompt)'s greedy answer once, replay every named draft over it; `check` prompts are
    also decoded with every draft, to count those whose passes differ from the replay's."""
    cfgs = {d: draft_config(engine, d, max_new_tokens) for d in drafts}
    plain = engine.decode_config(mode="ar", max_new_tokens=max_new_tokens)
    tally = Tally(len(prompts))
    for k, (category, text) in enumerate(prompts):
        prompt = engine.encode(text, max_new_tokens) if isinstance(text, str) else list(text)
        answer = engine.generate(prompt, plain).token_ids
        rows = stream_rows(engine, prompt, answer)
        tally.stream_hits(engine, rows, answer)
        for d, cfg in cfgs.items():
            passes, nodes = replay(engine, default_drafter(engine, cfg), prompt, answer, rows)
            c = tally.counts[(d, category)]
            c[0], c[1], c[2] = c[0] + len(answer), c[1] + passes, c[2] + nodes
            if k < check:
                real = engine.generate(prompt, cfg)
                tally.checked[d] += 1
                tally.agreed[d] += real.token_ids == answer and real.stats["forward_passes"] == passes
        if progress:
            progress(k + 1, len(prompts))
    categories = list(dict.fromkeys(c for c, _ in prompts))
    return tally.summary(drafts, categories, engine.streams.cfg.gamma)


def load_results(path: str) -> dict | None:
    """A `draft-tau --json` file; None when it does not exist; one clear error when it is not one."""
    data = read_json(path, "draft τ results")
    if data is None:
        return None
    drafts = data.get("drafts") if isinstance(data, dict) else None
    number = (int, float)
    ok = (isinstance(drafts, list) and drafts and all(isinstance(d, str) for d in drafts)
          and all(isinstance(data.get(k), dict) for k in ("tau", "mean_tau", "nodes_per_step"))
          and all(isinstance(data["mean_tau"].get(d), number) and isinstance(data["nodes_per_step"].get(d), number)
                  and isinstance(data["tau"].get(d), dict)
                  and all(isinstance(v, number) for v in data["tau"][d].values()) for d in drafts))
    if not ok:
        raise SpecstreamError(f"{path} is not a draft-tau result (expected drafts, tau, mean_tau, nodes_per_step)")
    return data

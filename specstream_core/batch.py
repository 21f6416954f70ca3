"""Batched decoding: B sequences in one forward pass per step, each with its own tree, acceptance and stop.

Plain:        prefill every prompt (one pass) → repeat: feed every live row's last token, choose the next
Speculative:  prefill (each row's prompt as a chain; its last position carries the streams)
              → repeat: 1. each row drafts a tree from its own streams   2. one forward: all trees
                           (padded to one width) verified + every node's streams   3. each row accepts
                           its longest matching path + a bonus token   4. each row's path K/V moves into
                           place   5. each row keeps its accepted node's streams as its next draft.

Ragged lengths live in the cache's per-row lengths: row b writes after its own prefix, no padding is
ever stored. Padding exists only inside one step: a dummy node sees only itself and its row's prefix,
nothing real sees it, and its K/V is never committed. A finished row (EOS, max_new_tokens, stop
string) leaves the batch: the cache moves the live rows to the front once (`KVCache.retain`).

n samples of one prompt (`share_prefix=True`): the prompt is prefilled once at batch 1, its K/V kept
once (`SharedPrefixCache`), and every row attends over [shared prompt | own suffix] through the
shared-prefix attention registered with transformers (`compat.shared_prefix_attention`).

Sampling: row i draws from its own generator seeded with (cfg.seed or 0) + i, so row i of a batch
equals `engine.generate(prompt_i, replace(cfg, seed=(cfg.seed or 0) + i))` and n samples of one
prompt differ. Greedy rows equal `engine.generate(prompt_i, cfg)` token for token.

Not batched: pruning (`prune_threshold` is ignored here — output is identical without it, pruning only
saves rows), traces and attention capture. Other drafters (`drafter_factory`, one per row) work;
with drafters that use no streams, no stream rows run.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import compat, msa, processors
from .cache import KVCache, SharedPrefixCache
from .decode import DecodeConfig, Result, decode_stats
from .drafters import Drafter, StreamDrafter
from .errors import SpecstreamError
from .tree import Tree
from .verify import sample_token, verify_greedy, verify_sampling

MAX_BATCH = 256


@dataclass
class Sequence:
    """One row of the batch: its prompt, output, sampler, drafter and counters."""
    index: int  # position in the caller's list
    prompt_ids: list[int]
    generator: torch.Generator
    drafter: Drafter | None = None
    output: list[int] = field(default_factory=list)
    pending: int | None = None  # emitted, not yet in the cache
    done: bool = False
    forward_passes: int = 0
    rows_total: int = 0
    depth_hits: list[int] = field(default_factory=list)
    wall_s: float = 0.0  # from the batch's start until this row finished

    @property
    def context(self) -> list[int]:
        """Tokens before the current root (the pending token): prompt + output without its last token."""
        return self.prompt_ids + self.output[:-1]


def prepare_prompts(engine, prompts, cfg: DecodeConfig) -> list[list[int]]:
    """Token ids of every prompt, with one clear error for a bad batch or a bad prompt."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise SpecstreamError("generate_batch needs a non-empty list of prompts")
    if len(prompts) > MAX_BATCH:
        raise SpecstreamError(f"at most {MAX_BATCH} prompts per batch, got {len(prompts)}; split the input")
    out = []
    for i, prompt in enumerate(prompts):
        try:
            if isinstance(prompt, str):
                ids = engine.encode(prompt, cfg.max_new_tokens)
            elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
                ids = list(prompt)
                engine.check_length(len(ids), cfg.max_new_tokens)
            else:
                raise SpecstreamError(f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        except SpecstreamError as exc:
            raise SpecstreamError(f"prompt {i}: {exc}") from None
        out.append(ids)
    return out


def pad_steps(items: list[tuple[list[int], list[int], torch.Tensor]], starts: list[int], device):
    """Per row (tokens, depths, visibility [n, n]) → ids, positions [B, w] and visibility [B, w, w].

    Rows shorter than the widest get dummy nodes: token 0, the row's first position, visible only to
    themselves. Positions are each row's own prefix length + depth.
    """
    width = max(len(tokens) for tokens, _, _ in items)
    B = len(items)
    ids = torch.zeros(B, width, dtype=torch.long)
    depths = torch.zeros(B, width, dtype=torch.long)
    visible = torch.eye(width, dtype=torch.bool).repeat(B, 1, 1)
    for b, (tokens, node_depths, vis) in enumerate(items):
        n = len(tokens)
        ids[b, :n] = torch.tensor(tokens)
        depths[b, :n] = torch.tensor(node_depths)
        visible[b, :n, :n] = vis
    positions = torch.tensor(starts)[:, None] + depths
    return ids.to(device), positions.to(device), visible.to(device)


def _tree_item(tree: Tree):
    return tree.tokens, tree.depths, tree.visibility()


def _prompt_item(ids: list[int]):
    n = len(ids)
    return ids, list(range(n)), torch.tril(torch.ones(n, n, dtype=torch.bool))


class BatchedDecoding:
    """B sequences decoded together. `step()` runs one forward pass; `run()` returns results in input order."""

    def __init__(self, engine, prompts: list[list[int]], cfg: DecodeConfig, share_prefix: bool = False):
        if share_prefix and any(p != prompts[0] for p in prompts):
            raise SpecstreamError("share_prefix needs every prompt to be the same (n samples of one prompt)")
        self.engine, self.cfg = engine, cfg
        seed = cfg.seed if cfg.seed is not None else 0
        self.sequences = [Sequence(i, list(p), torch.Generator().manual_seed(seed + i)) for i, p in enumerate(prompts)]
        self.live = list(self.sequences)  # in cache-row order
        self.share_prefix = share_prefix and len(prompts) > 1
        self.forward_passes = 0
        self.started: float | None = None
        self.num_layers = engine.model.config.num_hidden_layers
        self.cache = None  # allocated by the prefill

    @property
    def done(self) -> bool:
        return not self.live

    # ---- the loop ---------------------------------------------------------------------------------
    def step(self) -> dict[int, list[int]]:
        """One forward pass for every live row; returns {row index: tokens it emitted}."""
        if self.done:
            return {}
        if self.started is None:
            self.started = time.perf_counter()
        self.emitted: dict[int, list[int]] = {}
        with torch.inference_mode():
            with self._attention():
                self._prefill() if self.forward_passes == 0 else self._decode_step()
            self.forward_passes += 1
            for seq in self.live:
                seq.forward_passes += 1
            self._drop_finished()
        return self.emitted

    def run(self) -> list[Result]:
        while not self.done:
            self.step()
        return self.results()

    def results(self) -> list[Result]:
        return [Result(list(s.output), self.engine.decode_text(s.output), self._stats(s)) for s in self.sequences]

    # ---- shared plumbing ---------------------------------------------------------------------------
    def _attention(self):
        """Shared-prefix attention once the prompt's K/V sits in a SharedPrefixCache, sdpa before."""
        if isinstance(self.cache, SharedPrefixCache):
            return compat.shared_prefix_attention(self.engine.model, self.cache.prefix_kv)
        return nullcontext()

    def _scratch(self) -> int:
        """Slots one step may write past a row's prefix (the widest tree and its streams)."""
        return 8

    def _allocate(self, batch: int, prompt_len: int) -> KVCache:
        capacity = prompt_len + self.cfg.max_new_tokens + self._scratch()
        return KVCache.for_model(self.engine.model, batch=batch, capacity=capacity)

    def _start_prefill(self) -> list[list[int]]:
        """The prompts the prefill runs (one when they share a prefix) and their cache."""
        prompts = [self.sequences[0].prompt_ids] if self.share_prefix else [s.prompt_ids for s in self.live]
        self.cache = self._allocate(len(prompts), max(len(p) for p in prompts))
        return prompts

    def _finish_prefill(self, prompts: list[list[int]]) -> None:
        """Keep every prompt row in place; with a shared prompt, its K/V becomes the shared prefix."""
        self.cache.commit([(0, self.num_layers, [torch.arange(len(p)) for p in prompts])])
        if self.share_prefix:
            capacity = self.cfg.max_new_tokens + self._scratch()
            self.cache = SharedPrefixCache(self.cache, batch=len(self.live), capacity=capacity)

    def _choose(self, logits: torch.Tensor) -> list[int]:
        """One token per live row from [B, V] logits (each row's own processors and generator)."""
        if processors.active(self.cfg):
            logits = torch.stack([processors.apply(self.cfg, logits[b], s.prompt_ids + s.output)
                                  for b, s in enumerate(self.live)])
        if self.cfg.sampling.greedy:
            return logits.argmax(dim=-1).tolist()  # one host sync for the whole batch
        return [sample_token(logits[b], self.cfg.sampling, s.generator) for b, s in enumerate(self.live)]

    def _emit(self, seq: Sequence, tokens: list[int]) -> list[int]:
        """Append tokens to a row's output under EOS / max-new-tokens / stop-string limits."""
        cfg = self.cfg
        tokens = tokens[: cfg.max_new_tokens - len(seq.output)]
        eos = self.engine.eos_ids if cfg.stop_on_eos else set()
        for i, tok in enumerate(tokens):
            if tok in eos:
                tokens, seq.done = tokens[: i + 1], True
                break
        seq.output.extend(tokens)
        if cfg.stop_strings and self._cut_at_stop_string(seq):
            seq.done = True
        if len(seq.output) >= cfg.max_new_tokens:
            seq.done = True
        self.emitted[seq.index] = tokens
        return tokens

    def _cut_at_stop_string(self, seq: Sequence) -> bool:
        decode, stops = self.engine.decode_text, self.cfg.stop_strings
        if not any(s in decode(seq.output) for s in stops):
            return False
        for n in range(1, len(seq.output) + 1):  # shortest prefix that contains a stop string
            if any(s in decode(seq.output[:n]) for s in stops):
                del seq.output[n:]
                return True
        return True

    def _drop_finished(self) -> None:
        """Finished rows leave the batch; the cache keeps the live rows (no re-padding)."""
        if not any(s.done for s in self.live):
            return
        now = time.perf_counter() - self.started
        for s in self.live:
            if s.done:
                s.wall_s = now
        keep = [b for b, s in enumerate(self.live) if not s.done]
        self.live = [self.live[b] for b in keep]
        if keep:
            self.cache.retain(keep)

    def _stats(self, seq: Sequence) -> dict:
        return {**decode_stats(seq), "batch_size": len(self.sequences), "shared_prefix": self.share_prefix}


class BatchedPlainDecoding(BatchedDecoding):
    """The batched baseline: one token per row per forward pass."""

    def _prefill(self) -> None:
        prompts = self._start_prefill()
        ids, positions, visible = pad_steps([_prompt_item(p) for p in prompts], [0] * len(prompts), self.engine.device)
        out = msa.forward(self.engine.model, ids, positions, visible, cache=self.cache, window=self.engine.window)
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.engine.device)
        logits = self.engine.logits(out.main[torch.arange(len(prompts)), last])  # [B or 1, V]
        self._finish_prefill(prompts)
        if self.share_prefix:  # every row starts from the same prompt logits
            logits = logits.expand(len(self.live), -1)
        for seq, token in zip(self.live, self._choose(logits)):
            seq.rows_total += len(seq.prompt_ids)
            seq.pending = token
            self._emit(seq, [token])

    def _decode_step(self) -> None:
        device = self.engine.device
        ids = torch.tensor([[s.pending] for s in self.live], device=device)  # [B, 1]
        positions = torch.tensor(self.cache.lengths, device=device)[:, None]
        visible = torch.ones(len(self.live), 1, 1, dtype=torch.bool, device=device)
        out = msa.forward(self.engine.model, ids, positions, visible, cache=self.cache, window=self.engine.window)
        self.cache.advance(1)
        for seq, token in zip(self.live, self._choose(self.engine.logits(out.main[:, -1]))):
            seq.rows_total += 1
            seq.pending = token
            self._emit(seq, [token])


class BatchedSpeculativeDecoding(BatchedDecoding):
    """Speculative Streaming for B rows: each row verifies its own tree and drafts from its own streams."""

    def __init__(self, engine, prompts, cfg: DecodeConfig, share_prefix: bool = False,
                 drafter_factory: Callable[[int], Drafter] | None = None):
        if drafter_factory is None and engine.streams is None:
            raise SpecstreamError("speculative decoding needs stream parameters (or another drafter)")
        super().__init__(engine, prompts, cfg, share_prefix)
        gamma = engine.streams.cfg.gamma if engine.streams is not None else 0
        self.topk = cfg.tree_topk[:min(len(cfg.tree_topk), gamma)]
        for seq in self.sequences:
            seq.drafter = drafter_factory(seq.index) if drafter_factory else StreamDrafter(self.topk, cfg.node_budget)
            seq.depth_hits = [0] * (len(cfg.tree_topk) if seq.drafter.uses_streams else 16)
        uses = {seq.drafter.uses_streams for seq in self.sequences}
        if len(uses) > 1:
            raise SpecstreamError("all rows of a batch must use the streams, or none")
        self.streams = engine.streams if uses == {True} else None
        self.num_streams = len(self.topk) if self.streams is not None else 0

    def _scratch(self) -> int:
        if self.streams is None:  # other drafters: at most the node budget
            return self.cfg.node_budget + 8
        widest = min(self.cfg.node_budget, 1 + sum(math.prod(self.topk[:j]) for j in range(1, len(self.topk) + 1)))
        return widest * (1 + self.num_streams) + self.num_streams + 8

    def _prefill(self) -> None:
        # each prompt as a chain; its last position carries the streams that give the first draft
        prompts = self._start_prefill()
        device = self.engine.device
        ids, positions, visible = pad_steps([_prompt_item(p) for p in prompts], [0] * len(prompts), device)
        last = torch.tensor([[len(p) - 1] for p in prompts], device=device)  # [B, 1]
        carriers = last if self.streams is not None else None
        out = msa.forward(self.engine.model, ids, positions, visible, streams=self.streams, carriers=carriers,
                          cache=self.cache, window=self.engine.window, num_streams=self.num_streams)
        logits = self.engine.logits(out.main[torch.arange(len(prompts)), last[:, 0]])  # [B or 1, V]
        stream_logits = self.engine.draft_logits(out.streams[:, 0]) if self.streams is not None else None  # [B or 1, k, V]
        self._finish_prefill(prompts)
        if self.share_prefix:
            logits = logits.expand(len(self.live), -1)
            stream_logits = stream_logits.expand(len(self.live), -1, -1) if stream_logits is not None else None
        for b, (seq, token) in enumerate(zip(self.live, self._choose(logits))):
            if stream_logits is not None:
                seq.drafter.observe_streams(stream_logits[b])
            seq.rows_total += self._rows(len(seq.prompt_ids), 1)
            seq.pending = token
            self._emit(seq, [token])

    def _decode_step(self) -> None:
        live = self.live
        trees = [s.drafter.propose(s.pending, s.context) for s in live]  # 1. draft
        out = self._verify_and_draft(trees)  # 2. one forward pass for every row
        logits = self.engine.logits(out.main)  # [B, w, V]
        verdicts = [self._verify(s, tree, logits[b, :len(tree)]) for b, (s, tree) in enumerate(zip(live, trees))]  # 3.
        self.cache.commit([(0, self.num_layers, [torch.tensor(v.path) for v in verdicts])])  # 4. K/V into place
        if self.streams is not None:  # 5. each row's accepted node's streams: its next draft
            last = torch.tensor([v.path[-1] for v in verdicts], device=logits.device)
            stream_logits = self.engine.draft_logits(out.streams[torch.arange(len(live)), last])  # [B, k, V]
            for seq, rows in zip(live, stream_logits):
                seq.drafter.observe_streams(rows)
        for seq, tree, verdict in zip(live, trees, verdicts):
            self._accept(seq, tree, verdict)

    def _verify_and_draft(self, trees: list[Tree]) -> msa.ForwardOutput:
        """Every row's tree after its own prefix, padded to one width; every node carries streams."""
        device = self.engine.device
        ids, positions, visible = pad_steps([_tree_item(t) for t in trees], self.cache.lengths, device)
        width = ids.shape[1]
        carriers = torch.arange(width, device=device).expand(len(trees), width) if self.streams is not None else None
        # only the streams the tree uses run (a (1, 1) tree needs streams 1 and 2 of γ)
        return msa.forward(self.engine.model, ids, positions, visible, streams=self.streams, carriers=carriers,
                           cache=self.cache, window=self.engine.window, num_streams=self.num_streams)

    def _verify(self, seq: Sequence, tree: Tree, logits: torch.Tensor):
        """The row's accepted path and bonus token; logits [n, V] of its real nodes."""
        if processors.active(self.cfg):  # node i sees the context before the root + its own path
            logits = processors.apply(self.cfg, logits, seq.context, tree)
        if self.cfg.sampling.greedy:
            return verify_greedy(tree, logits)
        return verify_sampling(tree, logits, self.cfg.sampling, seq.generator)

    def _accept(self, seq: Sequence, tree: Tree, verdict) -> None:
        for depth in range(1, len(verdict.path)):
            if depth - 1 < len(seq.depth_hits):
                seq.depth_hits[depth - 1] += 1
        seq.rows_total += self._rows(len(tree), len(tree))
        seq.pending = verdict.bonus
        # the root was emitted by the previous step: emit the accepted drafts and the bonus
        self._emit(seq, [tree.tokens[i] for i in verdict.path[1:]] + [verdict.bonus])

    def _rows(self, main: int, carriers: int) -> int:
        """Rows one sequence put through the model, averaged over layers (as single decoding reports)."""
        if self.streams is None:
            return main
        birth, ns = self.streams.cfg.birth_layer, self.streams.cfg.n_stream_layers
        return (main * birth + (main + carriers * self.num_streams) * ns) // (birth + ns)


def start_batch(engine, prompts, cfg: DecodeConfig, share_prefix: bool | None = None,
                drafter_factory: Callable[[int], Drafter] | None = None) -> BatchedDecoding:
    """A batched decoding of `prompts` (strings or token-id lists).

    share_prefix: None = automatic (on when there are several prompts and all are the same), True =
    required (error unless all prompts are the same), False = off.
    drafter_factory: row index -> its drafter (ss only; default: the engine's streams).
    """
    ids = prepare_prompts(engine, prompts, cfg)
    same = len(ids) > 1 and all(p == ids[0] for p in ids)
    if share_prefix is None:
        share_prefix = same
    if cfg.mode == "ar":
        return BatchedPlainDecoding(engine, ids, cfg, share_prefix)
    return BatchedSpeculativeDecoding(engine, ids, cfg, share_prefix, drafter_factory)

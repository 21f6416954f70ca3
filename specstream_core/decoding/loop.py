"""The decoding loop: one step function over B rows. Single decoding is B = 1; plain decoding is the
same step with a one-node draft (`RootOnly`).

    pass 0   prefill(): every prompt as a chain (once when all rows share it); its last position
             carries the streams that give the first draft
    pass k   step():    1. draft    each row's drafter proposes a tree rooted at its pending token
                        2. forward  one pass for all rows: trees padded to one width, after each row's
                                    own prefix; pruning at layer N−Ns; every survivor carries streams
                        3. verify   each row accepts its longest matching path + a bonus token
                        4. commit   each row's accepted K/V moves into place in the cache
                        5. observe  each row's drafter sees the pass output at its accepted node
                        6. emit     each row appends its tokens under its limits; traces record

Ragged lengths live in the cache's per-row lengths: no padding is ever stored. Padding exists only
inside one pass: a dummy node sees only itself and its row's prefix, nothing real sees it, and its K/V
is never committed. A finished row leaves the batch (`KVCache.retain`).

n samples of one prompt (`share_prefix`): the prompt is prefilled once, its K/V kept once
(`SharedPrefixCache`), every row attends over [shared prompt | own suffix]
(`compat.shared_prefix_attention`).

Sampling: row i draws from its own generator seeded with (cfg.seed or 0) + i, so row i of a batch
equals `engine.generate(prompt_i, replace(cfg, seed=(cfg.seed or 0) + i))`; greedy rows equal
`engine.generate(prompt_i, cfg)` token for token.
"""

from __future__ import annotations

import time

import torch

from specstream_core.decoding import processors
from specstream_core.decoding.config import DecodeConfig, Result
from specstream_core.decoding.drafters import Drafter, RowOutput
from specstream_core.decoding.inputs import default_drafter, prepare_prompts, prompt_ids
from specstream_core.decoding.prefill import pad_steps, prefill
from specstream_core.decoding.state import Limits, Row
from specstream_core.decoding.tracer import Pass, RowTrace, attention_maps, capture_layers, capturing_forward
from specstream_core.decoding.tree import Tree, prune_by_threshold
from specstream_core.decoding.verify import Verdict, sample_token, verify_greedy, verify_sampling, walk_greedy
from specstream_core.errors import SpecstreamError
from specstream_core.model import compat, exactness, msa
from specstream_core.model.cache import KVCache, SharedPrefixCache


class Decoding:
    """B sequences decoded together. `step()` runs one forward pass and returns {row index: tokens it
    emitted}; `run()` returns the results in input order."""

    def __init__(self, engine, prompts: list[list[int]], cfg: DecodeConfig, drafters: list[Drafter],
                 share_prefix: bool = False):
        if share_prefix and any(p != prompts[0] for p in prompts):
            raise SpecstreamError("share_prefix needs every prompt to be the same (n samples of one prompt)")
        uses = {d.uses_streams for d in drafters}
        if len(uses) > 1:
            raise SpecstreamError("all rows of a batch must use the streams, or none")
        self.engine, self.cfg, self.backend = engine, cfg, engine.backend  # the backend: scores, verification, attention
        self.streams = engine.streams if uses == {True} else None
        # a draft k deep needs streams 1..k only (stream j sees streams 1..j, so the rest change nothing)
        self.num_streams = min(len(cfg.tree_topk), self.streams.cfg.gamma) if self.streams is not None else 0
        self.capture = capture_layers(cfg, self.streams)
        self._check_capture()
        self.capture_apart = False  # True: capture in a pass of its own (`capturing_forward`): no draft changes
        self.share_prefix = share_prefix and len(prompts) > 1
        equals = exactness.for_engine(engine, cfg)  # what the output equals, in each row's stats
        self.rows = [Row(i, list(p), torch.Generator().manual_seed((cfg.seed or 0) + i), d,
                         depth_hits=[0] * (0 if cfg.mode == "ar" else max(len(cfg.tree_topk), d.max_depth)),
                         trace=RowTrace(engine, cfg, p) if cfg.trace else None, equals=equals)
                     for i, (p, d) in enumerate(zip(prompts, drafters))]
        self.live = list(self.rows)  # in cache-row order
        self.limits = Limits(cfg.max_new_tokens, frozenset(engine.eos_ids if cfg.stop_on_eos else ()),
                             cfg.stop_strings, engine.decode_text)
        self.num_layers = engine.model.config.num_hidden_layers
        self.birth = self.streams.cfg.birth_layer if self.streams is not None else self.num_layers
        self.forward_passes = 0
        self.cache = None  # allocated by the prefill
        self.greedy = cfg.sampling.greedy and not processors.active(cfg)  # verification needs only argmaxes

    def _check_capture(self) -> None:
        if self.capture:
            lo, hi = self.streams.cfg.birth_layer, self.streams.cfg.num_layers
            bad = [li for li in self.capture if not lo <= li < hi]
            if bad:
                raise SpecstreamError(f"attention layers {bad} carry no streams; choose among {lo}..{hi - 1}")

    @property
    def done(self) -> bool:
        return not self.live

    # ---- the loop -------------------------------------------------------------------------------
    def step(self) -> dict[int, list[int]]:
        """One forward pass for every live row; returns {row index: tokens it emitted}."""
        if self.done:
            return {}
        t0 = time.perf_counter()
        with torch.inference_mode(), self._attention():
            passes = prefill(self) if self.forward_passes == 0 else self._speculate()
            emitted = {row.index: self._emit(row, p) for row, p in zip(self.live, passes)}  # 6. emit
        self.forward_passes += 1
        elapsed = time.perf_counter() - t0
        for row in self.live:
            row.forward_passes += 1
            row.wall_s += elapsed
            if row.done and row.trace is not None:
                row.trace.finish(row.output, row.stats())
        with torch.inference_mode():  # the cache's buffers are inference tensors
            self._drop_finished()
        return emitted

    def _speculate(self) -> list[Pass]:
        live, engine = self.live, self.engine
        t0 = time.perf_counter()
        trees = [row.drafter.propose(row.pending, row.context) for row in live]  # 1. draft
        t1 = time.perf_counter()
        starts = list(self.cache.lengths)
        out = self._forward(trees, starts)  # 2. forward (pruning inside)
        keeps = ([list(range(len(t))) for t in trees] if out.keep is None
                 else [out.keep[b, :n].tolist() for b, n in enumerate(out.kept)])
        survivors = [t if out.keep is None else t.subset(k) for t, k in zip(trees, keeps)]
        # 3. verify: greedy picks [B, m] where only argmaxes are needed, else logits [B, m, V] (+ stream rows' scores)
        heads, scored = self.backend.verification(out.main, out.streams, self.greedy)
        verdicts = [self._verify(row, s, heads[b, :len(s)]) for b, (row, s) in enumerate(zip(live, survivors))]
        t2 = time.perf_counter()
        self._commit(out, keeps, verdicts)  # 4. commit
        t3 = time.perf_counter()
        for b, (row, v) in enumerate(zip(live, verdicts)):  # 5. observe
            row.drafter.observe(self._row_output(out, b, scored=scored), v.path[-1])
        t4 = time.perf_counter()
        times = {"verify": (t2 - t1) * 1e3, "draft": (t1 - t0 + t4 - t3) * 1e3, "accept": (t3 - t2) * 1e3}
        passes = []
        for b, (row, tree, keep, s, v) in enumerate(zip(live, trees, keeps, survivors, verdicts)):
            top = len(keep) * (1 + self.num_streams) if self.streams is not None else len(tree)
            attention = (attention_maps(engine, self.cfg, out, b, v.path[-1], s.path_to(v.path[-1]), s, starts[b],
                                        row.context) if self.capture else None)
            passes.append(Pass(tree, keep, [keep[i] for i in v.path], v.bonus, (len(tree), top), starts[b],
                               times=dict(times), attention=attention))
        return passes

    # ---- the pieces of a pass -------------------------------------------------------------------
    def _forward(self, trees: list[Tree], starts: list[int]) -> msa.ForwardOutput:
        """Every row's tree after its own prefix, padded to one width; every node carries streams."""
        device = self.engine.device
        ids, positions, visible = pad_steps([(t.tokens, t.depths, t.visibility()) for t in trees], starts, device)
        width = ids.shape[1]
        carriers = torch.arange(width, device=device).expand(len(trees), width) if self.streams is not None else None
        select = None
        if (self.streams is not None and self.cfg.prune_threshold > 0 and self.streams.prune is not None
                and any(len(t) > 1 for t in trees)):
            select = lambda h: self._select(trees, h)  # noqa: E731
        return capturing_forward(self, self.engine.model, ids, positions, visible, streams=self.streams,
                                 carriers=carriers, cache=self.cache, select=select, window=self.engine.window,
                                 num_streams=self.num_streams or None)

    def _select(self, trees: list[Tree], h_birth: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """Pruning layer: early-exit transition probabilities p(child | parent) at layer N−Ns, every row
        at once. Returns (keep [B, m] padded with 0, survivors per row)."""
        pairs = [(b, p) for b, t in enumerate(trees) for p in sorted({q for q in t.parents if q >= 0})]
        row_of = {pair: r for r, pair in enumerate(pairs)}
        bs, ps = torch.tensor([b for b, _ in pairs]), torch.tensor([p for _, p in pairs])
        hidden = msa.prune_hidden(self.engine.model, self.streams, h_birth[bs.to(h_birth.device), ps.to(h_birth.device)])
        logp = self.engine.logits(hidden).float().log_softmax(dim=-1)  # [pairs, V]
        idx_rows = [row_of[(b, t.parents[i])] for b, t in enumerate(trees) for i in range(1, len(t))]
        idx_toks = [t.tokens[i] for t in trees for i in range(1, len(t))]
        # host sync: the kept sets size the rest of the pass
        flat = logp[torch.tensor(idx_rows, device=logp.device), torch.tensor(idx_toks, device=logp.device)].exp().tolist()
        keeps, at = [], 0
        for t in trees:
            trans = [1.0] + flat[at:at + len(t) - 1]
            at += len(t) - 1
            keeps.append(prune_by_threshold(t, trans, self.cfg.prune_threshold))
        width = max(len(k) for k in keeps)
        keep = torch.tensor([k + [0] * (width - len(k)) for k in keeps], device=h_birth.device)
        return keep, [len(k) for k in keeps]

    def _verify(self, row: Row, tree: Tree, logits: torch.Tensor) -> Verdict:
        """The row's accepted path and bonus token from its real (surviving) nodes' logits [n, V] or greedy picks [n]."""
        if self.greedy:  # one host sync: the walk needs the picks on the host
            return walk_greedy(tree, logits.tolist())
        cfg = self.cfg
        if len(tree) == 1:  # no draft (plain decoding): one token after the whole context
            scores = logits[0]
            if processors.active(cfg):
                scores = processors.apply(cfg, scores, row.prompt_ids + row.output)
            return Verdict([0], sample_token(scores, cfg.sampling, row.generator))
        if processors.active(cfg):  # node i sees the context before the root + its own path
            logits = processors.apply(cfg, logits, row.context, tree)
        if cfg.sampling.greedy:
            return verify_greedy(tree, logits)
        return verify_sampling(tree, logits, cfg.sampling, row.generator)

    def _commit(self, out: msa.ForwardOutput, keeps: list[list[int]], verdicts: list[Verdict]) -> None:
        """Accepted rows into place: layers below N−Ns saw the whole tree, the layers above only the survivors."""
        device = self.engine.device
        top = [torch.tensor(v.path, device=device) for v in verdicts]
        if out.keep is None:
            self.cache.commit([(0, self.num_layers, top)])
            return
        bottom = [torch.tensor([k[i] for i in v.path], device=device) for k, v in zip(keeps, verdicts)]
        self.cache.commit([(0, self.birth, bottom), (self.birth, self.num_layers, top)])

    def _row_output(self, out: msa.ForwardOutput, b: int, carriers: list[int] | None = None,
                    scored: torch.Tensor | None = None) -> RowOutput:
        streams = out.streams[b] if out.streams is not None else None
        return RowOutput(out.main[b], streams, carriers, self.engine.draft_scores,
                         None if scored is None else (scored[b], self.streams.draft_vocab))

    def _emit(self, row: Row, p: Pass) -> list[int]:
        """A prefill emits only its bonus; a tree pass the accepted drafts (the root was emitted by the
        previous pass) and its bonus."""
        new = [] if p.prefill else [p.tree.tokens[i] for i in p.path[1:]]
        row.rows_total += self._rows(*p.rows)
        if not p.prefill:
            row.count_depths(len(p.path) - 1)
        row.pending = p.bonus
        emitted = self.limits.emit(row, new + [p.bonus])
        if row.trace is not None:
            row.trace.record(p, emitted)
        return emitted

    def _rows(self, bottom: int, top: int) -> int:
        """Rows one sequence put through the model, averaged over layers."""
        if self.streams is None:
            return bottom
        birth, ns = self.streams.cfg.birth_layer, self.streams.cfg.n_stream_layers
        return (bottom * birth + top * ns) // (birth + ns)

    # ---- cache and batch bookkeeping ------------------------------------------------------------
    def _attention(self):
        """Shared-prefix attention once the prompt's K/V sits in a SharedPrefixCache; else the backend's (row-exact)."""
        if isinstance(self.cache, SharedPrefixCache):
            return compat.shared_prefix_attention(self.engine.model, self.cache.prefix_kv)
        return self.backend.attention(self.streams.rows if self.streams is not None else None,
                                      per_row=self.forward_passes > 0,
                                      causal_prompt=self.forward_passes == 0 and len(self.live) == 1)

    def scratch(self) -> int:
        """Slots one pass may write past a row's prefix: the widest tree and its streams, + a margin."""
        width = max(row.drafter.max_nodes or self.cfg.node_budget for row in self.rows)
        return width * (1 + self.num_streams) + self.num_streams + 16

    def allocate(self, batch: int, prompt_len: int) -> KVCache:
        capacity = prompt_len + self.cfg.max_new_tokens + self.scratch()
        return KVCache.for_model(self.engine.model, batch=batch, capacity=capacity)

    def _drop_finished(self) -> None:
        """Finished rows leave the batch; the cache keeps the live rows (no re-padding)."""
        keep = [b for b, row in enumerate(self.live) if not row.done]
        if len(keep) == len(self.live):
            return
        self.live = [self.live[b] for b in keep]
        if keep:
            self.cache.retain(keep)

    # ---- results --------------------------------------------------------------------------------
    def run(self) -> list[Result]:
        while not self.done:
            self.step()
        return self.results()

    def results(self) -> list[Result]:
        return [Result(list(r.output), self.engine.decode_text(r.output),
                       {**r.stats(), "batch_size": len(self.rows), "shared_prefix": self.share_prefix},
                       r.trace.data if r.trace is not None else None) for r in self.rows]


class SingleDecoding(Decoding):
    """One prompt: the same loop with B = 1. `step()` returns the tokens this pass emitted."""

    def step(self) -> list[int]:
        return super().step().get(0, [])

    @property
    def row(self) -> Row:
        return self.rows[0]

    @property
    def output(self) -> list[int]:
        return self.row.output

    @property
    def prompt_ids(self) -> list[int]:
        return self.row.prompt_ids

    @property
    def trace(self) -> dict | None:
        return self.row.trace.data if self.row.trace is not None else None

    def stats(self) -> dict:
        return self.row.stats()

    def result(self) -> Result:
        return Result(list(self.output), self.engine.decode_text(self.output), self.stats(), self.trace)

    def run(self) -> Result:
        while not self.done:
            self.step()
        return self.result()


# ---- starting a decoding ------------------------------------------------------------------------
def start(engine, prompt, cfg: DecodeConfig, drafter: Drafter | None = None) -> SingleDecoding:
    cfg = engine.settle(cfg)  # draft settings left None: the stream set's recommendation
    ids = prompt_ids(engine, prompt, cfg)
    if cfg.mode == "ar" or drafter is None:
        drafter = default_drafter(engine, cfg)
    return SingleDecoding(engine, [ids], cfg, [drafter])


def start_batch(engine, prompts, cfg: DecodeConfig, share_prefix: bool | None = None,
                drafter_factory=None) -> Decoding:
    """A batched decoding of `prompts` (strings or token-id lists).

    share_prefix: None = automatic (on when there are several prompts, all the same, and no attention
    is captured), True = required (error unless all prompts are the same), False = off.
    drafter_factory: row index -> its drafter (ss only; default: the engine's streams).
    """
    cfg = engine.settle(cfg)  # draft settings left None: the stream set's recommendation
    ids = prepare_prompts(engine, prompts, cfg)
    same = len(ids) > 1 and all(p == ids[0] for p in ids)
    capturing = cfg.trace and bool(cfg.attention_layers)
    if share_prefix is None:
        share_prefix = same and not capturing
    elif share_prefix and capturing:
        raise SpecstreamError("attention maps cannot be captured over a shared prefix; pass share_prefix=False")
    if cfg.mode == "ar" or drafter_factory is None:
        drafters = [default_drafter(engine, cfg) for _ in ids]
    else:
        drafters = [drafter_factory(i) for i in range(len(ids))]
    return Decoding(engine, ids, cfg, drafters, share_prefix)

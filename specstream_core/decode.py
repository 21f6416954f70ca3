"""The two decoding loops on one engine and one preallocated KV cache.

Plain:        prefill → (feed the last token → choose the next) …
Speculative:  prefill (main rows + the last prompt position's streams)
              → repeat: 1. draft a tree from the streams   2. one forward: verify the tree and run the
                           survivors' streams (pruning inside)   3. accept the longest matching path
                           + a bonus token   4. move the path's K/V into place   5. keep the accepted
                           node's streams as the next draft.

Both are step-wise objects (`step()` returns the tokens one forward pass emitted), so the lab can
interleave them; `run()` drains one. Token ids in, token ids out: no tokenization here except
stop-string checks and trace labels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from . import msa, processors, trace as tracing
from .cache import KVCache
from .drafters import Drafter, StreamDrafter
from .errors import SpecstreamError
from .streams import StreamParams
from .tree import Tree, chain, prune_by_threshold
from .verify import SamplingConfig, Verdict, sample_token, verify_greedy, verify_sampling

MAX_NEW_TOKENS = 4096
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class DecodeConfig:
    mode: str = "ss"  # ar | ss
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    tree_topk: tuple[int, ...] = (4, 3, 2, 1)  # candidates per depth (stream j gives depth j)
    prune_threshold: float = 0.0  # drop subtrees whose transition probability is below this
    node_budget: int = 64  # most tree nodes per step (root included)
    stop_strings: tuple[str, ...] = ()
    stop_on_eos: bool = True
    trace: bool = False
    attention_layers: tuple[int, ...] = ()  # capture stream attention in these layers (trace only)
    attention_heads: tuple[int, ...] = ()  # () = all heads
    attention_context: int = 48  # most context columns kept per attention map
    no_repeat_ngram_size: int = 0  # ban any n-gram already in the context (0 = off), per tree node
    repetition_penalty: float = 1.0  # transformers' repetition penalty (1 = off), per tree node

    def __post_init__(self):
        if self.mode not in ("ar", "ss"):
            raise SpecstreamError(f"mode must be 'ar' or 'ss', got {self.mode!r}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise SpecstreamError(f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS}, got {self.max_new_tokens}")
        if not 0.0 <= self.temperature <= 10.0:
            raise SpecstreamError(f"temperature must be between 0 and 10, got {self.temperature}")
        if self.top_k < 0:
            raise SpecstreamError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecstreamError(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.tree_topk or any(k < 1 or k > 16 for k in self.tree_topk):
            raise SpecstreamError(f"per-depth top-k values must be between 1 and 16, got {list(self.tree_topk)}")
        if not 0.0 <= self.prune_threshold < 1.0:
            raise SpecstreamError(f"prune threshold must be in [0, 1), got {self.prune_threshold}")
        if not 1 <= self.node_budget <= 512:
            raise SpecstreamError(f"node budget must be between 1 and 512, got {self.node_budget}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed <= MAX_SEED):
            # torch seeds are 64-bit; batch row i uses seed + i, so leave headroom below 2**64
            raise SpecstreamError(f"seed must be an integer between 0 and 2**63 - 1, got {self.seed!r}")
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            # "" is in every text: it would stop decoding after the first token
            raise SpecstreamError(f"stop strings must be non-empty text, got {list(self.stop_strings)!r}")
        if isinstance(self.no_repeat_ngram_size, bool) or not isinstance(self.no_repeat_ngram_size, int) \
                or not 0 <= self.no_repeat_ngram_size <= MAX_NEW_TOKENS:
            raise SpecstreamError(f"no_repeat_ngram_size must be an integer between 0 (off) and {MAX_NEW_TOKENS}, "
                                  f"got {self.no_repeat_ngram_size!r}")
        if not isinstance(self.repetition_penalty, (int, float)) or isinstance(self.repetition_penalty, bool) \
                or not 0.0 < self.repetition_penalty <= 100.0:
            raise SpecstreamError(f"repetition_penalty must be in (0, 100] (1 = off, > 1 penalizes repeats), "
                                  f"got {self.repetition_penalty!r}")

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.top_k, self.top_p)


def parse_topk(text: str) -> tuple[int, ...]:
    """'4,3,2,1' -> (4, 3, 2, 1), with a clear error for anything else."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SpecstreamError(f"--topk must be comma-separated integers such as 4,3,2,1, got {text!r}") from None
    if not values or any(v < 1 or v > 16 for v in values):
        raise SpecstreamError(f"--topk values must be between 1 and 16, got {text!r}")
    return values


@dataclass
class Result:
    token_ids: list[int]
    text: str
    stats: dict
    trace: dict | None = None


@dataclass
class _StepLog:
    """What one speculative pass did, for stats and traces."""
    tree: Tree
    keep: list[int]
    path: list[int]  # accepted node ids in the full tree
    bonus: int
    rows: tuple[int, int]
    times: dict = field(default_factory=dict)
    attention: dict | None = None


def decode_stats(seq) -> dict:
    """Per-sequence statistics of a decoding (single or one row of a batch): anything with `output`,
    `forward_passes`, `wall_s`, `depth_hits` and `rows_total`."""
    n = len(seq.output)
    steps = max(1, seq.forward_passes - 1)
    return {
        "forward_passes": seq.forward_passes,
        "new_tokens": n,
        "mean_accepted": n / seq.forward_passes if seq.forward_passes else 0.0,
        "wall_s": seq.wall_s,
        "tokens_per_s": n / seq.wall_s if seq.wall_s else 0.0,
        "depth_acceptance": [h / steps for h in seq.depth_hits],
        "rows_processed": seq.rows_total,
    }


class Decoding:
    """One sequence being decoded. `step()` runs one forward pass and returns the tokens it emitted."""

    def __init__(self, engine, prompt_ids: list[int], cfg: DecodeConfig, drafter: Drafter | None = None):
        self.engine, self.cfg = engine, cfg
        self.prompt_ids = list(prompt_ids)
        self.output: list[int] = []
        self.done = False
        self.forward_passes = 0
        self.wall_s = 0.0
        self.pending: int | None = None  # emitted but not yet in the cache
        self.generator = torch.Generator().manual_seed(cfg.seed if cfg.seed is not None else 0)
        self.drafter = drafter
        self.depth_hits: list[int] = []
        self.rows_total = 0
        self.cache = KVCache.for_model(engine.model, batch=1, capacity=self._capacity())
        self.trace = tracing.new_trace(engine.trace_meta(cfg), engine.decode_text(self.prompt_ids), self.prompt_ids) if cfg.trace else None

    def _capacity(self) -> int:
        gamma = self.engine.streams.cfg.gamma if self.engine.streams is not None else 0
        scratch = self.cfg.node_budget * (1 + gamma) + 16
        return len(self.prompt_ids) + self.cfg.max_new_tokens + scratch

    # ---- shared plumbing ------------------------------------------------------------------
    def _tensor(self, values) -> torch.Tensor:
        return torch.tensor([values], dtype=torch.long, device=self.engine.device)

    def _emit(self, tokens: list[int]) -> list[int]:
        """Append tokens to the output, applying EOS / max-new-tokens / stop-string limits."""
        room = self.cfg.max_new_tokens - len(self.output)
        tokens = tokens[:room]
        eos = self.engine.eos_ids if self.cfg.stop_on_eos else set()
        for i, tok in enumerate(tokens):
            if tok in eos:
                tokens, self.done = tokens[: i + 1], True
                break
        self.output.extend(tokens)
        if self.cfg.stop_strings and self._cut_at_stop_string():
            self.done = True
        if len(self.output) >= self.cfg.max_new_tokens:
            self.done = True
        return tokens

    def _cut_at_stop_string(self) -> bool:
        text = self.engine.decode_text(self.output)
        if not any(s in text for s in self.cfg.stop_strings):
            return False
        for n in range(1, len(self.output) + 1):  # shortest prefix that contains a stop string
            if any(s in self.engine.decode_text(self.output[:n]) for s in self.cfg.stop_strings):
                del self.output[n:]
                return True
        return True

    def step(self) -> list[int]:
        if self.done:
            return []
        t0 = time.perf_counter()
        with torch.inference_mode():
            emitted = self._prefill() if self.forward_passes == 0 else self._decode_step()
        self.forward_passes += 1
        self.wall_s += time.perf_counter() - t0
        if self.done and self.trace is not None:
            self._finish_trace()
        return emitted

    def run(self) -> Result:
        while not self.done:
            self.step()
        return self.result()

    def stats(self) -> dict:
        return decode_stats(self)

    def result(self) -> Result:
        return Result(list(self.output), self.engine.decode_text(self.output), self.stats(), self.trace)

    def _finish_trace(self) -> None:
        self.trace["output"] = {"text": self.engine.decode_text(self.output), "token_ids": list(self.output)}
        self.trace["stats"] = self.stats()


class PlainDecoding(Decoding):
    """The baseline: one token per forward pass, same engine, same cache."""

    def _prefill(self) -> list[int]:
        return self._feed(self.prompt_ids)

    def _decode_step(self) -> list[int]:
        return self._feed([self.pending])

    def _feed(self, tokens: list[int]) -> list[int]:
        start = self.cache.lengths[0]
        n = len(tokens)
        positions = torch.arange(start, start + n, device=self.engine.device)[None]
        out = msa.forward(self.engine.model, self._tensor(tokens), positions, self.engine.causal(n),
                          cache=self.cache, window=self.engine.window)
        self.cache.advance(n)
        logits = self.engine.logits(out.main[0, -1])
        if processors.active(self.cfg):  # n-gram blocking / repetition penalty over the whole context
            logits = processors.apply(self.cfg, logits, self.prompt_ids + self.output)
        self.pending = sample_token(logits, self.cfg.sampling, self.generator)
        self.rows_total += n
        emitted = self._emit([self.pending])
        if self.trace is not None:
            self._trace_plain(emitted, start)
        return emitted

    def _trace_plain(self, emitted: list[int], start: int) -> None:
        decode = self.engine.token_text
        step = {"index": len(self.trace["steps"]), "prefix_len": start,
                "nodes": [{"id": 0, "token": emitted[0] if emitted else -1, "text": decode(emitted[0]) if emitted else "",
                           "parent": -1, "depth": 0, "prob": 1.0, "pruned": False, "accepted": True}],
                "accepted": [0], "bonus": {"token": self.pending, "text": decode(self.pending)},
                "emitted": emitted, "rows": {"bottom": 1, "top": 1}, "time_ms": {"draft": 0.0, "verify": 0.0, "accept": 0.0},
                "attention": None}
        self.trace["steps"].append(step)


class SpeculativeDecoding(Decoding):
    """Speculative Streaming: every pass verifies the previous draft and drafts the next one."""

    def __init__(self, engine, prompt_ids, cfg, drafter: Drafter | None = None):
        if drafter is None:
            if engine.streams is None:
                raise SpecstreamError("speculative decoding needs stream parameters (or another drafter)")
            depth = min(len(cfg.tree_topk), engine.streams.cfg.gamma)
            drafter = StreamDrafter(cfg.tree_topk[:depth], cfg.node_budget)
        super().__init__(engine, prompt_ids, cfg, drafter)
        self.streams: StreamParams | None = engine.streams if drafter.uses_streams else None
        # a draft k deep needs streams 1..k only (stream j sees streams 1..j, so the rest change nothing)
        self.num_streams = min(len(cfg.tree_topk), self.streams.cfg.gamma) if self.streams is not None else None
        self.depth_hits = [0] * (len(cfg.tree_topk) if drafter.uses_streams else 16)
        if cfg.attention_layers and self.streams is not None:
            lo, hi = self.streams.cfg.birth_layer, self.streams.cfg.num_layers
            bad = [li for li in cfg.attention_layers if not lo <= li < hi]
            if bad:
                raise SpecstreamError(f"attention layers {bad} carry no streams; choose among {lo}..{hi - 1}")

    def _prefill(self) -> list[int]:
        # the prompt as a chain; its last position carries the streams that give the first draft
        prompt = chain(self.prompt_ids[0], self.prompt_ids[1:])
        return self._accept(self._verify_and_draft(prompt, prefill=True))

    def _decode_step(self) -> list[int]:
        t0 = time.perf_counter()
        tree = self.drafter.propose(self.pending, self.prompt_ids + self.output[:-1])  # 1. draft
        draft_ms = (time.perf_counter() - t0) * 1e3
        log = self._verify_and_draft(tree)  # 2–3. one forward: verify + next streams
        log.times["draft"] = log.times.get("draft", 0.0) + draft_ms
        return self._accept(log)  # 4–5. cache + output

    def _verify_and_draft(self, tree: Tree, prefill: bool = False) -> _StepLog:
        engine, cfg = self.engine, self.cfg
        t0 = time.perf_counter()
        start = self.cache.lengths[0]
        n = len(tree)
        depths = torch.tensor(tree.depths, device=engine.device)
        positions = (start + depths)[None]  # tree nodes: prefix length + depth
        visible = tree.visibility(engine.device)[None]
        use_streams = self.streams is not None
        carriers = (torch.tensor([[n - 1]] if prefill else [list(range(n))], device=engine.device)
                    if use_streams else None)
        select = None
        if use_streams and not prefill and cfg.prune_threshold > 0 and self.streams.prune is not None and n > 1:
            select = lambda h: self._select(tree, h)  # noqa: E731
        capture = cfg.attention_layers if (cfg.trace and use_streams) else ()
        out = msa.forward(engine.model, self._tensor(tree.tokens), positions, visible, streams=self.streams,
                          carriers=carriers, cache=self.cache, select=select, capture_layers=capture,
                          window=engine.window, num_streams=self.num_streams)
        keep = out.keep.tolist() if out.keep is not None else list(range(n))
        survivors = tree.subset(keep) if out.keep is not None else tree
        if prefill:  # only the last row's logits matter
            logits = engine.logits(out.main[0, -1])
            if processors.active(cfg):
                logits = processors.apply(cfg, logits, self.prompt_ids)
            verdict = Verdict(path=list(range(n)), bonus=sample_token(logits, cfg.sampling, self.generator))
            last = n - 1
        else:
            logits = engine.logits(out.main[0])  # [m, V] verification rows
            if processors.active(cfg):  # row i sees the context before the root (output[-1]) + its own path
                logits = processors.apply(cfg, logits, self.prompt_ids + self.output[:-1], survivors)
            verdict = (verify_greedy(survivors, logits) if cfg.sampling.greedy
                       else verify_sampling(survivors, logits, cfg.sampling, self.generator))
            last = verdict.path[-1]
        t1 = time.perf_counter()
        if use_streams:  # 5. the accepted node's streams are the next draft
            carrier_idx = 0 if prefill else last
            self.drafter.observe_streams(engine.draft_logits(out.streams[0, carrier_idx]))
        if self.drafter.uses_main_hidden:  # heads on the accepted node's final main hidden state (Medusa)
            self.drafter.observe_main_hidden(out.main[0, last])
        t2 = time.perf_counter()
        # cache rows to keep: bottom layers saw the whole tree, the top layers only the survivors
        birth = self.streams.cfg.birth_layer if use_streams else len(self.cache.keys)
        top_idx = torch.tensor(verdict.path, device=engine.device)
        bottom_idx = torch.tensor([keep[i] for i in verdict.path], device=engine.device)
        self.cache.commit([(0, birth, bottom_idx[None]), (birth, len(self.cache.keys), top_idx[None])])
        log = _StepLog(tree, keep, [keep[i] for i in verdict.path], verdict.bonus, (out.rows_bottom, out.rows_top),
                       {"verify": (t1 - t0) * 1e3, "draft": (t2 - t1) * 1e3})
        if capture:
            log.attention = self._attention_maps(out, carrier_idx, survivors.path_to(last), survivors, start)
        log.times["accept"] = (time.perf_counter() - t2) * 1e3
        return log

    def _select(self, tree: Tree, h_birth: torch.Tensor) -> torch.Tensor:
        """Pruning layer: early-exit transition probabilities p(child | parent) at layer N−Ns."""
        parents = sorted({p for p in tree.parents if p >= 0})
        row_of = {p: r for r, p in enumerate(parents)}
        hidden = msa.prune_hidden(self.engine.model, self.streams, h_birth[0, parents])
        logp = self.engine.logits(hidden).float().log_softmax(dim=-1)  # [parents, V]
        idx_rows = torch.tensor([row_of[p] for p in tree.parents[1:]], device=logp.device)
        idx_toks = torch.tensor(tree.tokens[1:], device=logp.device)
        trans = [1.0] + logp[idx_rows, idx_toks].exp().tolist()  # host sync: the kept set sizes the pass
        return torch.tensor(prune_by_threshold(tree, trans, self.cfg.prune_threshold), device=h_birth.device)

    def _accept(self, log: _StepLog) -> list[int]:
        # the prefill emits only its bonus; a tree step emits the accepted drafts (the root was
        # emitted by the previous step) and its bonus
        new = [] if self.forward_passes == 0 else [log.tree.tokens[i] for i in log.path[1:]]
        if self.streams is not None:
            birth, ns = self.streams.cfg.birth_layer, self.streams.cfg.n_stream_layers
            self.rows_total += (log.rows[0] * birth + log.rows[1] * ns) // (birth + ns)
        else:
            self.rows_total += log.rows[0]
        if self.forward_passes > 0:
            for depth in range(1, len(log.path)):
                if depth - 1 < len(self.depth_hits):
                    self.depth_hits[depth - 1] += 1
        self.pending = log.bonus
        emitted = self._emit(new + [log.bonus])
        if self.trace is not None:
            self._trace_step(log, emitted)
        return emitted

    # ---- traces ------------------------------------------------------------------------------
    def _trace_step(self, log: _StepLog, emitted: list[int]) -> None:
        text = self.engine.token_text
        kept, accepted = set(log.keep), set(log.path)
        prefill = self.forward_passes == 0
        if prefill:  # show the prompt pass as a single root: the prompt's last token
            nodes = [{"id": 0, "token": log.tree.tokens[-1], "text": text(log.tree.tokens[-1]), "parent": -1,
                      "depth": 0, "prob": 1.0, "pruned": False, "accepted": True}]
            accepted_ids = [0]
        else:
            nodes = [{"id": i, "token": t, "text": text(t), "parent": log.tree.parents[i], "depth": log.tree.depths[i],
                      "prob": round(log.tree.probs[i], 5), "pruned": i not in kept, "accepted": i in accepted}
                     for i, t in enumerate(log.tree.tokens)]
            accepted_ids = list(log.path)
        self.trace["steps"].append({
            "index": len(self.trace["steps"]), "prefix_len": self.cache.lengths[0] - len(log.path),
            "nodes": nodes, "accepted": accepted_ids,
            "bonus": {"token": log.bonus, "text": text(log.bonus)}, "emitted": list(emitted),
            "rows": {"bottom": log.rows[0], "top": log.rows[1]},
            "time_ms": {k: round(v, 3) for k, v in log.times.items()}, "attention": log.attention,
        })

    def _attention_maps(self, out, carrier: int, path: list[int], survivors: Tree, start: int) -> dict:
        """Each stream row of the accepted node over the context it sees and its sibling streams.

        Key columns: the latest `attention_context` tokens the node sees (cached prefix, then the
        accepted path's main rows), then its γ streams.
        """
        gamma = out.streams.shape[2]  # the streams this pass ran
        m = out.main.shape[1]
        rows = [m + carrier * gamma + j for j in range(gamma)]
        context = self.prompt_ids + self.output[:-1]
        seen = [(i, context[i]) for i in range(start)] + [(start + i, survivors.tokens[i]) for i in path]
        seen = seen[-self.cfg.attention_context:]
        cols = [k for k, _ in seen] + [start + r for r in rows]
        labels = [self.engine.token_text(t) for _, t in seen] + [f"⟨s{j + 1}⟩" for j in range(gamma)]
        heads = list(self.cfg.attention_heads) or None
        layers = {}
        for li, weights in out.attention.items():
            w = weights[0][:, rows][:, :, cols].float()  # [H, γ, cols]
            if heads:
                w = w[heads]
            layers[str(li)] = [[[round(x, 4) for x in row] for row in head] for head in w.tolist()]
        return {"layers": layers, "heads": heads or list(range(len(next(iter(layers.values()), [])))),
                "columns": labels, "context_len": len(seen)}

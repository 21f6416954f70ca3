"""What a decoding is asked to do (`DecodeConfig`, validated once, here) and what it returns (`Result`).
The loop itself is `loop.py`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from specstream_core.errors import SpecstreamError

MAX_NEW_TOKENS = 4096
MAX_SEED = 2**63 - 1
MAX_LOOKUP = 32
NODE_BUDGET = 64  # most tree nodes per step where neither the caller nor the stream set says
# The draft settings: None means "the stream set's recommendation" (the fastest measured on its model,
# `Engine.recommended_decode`), filled in by `Engine.settle` before a decoding starts.
DRAFT_FIELDS = ("tree_topk", "prune_threshold", "node_budget", "lookup", "ngrams")
# where the stream set records none: a 4-deep chain (the cheapest tree on a CPU), no pruning, no prompt lookup
DRAFT_FALLBACK = {"tree_topk": (1, 1, 1, 1), "prune_threshold": 0.0, "node_budget": NODE_BUDGET, "lookup": 0,
                  "ngrams": False}


def decode_fields(stored: dict, precision: str | None = None) -> dict:
    """A stream set's recorded draft (its config's extra["decode"]: topk, prune_threshold, node_budget,
    lookup, ngrams) as DecodeConfig fields, for `DecodeConfig.settled`; what it does not record is left out.
    The fastest draft depends on what a wider pass costs, so a record may hold a precision's own settings
    (extra["decode"]["precisions"][precision]), which override the general ones at that precision. A precision
    with a host variant ("bf16+amx": bf16 on AMX tiles, `rowinv.draft_precision`) takes that variant's record
    where there is one, else its precision's."""
    precisions = stored.get("precisions") or {}
    own = (precisions.get(precision) or precisions.get(precision.split("+")[0])) if precision else None
    if isinstance(own, dict):
        stored = {**stored, **own}
    out = {"tree_topk": tuple(stored["topk"])} if stored.get("topk") else {}
    for key, kind in (("prune_threshold", float), ("node_budget", int), ("lookup", int), ("ngrams", bool)):
        if stored.get(key) is not None:
            out[key] = kind(stored[key])
    return out



@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

@dataclass(frozen=True)
class DecodeConfig:
    mode: str = "ss"  # ar | ss
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    # the draft (None: the stream set's recommendation, see DRAFT_FIELDS)
    tree_topk: tuple[int, ...] | None = None  # candidates per depth (stream j gives depth j)
    prune_threshold: float | None = None  # drop subtrees whose transition probability is below this
    node_budget: int | None = None  # most tree nodes per step (root included)
    lookup: int | None = None  # most prompt-lookup tokens grafted onto the streams' tree (0 = streams only)
    ngrams: bool | None = None  # copy from the stream set's n-gram store where the context has no longer match
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
        self._check_draft()
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

    def _check_draft(self) -> None:
        if self.tree_topk is not None and (not self.tree_topk or any(k < 1 or k > 16 for k in self.tree_topk)):
            raise SpecstreamError(f"per-depth top-k values must be between 1 and 16, got {list(self.tree_topk)}")
        if self.prune_threshold is not None and not 0.0 <= self.prune_threshold < 1.0:
            raise SpecstreamError(f"prune threshold must be in [0, 1), got {self.prune_threshold}")
        if self.node_budget is not None and not 1 <= self.node_budget <= 512:
            raise SpecstreamError(f"node budget must be between 1 and 512, got {self.node_budget}")
        if self.lookup is not None and (isinstance(self.lookup, bool) or not isinstance(self.lookup, int)
                                        or not 0 <= self.lookup <= MAX_LOOKUP):
            raise SpecstreamError(f"lookup must be an integer between 0 (off) and {MAX_LOOKUP}, got {self.lookup!r}")
        if self.ngrams is not None and not isinstance(self.ngrams, bool):
            raise SpecstreamError(f"ngrams must be True, False or None (the stream set's choice), got {self.ngrams!r}")

    def settled(self, recommended: dict) -> "DecodeConfig":
        """This config with every draft setting left None taken from `recommended` (DecodeConfig fields),
        else from DRAFT_FALLBACK."""
        fill = {k: recommended.get(k, DRAFT_FALLBACK[k]) for k in DRAFT_FIELDS if getattr(self, k) is None}
        return replace(self, **fill) if fill else self

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
    stats: dict  # forward_passes, new_tokens, ..., and "equals": what the output equals (`exactness.label`)
    trace: dict | None = None

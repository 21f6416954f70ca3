"""The race's lanes: the decoding methods a visitor may race against plain decoding, what each needs, and the
decoding each one runs. Every lane decodes the same prompt on the same engine through the one verifier; only the
draft differs, so at greedy every lane's output is plain decoding's (the precision's label says what that equals).

    plain      plain decoding: the referent every lane is checked against (always raced)
    fast       speculative streaming with the stream set's fastest measured draft (the settings' draft)
    teaching   speculative streaming with the streams' own tree (top-k 4,3,2,1 down the streams, no prompt
               lookup, no pruning): every stream's proposals and attention show
    lookup     prompt lookup: n-gram copies from the context, no parameters
    medusa     Medusa heads on the final hidden state (a spec's `medusa` folder)
    assisted   assisted generation: the layer draft proposes a chain (a spec's `draft` folder)

A lane whose assets are missing is offered disabled, with the reason (`unavailable`); one that fails to load
is left out of the race with its reason (`start_lanes`), never an error.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import replace

import torch

from specstream_core.decoding.config import NODE_BUDGET, DecodeConfig
from specstream_core.decoding.tree import cartesian_size

log = logging.getLogger("specstream.lab")

LABELS = {"plain": "Plain decoding", "fast": "Speculative streaming · fastest draft",
          "teaching": "Speculative streaming · teaching draft", "lookup": "Prompt lookup",
          "medusa": "Medusa heads", "assisted": "Assisted generation · layer draft"}
SHORT = {"plain": "plain", "fast": "SS fastest", "teaching": "SS teaching", "lookup": "prompt lookup",
         "medusa": "Medusa", "assisted": "assisted"}
DEFAULT = ("plain", "fast")
STREAM_LANES = ("fast", "teaching")  # lanes whose passes carry stream rows (and so stream attention)
LOOKUP_TOKENS = 10  # prompt lookup's most copied tokens (as `bench`'s pld)
TEACHING_DEPTH = 4  # the teaching tree's depths: top-k 4,3,2,1 (fewer where the set has fewer streams)
# its most likely nodes kept: every depth still drafted, at about half the full tree's pass cost (on the default model
# at int4-a8 the full 65-node tree costs ~0.22 s a pass on one core, plain decoding ~0.013 s)
TEACHING_BUDGET = 32


def keys(lanes) -> list[str]:
    """The visitor's lanes as known keys in the page's order, plain first and always (the referent)."""
    chosen = set(lanes or ()) | {"plain"}
    return [k for k in LABELS if k in chosen]


def teaching_config(cfg: DecodeConfig, gamma: int) -> DecodeConfig:
    """The streams' own tree: k = depth..1 down the first `depth` streams, its TEACHING_BUDGET most likely nodes, no
    pruning and no copies, so each stream's proposals are in every pass."""
    depth = max(1, min(TEACHING_DEPTH, gamma))
    topk = tuple(range(depth, 0, -1))
    return replace(cfg, tree_topk=topk, prune_threshold=0.0, node_budget=min(TEACHING_BUDGET, cartesian_size(topk)),
                   lookup=0, ngrams=False)


def draft_line(cfg: DecodeConfig) -> str:
    """A draft's settings in one line (the page says which draft is which)."""
    topk = ",".join(map(str, cfg.tree_topk or ()))
    out = f"top-k {topk} within {cfg.node_budget} nodes"
    if cfg.lookup:
        out += f" + up to {cfg.lookup} copied tokens" + (" (context or n-gram store)" if cfg.ngrams else "")
    if cfg.prune_threshold:
        out += f", pruning below {cfg.prune_threshold:g}"
    return out


def unavailable(spec, streams: bool | None = None) -> dict[str, str]:
    """{lane: why it cannot race on this model}, from the spec's folders (nothing is loaded). streams: whether the
    engine has speculative streams (None: the spec's stream folders decide; a model without folders races fresh,
    untrained streams)."""
    out = {}
    if streams is False:
        out.update({k: "this model has no speculative streams" for k in STREAM_LANES})
    medusa = getattr(spec, "medusa", "") or ""
    if not (medusa and os.path.isfile(os.path.join(medusa, "medusa_config.json"))):
        out["medusa"] = "no Medusa heads are trained for this model on this host"
    draft = getattr(spec, "draft", "") or ""
    if not (draft and os.path.isdir(draft)):
        out["assisted"] = "no layer draft is trained for this model on this host"
    return out


class LaneAssets:
    """What the optional lanes load beside one engine (Medusa heads, the layer draft), once, on first use, under a
    lock; a failed load is remembered as the lane's reason. Lives as long as its engine (`EngineCache`)."""

    def __init__(self, spec=None):
        self.spec = spec
        self._loaded: dict[str, object] = {}
        self._failed: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, lane: str, engine):
        """The lane's asset; raises LookupError(reason) where it cannot race."""
        why = unavailable(self.spec).get(lane)
        if why:
            raise LookupError(why)
        with self._lock:
            if lane in self._failed:
                raise LookupError(self._failed[lane])
            if lane not in self._loaded:
                try:
                    self._loaded[lane] = self._load(lane, engine)
                except Exception as exc:  # a broken folder costs its lane only
                    log.exception("loading the %s lane's assets failed", lane)
                    self._failed[lane] = f"its assets could not be loaded ({type(exc).__name__})"
                    raise LookupError(self._failed[lane]) from None
            return self._loaded[lane]

    def _load(self, lane: str, engine):
        import warnings

        if lane == "medusa":
            from specstream_core.model.medusa_heads import MedusaHeads, recommended_topk

            heads = MedusaHeads.load(self.spec.medusa, engine.model)
            with torch.inference_mode():  # warm-up: a first call pays one-off costs that would land in the race
                heads(torch.zeros(heads.cfg.hidden_size, device=engine.device))
            return heads, recommended_topk(self.spec.medusa) or (1,) * heads.cfg.num_heads
        from specstream_core.model.layer_draft import load_assistant

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            draft, _ = load_assistant(self.spec.draft, self.spec.base, str(engine.device))
        with torch.inference_mode():
            draft(input_ids=torch.zeros(1, 4, dtype=torch.long, device=engine.device))
        return draft


def assets_of(engine) -> LaneAssets:
    """The engine's lane assets (`EngineCache` gives each engine its spec's; a bare engine gets none)."""
    assets = getattr(engine, "lane_assets", None)
    if assets is None:
        assets = engine.lane_assets = LaneAssets()
    return assets


def lane_config(lane: str, engine, cfg: DecodeConfig) -> DecodeConfig:
    """The DecodeConfig a lane decodes with (traced, no attention capture: that is done off the clock)."""
    if lane == "plain":
        return replace(cfg, mode="ar", trace=False, attention_layers=())
    if lane in STREAM_LANES and engine.streams is None:
        raise LookupError("this model has no speculative streams")
    ss = engine.settle(replace(cfg, mode="ss", trace=True, attention_layers=()))
    if lane == "teaching":
        return teaching_config(ss, engine.streams.cfg.gamma)
    return ss


def drafter(lane: str, engine, cfg: DecodeConfig):
    """The lane's drafter (None: the config's default, the streams' or plain decoding's)."""
    if lane in ("plain", *STREAM_LANES):
        return None
    if lane == "lookup":
        from specstream_core.decoding.drafters import PromptLookupDrafter

        return PromptLookupDrafter(num_tokens=LOOKUP_TOKENS)
    if lane == "medusa":
        from specstream_core.decoding.drafters.medusa import MedusaDrafter

        heads, topk = assets_of(engine).get("medusa", engine)
        return MedusaDrafter(heads, engine.logits, topk, NODE_BUDGET)
    from specstream_core.decoding.drafters.assistant import AssistantDrafter

    return AssistantDrafter(assets_of(engine).get("assisted", engine))


def start_lanes(engine, prompt, cfg: DecodeConfig, lanes) -> tuple[dict, dict[str, str]]:
    """({lane: (its DecodeConfig, its step-wise decoding)} in the page's order, {lane left out: why})."""
    runs, skipped = {}, {}
    for lane in keys(lanes):
        try:
            lcfg = lane_config(lane, engine, cfg)
            own = drafter(lane, engine, lcfg)
            runs[lane] = (lcfg, engine.start(prompt, lcfg) if own is None else engine.start(prompt, lcfg, own))
        except LookupError as exc:
            skipped[lane] = str(exc.args[0] if exc.args else exc)
    return runs, skipped


def shown_lane(lanes) -> str | None:
    """The lane the per-pass views follow by default: the fastest draft, else the first speculative lane."""
    speculative = [k for k in lanes if k != "plain"]
    return "fast" if "fast" in speculative else (speculative[0] if speculative else None)

"""What the lab promises a host (docs/LAB.md, "Limits"), read once from the environment, and the checks
of what a visitor sends (prompt, settings) against them."""

from __future__ import annotations

import logging
import math
import os

from specstream_core.decoding.config import DecodeConfig, parse_topk
from specstream_core.decoding.trace import MAX_TRACE_BYTES
from specstream_core.errors import SpecstreamError

from .lanes import LABELS as LANES, keys as lane_keys

log = logging.getLogger("specstream.lab")


def _env_number(name: str, default, kind=int, low=1):
    """A host setting from the environment; a malformed or too small value is logged and ignored."""
    raw = os.environ.get(name, "")
    try:
        value = kind(raw) if raw.strip() else default
    except ValueError:
        log.warning("ignoring %s=%r: not a number; using %s", name, raw, default)
        return default
    if value < low:
        log.warning("ignoring %s=%r: below %s; using %s", name, raw, low, default)
        return default
    return value


# What the lab promises a host (docs/LAB.md, "Limits"): every heavy event is bounded in size, time and
# concurrency, per client too, and what a session keeps is small and expires.
MAX_PROMPT_CHARS = _env_number("SPECSTREAM_MAX_PROMPT_CHARS", 4000)
LAB_MAX_NEW_TOKENS = _env_number("SPECSTREAM_LAB_MAX_NEW_TOKENS", 256)
LAB_MAX_LOOKUP = 16  # prompt-lookup tokens a visitor may graft onto the tree (the slider's range)
CONCURRENCY = _env_number("SPECSTREAM_CONCURRENCY", 2)            # races at once
UPLOAD_CONCURRENCY = _env_number("SPECSTREAM_UPLOAD_CONCURRENCY", 2)  # trace replays at once
QUEUE_SIZE = _env_number("SPECSTREAM_QUEUE_SIZE", 64)
MAX_PER_IP = _env_number("SPECSTREAM_MAX_PER_IP", max(1, CONCURRENCY - 1))  # races (and replays) per address
TRUST_FORWARDED = os.environ.get("SPECSTREAM_TRUST_FORWARDED", "") == "1"  # behind a proxy: X-Forwarded-For
EVENT_TIME_LIMIT_S = _env_number("SPECSTREAM_EVENT_TIME_LIMIT_S", 120.0, float)  # one race
UPLOAD_TIME_LIMIT_S = _env_number("SPECSTREAM_UPLOAD_TIME_LIMIT_S", 10.0, float)  # one replay
MAX_UPLOAD_BYTES = min(MAX_TRACE_BYTES, int(_env_number("SPECSTREAM_MAX_UPLOAD_MB", 8.0, float, 0.001) * 2**20))
TRACE_TTL_S = _env_number("SPECSTREAM_TRACE_TTL_S", 900.0, float)  # a session's trace, after its last update
CACHE_TTL_S = _env_number("SPECSTREAM_CACHE_TTL_S", 900.0, float)  # files served to or uploaded by visitors
MAX_SESSIONS = _env_number("SPECSTREAM_MAX_SESSIONS", 1000)  # sessions Gradio keeps (least recent dropped)
MAX_ENGINES = _env_number("SPECSTREAM_MAX_ENGINES", 2)  # loaded (model, mode) engines
# a multi-lane race counts its lanes: an address holds at most MAX_PER_IP races and LANES_PER_IP lanes at once (as
# many two-lane races as before, or one race of every lane), and a race's lanes share one token budget, what a
# two-lane race of the most new tokens decodes: time and memory per visitor stay those of the two-lane race
MAX_LANES = len(LANES)
LANES_PER_IP = _env_number("SPECSTREAM_LANES_PER_IP", max(MAX_LANES, 2 * MAX_PER_IP))
LANE_TOKENS = _env_number("SPECSTREAM_LANE_TOKENS", 2 * LAB_MAX_NEW_TOKENS)
LIVE_VIEWS_S = 0.5  # the live tree and τ chart redraw at most this often (the texts and table at every view)
LOAD_RETRY_S = _env_number("SPECSTREAM_LOAD_RETRY_S", 300.0, float, 0)  # after a failed load


def lab_decode_config(topk: str, prune: float, budget: float, lookup: float, temperature: float, seed,
                      max_new: float) -> DecodeConfig:
    if max_new is None or not 1 <= int(max_new) <= LAB_MAX_NEW_TOKENS:
        raise SpecstreamError(f"max new tokens must be between 1 and {LAB_MAX_NEW_TOKENS} on this host")
    seed = None if seed in (None, "") else int(seed)
    return DecodeConfig(mode="ss", max_new_tokens=int(max_new), temperature=float(temperature or 0.0),
                        seed=seed, tree_topk=parse_topk(str(topk).replace(" ", "")),
                        prune_threshold=float(prune or 0.0), node_budget=int(budget),
                        lookup=whole_number(lookup, "prompt-lookup tokens", 0, LAB_MAX_LOOKUP), trace=True)


def check_lanes(lanes, max_new) -> list[str]:
    """The visitor's lanes (plain decoding always among them), within the lanes' shared token budget."""
    if lanes is not None and (not isinstance(lanes, (list, tuple)) or len(lanes) > 2 * MAX_LANES
                              or any(lane not in LANES for lane in lanes)):
        raise SpecstreamError(f"lanes must be among {', '.join(LANES)}")
    chosen = lane_keys(lanes if lanes is not None else ("plain", "fast"))
    if len(chosen) < 2:
        raise SpecstreamError("pick at least one lane to race against plain decoding")
    tokens = whole_number(max_new, "max new tokens", 1, LAB_MAX_NEW_TOKENS)
    if len(chosen) * tokens > LANE_TOKENS:
        raise SpecstreamError(f"{len(chosen)} lanes of {tokens} new tokens exceed this host's budget of "
                              f"{LANE_TOKENS} tokens a race; at most {LANE_TOKENS // len(chosen)} new tokens with "
                              f"{len(chosen)} lanes")
    return chosen


def whole_number(value, name: str, lo: int, hi: int) -> int:
    """A visitor's setting as an int in [lo, hi], or one clear error (NaN, text, 2.5, 1e9 included)."""
    try:
        number = float(0 if value is None else value)
    except (TypeError, ValueError):
        raise SpecstreamError(f"{name} must be a number, got {value!r}") from None
    if not (math.isfinite(number) and number == int(number) and lo <= number <= hi):
        raise SpecstreamError(f"{name} must be a whole number between {lo} and {hi}, got {value!r}")
    return int(number)


def check_prompt(prompt) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise SpecstreamError("the prompt is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise SpecstreamError(f"the prompt has {len(prompt)} characters; the limit here is {MAX_PROMPT_CHARS}")
    return prompt


def cache_schedule() -> tuple[int, int]:
    """Blocks(delete_cache=(every, age)): Gradio deletes the files it served or received (trace
    downloads, uploads) once they are CACHE_TTL_S old, checking every few minutes."""
    age = max(1, int(CACHE_TTL_S))
    return max(1, min(300, age // 2)), age

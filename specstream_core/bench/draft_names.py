"""Draft names (`b<nodes>l<copied>[n]`, `streams`, `default`, `/k<top-k>`): plain data and parsing, so the command
line can describe and check them without importing torch. `bench/draft_replay.py` replays them."""

from __future__ import annotations

import re

from specstream_core.errors import SpecstreamError

DRAFT = re.compile(r"^(?:b(\d+)l(\d+)(n?)|streams|default)(?:/k(\d+))?$")
DRAFT_HELP = ("default (the stream set's recommended draft), b<nodes>l<copied tokens>[n] (one stream tree plus up to "
              "that many tokens copied from the context, n: or from the n-gram store, within that many nodes), or "
              "streams (the streams' tree alone); /k<top-k per depth> sets the streams' tree, e.g. b6l5n/k21")


def parse_draft(name: str) -> re.Match:
    """A draft name's parts (`DRAFT_HELP`), or one clear error."""
    m = DRAFT.match(name)
    if not m:
        raise SpecstreamError(f"draft {name!r}: expected {DRAFT_HELP}")
    if m[4] and any(c == "0" for c in m[4]):
        raise SpecstreamError(f"draft {name!r}: every top-k must be at least 1")
    return m

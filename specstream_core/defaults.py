"""Where the bundled model lives, and what to use when no model is named."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(ROOT, "assets")
BASE_DIR = os.path.join(ASSETS, "base")
LOSSLESS_DIR = os.path.join(ASSETS, "streams-lossless")
SHARED_DIR = os.path.join(ASSETS, "streams-shared")
NS2_DIR = os.path.join(ASSETS, "ablation", "streams-lossless-ns2")  # the Ns ablation's second stream set


def bundled_available() -> bool:
    return os.path.isfile(os.path.join(BASE_DIR, "config.json"))


def resolve(base: str | None, streams: str | None) -> tuple[str, str | None]:
    """(base, streams) with the bundled model filled in when no base is named."""
    from .errors import SpecstreamError

    if base:
        return base, streams
    if not bundled_available():
        raise SpecstreamError("no --base given and the bundled model is missing from assets/base")
    if streams is None and os.path.isdir(LOSSLESS_DIR):
        streams = LOSSLESS_DIR
    return BASE_DIR, streams

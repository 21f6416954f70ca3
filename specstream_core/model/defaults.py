"""What to use when no model is named: SmolLM2-135M-Instruct (`default_model`) and the stream sets
the project trained for it (`assets/smollm2/`).

The first, 9.4M-parameter model trained from scratch has left `assets/` (it is in git history at
commit d72bd7c, and `scripts/build_bundled.sh` rebuilds it); any model directory still loads by path."""

from __future__ import annotations

import os
from specstream_core.model import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
ASSETS = os.path.join(ROOT, "assets")

# what the project trained for the default model
SMOL_ASSETS = os.path.join(ASSETS, "smollm2")
SMOL_LOSSLESS_DIR = os.path.join(SMOL_ASSETS, "streams-lossless")
SMOL_SHARED_DIR = os.path.join(SMOL_ASSETS, "streams-shared")
SMOL_MEDUSA_DIR = os.path.join(SMOL_ASSETS, "medusa")
SMOL_TRACES_DIR = os.path.join(SMOL_ASSETS, "traces")


def default_streams(mode: str = "lossless") -> str | None:
    directory = SMOL_LOSSLESS_DIR if mode == "lossless" else SMOL_SHARED_DIR
    return directory if os.path.isfile(os.path.join(directory, "streams_config.json")) else None


def resolve(base: str | None, streams: str | None, progress=None) -> tuple[str, str | None]:
    """(base, streams): the default model and its lossless streams filled in when no base is named.

    Resolution order of the default base: `default_model.resolve_default_base` (a host override, the
    converted copy, the installed package, then the hub id)."""
    if base:
        return base, streams
    base = default_model.resolve_default_base(progress=progress)
    if streams is None:
        streams = default_streams("lossless")
    return base, streams

"""What to use when no model is named: SmolLM2-135M-Instruct (`default_model`) and the stream sets
the project trained for it (`assets/smollm2/`).

The 9.4M-parameter model trained from scratch (`assets/base`) is no longer a default; it is still
loadable by path (`--base assets/base`)."""

from __future__ import annotations

import os
from specstream_core.model import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
ASSETS = os.path.join(ROOT, "assets")
BASE_DIR = os.path.join(ASSETS, "base")
LOSSLESS_DIR = os.path.join(ASSETS, "streams-lossless")
SHARED_DIR = os.path.join(ASSETS, "streams-shared")
NS2_DIR = os.path.join(ASSETS, "ablation", "streams-lossless-ns2")  # the Ns ablation's second stream set


# what the project trained for the default model
SMOL_ASSETS = os.path.join(ASSETS, "smollm2")
SMOL_LOSSLESS_DIR = os.path.join(SMOL_ASSETS, "streams-lossless")
SMOL_SHARED_DIR = os.path.join(SMOL_ASSETS, "streams-shared")
SMOL_MEDUSA_DIR = os.path.join(SMOL_ASSETS, "medusa")
SMOL_TRACES_DIR = os.path.join(SMOL_ASSETS, "traces")


def bundled_available() -> bool:
    """The old 9.4M from-scratch model (kept loadable by path; not a default)."""
    return os.path.isfile(os.path.join(BASE_DIR, "config.json"))


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

"""specstream_core — Speculative Streaming (multi-stream attention) on Hugging Face causal LMs.

    from specstream_core import DecodeConfig, Engine

The names below load on first use (PEP 562), so that the command line answers `--help` without importing torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {  # name -> the module that defines it
    "DecodeConfig": "specstream_core.decoding.config",
    "Result": "specstream_core.decoding.config",
    "Engine": "specstream_core.decoding.engine",
    "SpecstreamError": "specstream_core.errors",
    "StreamConfig": "specstream_core.model.streams",
    "StreamParams": "specstream_core.model.streams",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'specstream_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

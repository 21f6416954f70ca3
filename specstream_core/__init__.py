"""specstream_core — Speculative Streaming (multi-stream attention) on Hugging Face causal LMs."""

from .decode import DecodeConfig, Result
from .engine import Engine
from .errors import SpecstreamError
from .streams import StreamConfig, StreamParams

__all__ = ["DecodeConfig", "Engine", "Result", "SpecstreamError", "StreamConfig", "StreamParams"]
__version__ = "0.1.0"

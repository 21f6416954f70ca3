"""specstream_core — Speculative Streaming (multi-stream attention) on Hugging Face causal LMs."""

from specstream_core.decoding.config import DecodeConfig, Result
from specstream_core.decoding.engine import Engine
from specstream_core.errors import SpecstreamError
from specstream_core.model.streams import StreamConfig, StreamParams

__all__ = ["DecodeConfig", "Engine", "Result", "SpecstreamError", "StreamConfig", "StreamParams"]
__version__ = "0.1.0"

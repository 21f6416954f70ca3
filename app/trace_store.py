"""Recorded traces kept on the server for share links (`?trace=<id>`): a bounded store, in memory.

Only a validated trace goes in (`traces.checked`: the engine's schema and Limits, like an upload), kept
packed (`Trace.pack`: compressed, a fraction of the JSON). The store holds at most `max_traces` traces and
`max_bytes` packed bytes; past either, the least recently shared or opened go first. Sharing the same trace
again gives its link again (no second copy). An id is 16 random URL-safe characters (96 bits from
`secrets`), checked against that form before any lookup. Links last until the store drops the trace or the
server restarts.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
from collections import OrderedDict

from specstream_core.decoding.trace import Trace
from specstream_core.errors import SpecstreamError

from .limits import MAX_UPLOAD_BYTES, _env_number
from .traces import checked

ID_FORM = re.compile(r"[A-Za-z0-9_-]{16}")
MAX_SHARED_TRACES = _env_number("SPECSTREAM_SHARED_TRACES", 200)  # traces kept for share links
MAX_SHARED_BYTES = int(_env_number("SPECSTREAM_SHARED_MB", 64.0, float, 0.001) * 2**20)  # their packed bytes


def valid_id(trace_id) -> bool:
    return isinstance(trace_id, str) and ID_FORM.fullmatch(trace_id) is not None


class TraceStore:
    """id -> packed trace, bounded in count and bytes; thread-safe (Gradio runs handlers on threads)."""

    def __init__(self, max_traces: int = MAX_SHARED_TRACES, max_bytes: int = MAX_SHARED_BYTES,
                 max_trace_bytes: int = MAX_UPLOAD_BYTES):
        self.max_traces, self.max_bytes = max(1, int(max_traces)), max(1, int(max_bytes))
        self.max_trace_bytes = min(int(max_trace_bytes), self.max_bytes)
        self._blobs: OrderedDict[str, bytes] = OrderedDict()  # least recently used first
        self._ids: dict[bytes, str] = {}  # digest -> id
        self._digests: dict[str, bytes] = {}  # id -> digest
        self._lock = threading.Lock()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._blobs)

    def put(self, trace) -> str:
        """Keep a trace (validated here unless it is a `Trace` already) and return its id. Raises
        SpecstreamError for an invalid trace or one larger than a stored trace may be."""
        trace = checked(trace)
        blob = trace.pack()
        if len(blob) > self.max_trace_bytes:
            raise SpecstreamError(f"this trace is too large to share here ({len(blob) / 2**20:.1f} MB packed; "
                                  f"the limit is {self.max_trace_bytes / 2**20:.1f} MB)")
        # the trace's content, not its packing (marshal's bytes depend on which objects are shared)
        digest = hashlib.sha256(json.dumps(trace, sort_keys=True, separators=(",", ":")).encode()).digest()
        with self._lock:
            if digest in self._ids:
                trace_id = self._ids[digest]
                self._blobs.move_to_end(trace_id)
                return trace_id
            trace_id = secrets.token_urlsafe(12)
            while trace_id in self._blobs:  # 96 random bits: never in practice
                trace_id = secrets.token_urlsafe(12)
            self._blobs[trace_id] = blob
            self._ids[digest], self._digests[trace_id] = trace_id, digest
            self.bytes += len(blob)
            while len(self._blobs) > self.max_traces or self.bytes > self.max_bytes:
                self._drop(next(iter(self._blobs)))
            return trace_id

    def get(self, trace_id) -> Trace:
        """The trace behind a share link. Raises SpecstreamError for a malformed or unknown id."""
        if not valid_id(trace_id):
            raise SpecstreamError("this is not a valid trace link")
        with self._lock:
            blob = self._blobs.get(trace_id)
            if blob is None:
                raise SpecstreamError("this shared trace is no longer kept on this server (links last until "
                                      "newer shares replace them or the server restarts)")
            self._blobs.move_to_end(trace_id)
        return Trace.unpack(blob)

    def _drop(self, trace_id: str) -> None:
        self.bytes -= len(self._blobs.pop(trace_id))
        del self._ids[self._digests.pop(trace_id)]

"""Per-step traces of a decoding run: JSON-serialisable, versioned, validated on load.

Schema (version 1) — see docs/TRACE.md:
{
  "schema": "specstream-trace", "version": 1,
  "meta":   {"model": str, "mode": "ar"|"ss", "gamma": int, "n_stream_layers": int, "topk": [int],
             "prune_threshold": float, "node_budget": int, "temperature": float, "seed": int|null, ...},
  "prompt": {"text": str, "token_ids": [int]},
  "steps":  [ {
      "index": int,                      # 0 = the prefill pass
      "prefix_len": int,                 # tokens in the cache before this pass
      "nodes": [ {"id": int, "token": int, "text": str, "parent": int, "depth": int,
                  "prob": float, "pruned": bool, "accepted": bool} ],
      "accepted": [int],                 # accepted node ids, root first
      "bonus": {"token": int, "text": str},
      "emitted": [int],                  # tokens this pass added to the output (after stops)
      "rows": {"bottom": int, "top": int},
      "time_ms": {"draft": float, "verify": float, "accept": float},
      "attention": null | {"layers": {"<layer>": [[[float]]]},   # [head][stream][column]
                           "heads": [int], "columns": [str], "context_len": int}
  } ],
  "output": {"text": str, "token_ids": [int]},
  "stats":  {"forward_passes": int, "new_tokens": int, "mean_accepted": float, "wall_s": float, ...}
}
"""

from __future__ import annotations

import json
import os

from .errors import SpecstreamError

SCHEMA = "specstream-trace"
VERSION = 1
MAX_TRACE_BYTES = 20 * 1024 * 1024


def new_trace(meta: dict, prompt_text: str, prompt_ids: list[int]) -> dict:
    return {"schema": SCHEMA, "version": VERSION, "meta": meta,
            "prompt": {"text": prompt_text, "token_ids": list(prompt_ids)}, "steps": [],
            "output": {"text": "", "token_ids": []}, "stats": {}}


def save_trace(trace: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(trace, f)


def load_trace(source) -> dict:
    """Read and validate a trace from a path, bytes, str or dict. Raises SpecstreamError with a clear reason."""
    if isinstance(source, dict):
        data = source
    else:
        if isinstance(source, (str, os.PathLike)) and os.path.exists(source):
            size = os.path.getsize(source)
            if size > MAX_TRACE_BYTES:
                raise SpecstreamError(f"trace file is {size / 1e6:.1f} MB; the limit is {MAX_TRACE_BYTES / 1e6:.0f} MB")
            with open(source, "rb") as f:
                raw = f.read()
        elif isinstance(source, (bytes, bytearray)):
            raw = bytes(source)
        else:
            raise SpecstreamError(f"trace file not found: {source}")
        if len(raw) > MAX_TRACE_BYTES:
            raise SpecstreamError(f"trace is {len(raw) / 1e6:.1f} MB; the limit is {MAX_TRACE_BYTES / 1e6:.0f} MB")
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SpecstreamError(f"not a trace file: invalid JSON ({exc})") from None
    validate(data)
    return data


def validate(data) -> None:
    def fail(why: str):
        raise SpecstreamError(f"not a valid specstream trace: {why}")

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        fail("missing schema marker 'specstream-trace'")
    if data.get("version") != VERSION:
        raise SpecstreamError(f"trace version {data.get('version')!r} is not supported (this version reads {VERSION})")
    for key, kind in (("meta", dict), ("prompt", dict), ("steps", list), ("output", dict), ("stats", dict)):
        if not isinstance(data.get(key), kind):
            fail(f"field {key!r} missing or not a {kind.__name__}")
    for i, step in enumerate(data["steps"]):
        if not isinstance(step, dict):
            fail(f"step {i} is not an object")
        nodes = step.get("nodes")
        if not isinstance(nodes, list) or not isinstance(step.get("accepted"), list):
            fail(f"step {i} lacks nodes/accepted lists")
        for node in nodes:
            if not isinstance(node, dict) or not {"id", "token", "parent", "depth"} <= set(node):
                fail(f"step {i} has a malformed node")
            if not isinstance(node["parent"], int) or node["parent"] >= node["id"]:
                fail(f"step {i}: node {node.get('id')} has an invalid parent")
        if any(not isinstance(a, int) or not 0 <= a < len(nodes) for a in step["accepted"]):
            fail(f"step {i}: accepted ids out of range")
        if not isinstance(step.get("time_ms"), dict) or not isinstance(step.get("emitted"), list):
            fail(f"step {i} lacks time_ms/emitted")

"""Per-step traces of a decoding run: JSON-serialisable, versioned, validated on load.

Schema (version 1) — see docs/TRACE.md:
{
  "schema": "specstream-trace", "version": 1,
  "meta":   {"model": str, "mode": "ar"|"ss", "gamma": int, "n_stream_layers": int, "topk": [int],
             "prune_threshold": float, "node_budget": int, "temperature": float, "seed": int|null,
             "equals": str (what the output equals; absent in older traces), ...},
  "prompt": {"text": str, "token_ids": [int]},
  "steps":  [ {
      "index": int,                      # 0 = the prefill pass
      "prefix_len": int,                 # tokens in the cache before this pass
      "nodes": [ {"id": int, "token": int, "text": str, "parent": int, "depth": int,
                  "prob": float, "pruned": bool, "accepted": bool, "copied": bool (optional)} ],
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
import marshal
import math
import os
import zlib
from dataclasses import dataclass

from specstream_core.errors import SpecstreamError
import copy

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


def load_trace(source, max_bytes: int = MAX_TRACE_BYTES) -> "Trace":
    """Read and validate a trace from a path, bytes or dict; returns its compact, checked form (`Trace`).
    Raises SpecstreamError with a clear reason — never RecursionError, MemoryError or a type error."""
    if isinstance(source, dict):
        data = source
    else:
        if isinstance(source, (str, os.PathLike)) and os.path.exists(source):
            size = os.path.getsize(source)
            if size > max_bytes:
                raise SpecstreamError(f"trace file is {size / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB")
            with open(source, "rb") as f:
                raw = f.read(max_bytes + 1)
        elif isinstance(source, (bytes, bytearray)):
            raw = bytes(source)
        else:
            raise SpecstreamError(f"trace file not found: {source}")
        if len(raw) > max_bytes:
            raise SpecstreamError(f"trace is {len(raw) / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB")
        try:
            data = json.loads(raw)
        except RecursionError:  # the C parser recurses once per nesting level
            raise SpecstreamError(f"not a valid specstream trace: JSON nested deeper than {LIMITS.nesting} "
                                  "levels") from None
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, and ints over 4300 digits
            raise SpecstreamError(f"not a trace file: invalid JSON ({_clip(str(exc), 120)})") from None
    return validate(data)


# ---- validation -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """What a trace may hold. Generous for any real run (the lab's races: γ ≤ 8, ≤ 256 tokens, node budget
    ≤ 128); each cap keeps the work of every figure bounded (the mask grows with (nodes·γ)², the tree
    and acceptance figures with depth and node count)."""
    gamma: int = 16
    depth: int = 32               # node depth (stream index); also accepted path and emitted tokens per pass
    steps: int = 4096
    nodes_per_step: int = 1024
    nodes: int = 200_000          # all steps together
    tokens: int = 100_000         # prompt / output token ids
    text_chars: int = 200_000     # prompt / output text
    label_chars: int = 256        # token texts, column labels, meta strings
    attention_layers: int = 64
    attention_heads: int = 64
    attention_columns: int = 512
    attention_values: int = 2_000_000  # all attention weights of the trace
    big_int: int = 2**53          # counts, ids, sizes
    nesting: int = 8              # the schema's own depth: steps → step → attention → layers → [head][stream][col]


LIMITS = Limits()
META_STR = ("model", "precision", "device", "stream_mode", "equals")
META_INT = ("n_stream_layers", "num_layers", "node_budget", "top_k", "max_new_tokens", "no_repeat_ngram_size",
            "lookup")
META_NUM = {"prune_threshold": (0.0, 1.0), "temperature": (0.0, 100.0), "top_p": (0.0, 1.0),
            "repetition_penalty": (0.0, 1000.0)}
STAT_INT = ("forward_passes", "new_tokens", "rows_processed")
STAT_NUM = ("mean_accepted", "wall_s", "tokens_per_s")
TIME_KEYS = ("draft", "verify", "accept")


class Trace(dict):
    """A trace that passed `validate`: its compact form (schema fields only, values of the schema's
    types and ranges, strings valid UTF-8). JSON cannot produce this class, so `checked` callers may
    skip re-validating it; mutate a copy (`copy.deepcopy` gives a plain dict) and validate again."""

    def __deepcopy__(self, memo):
        return copy.deepcopy(dict(self), memo)

    def pack(self) -> bytes:
        """How a session keeps its trace: compressed, a fraction of the file's size (the parsed objects
        take 6-13x it). marshal (plain dicts, lists, strings and numbers only) is 10x faster than JSON
        both ways; the blob never leaves the server process."""
        return zlib.compress(marshal.dumps(dict(self)), 1)

    @classmethod
    def unpack(cls, blob: bytes) -> "Trace":
        """The inverse of `pack`; trusted, as only `pack` of a validated trace in this process makes one."""
        return cls(marshal.loads(zlib.decompress(blob)))


def validate(data) -> Trace:
    """Check a trace against the schema and the Limits; returns its compact form (a new `Trace`).

    Every field the lab reads is type- and range-checked (ints are ints, numbers finite, counts within
    Limits) before anything loops over it; unknown fields are dropped, so nothing nested deeper than the
    schema survives. Iterative throughout. Raises SpecstreamError naming the first problem."""
    if isinstance(data, Trace):
        return data
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        _fail("missing schema marker 'specstream-trace'")
    if data.get("version") != VERSION or isinstance(data.get("version"), bool):
        version = data.get("version")
        shown = repr(version) if isinstance(version, (int, float, type(None))) else "of another kind"
        raise SpecstreamError(f"trace version {_clip(shown, 40)} is not supported (this version reads {VERSION})")
    for key, kind in (("meta", dict), ("prompt", dict), ("steps", list), ("output", dict), ("stats", dict)):
        if not isinstance(data.get(key), kind):
            _fail(f"field {key!r} missing or not a {kind.__name__}")
    L = LIMITS
    meta = _meta(data["meta"])
    if len(data["steps"]) > L.steps:
        _fail(f"{len(data['steps'])} steps; the limit is {L.steps}")
    budget = {"nodes": L.nodes, "attention": L.attention_values}
    steps = [_step(step, i, budget) for i, step in enumerate(data["steps"])]
    return Trace(schema=SCHEMA, version=VERSION, meta=meta, prompt=_text_block(data["prompt"], "prompt"),
                 steps=steps, output=_text_block(data["output"], "output"), stats=_stats(data["stats"], "stats"))


def _fail(why: str):
    raise SpecstreamError(f"not a valid specstream trace: {why}")


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + "…"


def _int(value, lo: int, hi: int, where: str) -> int:
    if type(value) is not int:  # bool is an int subclass; floats and strings are not ints here
        _fail(f"{where} must be an integer")
    if not lo <= value <= hi:
        _fail(f"{where} must be between {lo} and {hi}")
    return value


def _num(value, lo: float, hi: float, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(f"{where} must be a finite number")
    if not lo <= value <= hi:
        _fail(f"{where} must be between {lo:g} and {hi:g}")
    return value


def _str(value, limit: int, where: str) -> str:
    if not isinstance(value, str):
        _fail(f"{where} must be a string")
    if len(value) > limit:
        _fail(f"{where} is longer than {limit} characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: valid JSON, but no page or file can carry them
            value = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
    return value


def _list(value, limit: int, where: str) -> list:
    if not isinstance(value, list):
        _fail(f"{where} must be a list")
    if len(value) > limit:
        _fail(f"{where} has {len(value)} entries; the limit is {limit}")
    return value


def _opt(value, check, *args):
    return None if value is None else check(value, *args)


def _token_ids(value, where: str) -> list[int]:
    return [_int(t, -1, LIMITS.big_int, f"{where} token id") for t in _list(value, LIMITS.tokens, where)]


def _text_block(block: dict, where: str) -> dict:
    out = {"text": _str(block.get("text", ""), LIMITS.text_chars, f"{where}.text")}
    out["token_ids"] = _token_ids(block.get("token_ids", []), f"{where}.token_ids")
    return out


def _stats(stats: dict, where: str) -> dict:
    out = {}
    for key in STAT_INT:
        if stats.get(key) is not None:
            out[key] = _int(stats[key], 0, LIMITS.big_int, f"{where}.{key}")
    for key in STAT_NUM:
        if stats.get(key) is not None:
            out[key] = _num(stats[key], 0.0, 1e12, f"{where}.{key}")
    if stats.get("depth_acceptance") is not None:
        out["depth_acceptance"] = [_num(x, 0.0, 1.0, f"{where}.depth_acceptance")
                                   for x in _list(stats["depth_acceptance"], LIMITS.depth, f"{where}.depth_acceptance")]
    return out


def _meta(meta: dict) -> dict:
    L = LIMITS
    out = {}
    mode = meta.get("mode")
    if mode not in (None, "ar", "ss"):
        _fail("meta.mode must be 'ar' or 'ss'")
    if mode is not None:
        out["mode"] = mode
    for key in META_STR:
        if meta.get(key) is not None:
            out[key] = _str(meta[key], L.label_chars, f"meta.{key}")
    if meta.get("gamma") is not None:
        out["gamma"] = _int(meta["gamma"], 0, L.gamma, "meta.gamma")
    for key in META_INT:
        if meta.get(key) is not None:
            out[key] = _int(meta[key], 0, L.big_int, f"meta.{key}")
    for key, (lo, hi) in META_NUM.items():
        if meta.get(key) is not None:
            out[key] = _num(meta[key], lo, hi, f"meta.{key}")
    if meta.get("ngrams") is not None:  # copies from the stream set's n-gram store
        out["ngrams"] = _bool(meta["ngrams"], "meta.ngrams")
    if meta.get("seed") is not None:
        out["seed"] = _int(meta["seed"], 0, 2**64 - 1, "meta.seed")
    if meta.get("topk") is not None:
        out["topk"] = [_int(k, 0, L.nodes_per_step, "meta.topk") for k in _list(meta["topk"], L.depth, "meta.topk")]
    base = meta.get("baseline")
    if base is not None:
        if not isinstance(base, dict):
            _fail("meta.baseline must be an object")
        out["baseline"] = {"mode": _str(base.get("mode", "ar"), L.label_chars, "meta.baseline.mode"),
                           "output": _text_block(_dict(base.get("output", {}), "meta.baseline.output"),
                                                 "meta.baseline.output"),
                           "stats": _stats(_dict(base.get("stats", {}), "meta.baseline.stats"), "meta.baseline.stats")}
    lab = meta.get("lab")
    if lab is not None:
        lab, where = _dict(lab, "meta.lab"), "meta.lab"
        out["lab"] = {k: _str(lab[k], L.label_chars, f"{where}.{k}") for k in ("stream_mode", "lane")
                      if lab.get(k) is not None}  # lane: which lane of a multi-lane race this trace is
        if lab.get("elapsed_s") is not None:
            out["lab"]["elapsed_s"] = _num(lab["elapsed_s"], 0.0, 1e9, "meta.lab.elapsed_s")
        if lab.get("pieces") is not None:
            out["lab"]["pieces"] = [_str(p, L.label_chars, "meta.lab.pieces")
                                    for p in _list(lab["pieces"], L.tokens, "meta.lab.pieces")]
        if lab.get("lanes") is not None:  # every lane's result
            out["lab"]["lanes"] = [{"lane": _str(r.get("lane", ""), L.label_chars, where), "stats": _stats(_dict(
                r.get("stats", {}), where), where), "identical": _opt(r.get("identical"), _bool, where)}
                for r in (_dict(r, where) for r in _list(lab["lanes"], 16, "meta.lab.lanes"))]
    return out


def _dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        _fail(f"{where} must be an object")
    return value


def _step(step, i: int, budget: dict) -> dict:
    L = LIMITS
    if not isinstance(step, dict):
        _fail(f"step {i} is not an object")
    nodes, accepted = step.get("nodes"), step.get("accepted")
    if not isinstance(nodes, list) or not isinstance(accepted, list):
        _fail(f"step {i} lacks nodes/accepted lists")
    if not isinstance(step.get("time_ms"), dict) or not isinstance(step.get("emitted"), list):
        _fail(f"step {i} lacks time_ms/emitted")
    _list(nodes, L.nodes_per_step, f"step {i}: nodes")
    budget["nodes"] -= len(nodes)
    if budget["nodes"] < 0:
        _fail(f"more than {L.nodes} nodes in all")
    out_nodes, depths = [], []
    for k, node in enumerate(nodes):
        if not isinstance(node, dict) or not {"id", "token", "parent", "depth"} <= set(node):
            _fail(f"step {i} has a malformed node")
        if type(node["parent"]) is not int or type(node["id"]) is not int or not -1 <= node["parent"] < node["id"]:
            _fail(f"step {i}: node {k} has an invalid parent")
        if node["id"] != k:
            _fail(f"step {i}: node ids must be 0..n-1 in order")
        depth = _int(node["depth"], 0, L.depth, f"step {i}: node {k} depth")
        if depth != (depths[node["parent"]] + 1 if node["parent"] >= 0 else 0):
            _fail(f"step {i}: node {k} depth must be its parent's depth + 1 (0 for a root)")
        depths.append(depth)
        n = {"id": k, "token": _int(node["token"], -1, L.big_int, f"step {i}: node {k} token"),
             "parent": node["parent"], "depth": depth,
             "text": _str(node.get("text", ""), L.label_chars, f"step {i}: node {k} text"),
             "pruned": _bool(node.get("pruned", False), f"step {i}: node {k} pruned"),
             "accepted": _bool(node.get("accepted", False), f"step {i}: node {k} accepted")}
        if node.get("prob") is not None:
            n["prob"] = _num(node["prob"], 0.0, 1.0, f"step {i}: node {k} prob")
        if node.get("copied") is not None:  # prompt lookup's copy grafted onto the tree
            n["copied"] = _bool(node["copied"], f"step {i}: node {k} copied")
        out_nodes.append(n)
    if len(accepted) > L.depth + 1 or any(type(a) is not int or not 0 <= a < len(nodes) for a in accepted):
        _fail(f"step {i}: accepted ids out of range")
    out = {"nodes": out_nodes, "accepted": list(accepted),
           "emitted": [_int(t, -1, L.big_int, f"step {i}: emitted token")
                       for t in _list(step["emitted"], L.depth + 1, f"step {i}: emitted")],
           "time_ms": {k: _num(step["time_ms"].get(k, 0.0), 0.0, 1e9, f"step {i}: time_ms.{k}") for k in TIME_KEYS}}
    out["index"] = _int(step.get("index", i), 0, L.big_int, f"step {i}: index")
    if step.get("prefix_len") is not None:
        out["prefix_len"] = _int(step["prefix_len"], 0, L.big_int, f"step {i}: prefix_len")
    if step.get("bonus") is not None:
        bonus = _dict(step["bonus"], f"step {i}: bonus")
        out["bonus"] = {"token": _int(bonus.get("token", -1), -1, L.big_int, f"step {i}: bonus token"),
                        "text": _str(bonus.get("text", ""), L.label_chars, f"step {i}: bonus text")}
    if step.get("rows") is not None:
        rows = _dict(step["rows"], f"step {i}: rows")
        out["rows"] = {k: _int(rows.get(k, 0), 0, L.big_int, f"step {i}: rows.{k}") for k in ("bottom", "top")}
    out["attention"] = _attention(step.get("attention"), i, budget)
    return out


def _weights(row: list, where: str) -> list:
    """A row of attention weights: numbers in [0, 1] (checked at C speed: up to millions of them)."""
    if row and (not set(map(type, row)) <= {float, int} or not math.isfinite(sum(row))
                or min(row) < 0.0 or max(row) > 1.001):
        _fail(f"{where}: weights must be numbers between 0 and 1")
    return list(row)


def _bool(value, where: str) -> bool:
    if not isinstance(value, bool):
        _fail(f"{where} must be true or false")
    return value


def _attention(att, i: int, budget: dict) -> dict | None:
    """{layers: {"<layer>": [head][stream][column]}, heads, columns, context_len}: rectangular, finite."""
    if att is None:
        return None
    L = LIMITS
    where = f"step {i}: attention"
    att = _dict(att, where)
    layers = _dict(att.get("layers"), f"{where}.layers")
    if len(layers) > L.attention_layers:
        _fail(f"{where} has more than {L.attention_layers} layers")
    shape = None  # (heads, streams, columns), the same for every layer
    out_layers = {}
    for name, maps in layers.items():
        _str(name, 16, f"{where} layer name")
        maps = _list(maps, L.attention_heads, f"{where} layer {_clip(name, 16)}")
        rows = [_list(h, L.gamma, f"{where} head") for h in maps]
        cols = [_list(r, L.attention_columns, f"{where} row") for h in rows for r in h]
        this = (len(maps), len(rows[0]) if rows else 0, len(cols[0]) if cols else 0)
        if not all(len(h) == this[1] for h in rows) or not all(len(c) == this[2] for c in cols):
            _fail(f"{where}: every head and row of a layer must have the same size")
        if 0 in this or (shape is not None and this != shape):
            _fail(f"{where}: layers must be non-empty and all of one shape")
        shape = this
        budget["attention"] -= this[0] * this[1] * this[2]
        if budget["attention"] < 0:
            _fail(f"more than {L.attention_values} attention weights in all")
        out_layers[name] = [[_weights(r, where) for r in h] for h in rows]
    out = {"layers": out_layers}
    if att.get("heads") is not None:
        heads = _list(att["heads"], L.attention_heads, f"{where}.heads")
        out["heads"] = [_int(h, 0, 4096, f"{where}.heads") for h in heads]
        if shape and out["heads"] and len(out["heads"]) != shape[0]:
            _fail(f"{where}: {len(out['heads'])} head numbers for {shape[0]} heads")
    if att.get("columns") is not None:
        out["columns"] = [_str(c, L.label_chars, f"{where}.columns")
                          for c in _list(att["columns"], L.attention_columns, f"{where}.columns")]
    if att.get("context_len") is not None:
        out["context_len"] = _int(att["context_len"], 0, L.attention_columns, f"{where}.context_len")
    return out

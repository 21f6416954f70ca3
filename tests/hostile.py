"""Hostile traces for the lab's attack tests: an XSS payload, hostile values, and seeded mutations of
real traces (huge or negative numbers, wrong types, deep nesting, long chains, huge γ, HTML everywhere).
Plain data in, plain data (or raw JSON bytes) out."""

from __future__ import annotations

import copy
import json
import random

PAYLOAD = '<img src=x onerror="window.__xss=(window.__xss||0)+1">'
HOSTILE_VALUES = [
    10**12, -10**12, 2**63, -1, 0, 1.5, -0.5, float("nan"), float("inf"), -float("inf"), 1e308, True, False,
    None, "", PAYLOAD, "<script>window.__xss=1</script>", "7", "\ud800", "x" * 100_000, [], [PAYLOAD], {},
    {"a": PAYLOAD}, [[[[[[[[[[[[1]]]]]]]]]]]],
]


def paths(tree) -> list[tuple]:
    """Every (container, key) of a JSON tree, found iteratively."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            if isinstance(v, (dict, list)):
                stack.append(v)
    return out


def nesting(tree) -> int:
    """Depth of a JSON tree, iteratively (1 for a flat object)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def html_everywhere(trace: dict, numbers_too: bool = False) -> dict:
    """Every string (and, with numbers_too, every number) of the trace replaced by the payload."""
    bad = copy.deepcopy(trace)
    for node, key in paths(bad):
        v = node[key]
        if isinstance(v, str) and key not in ("schema", "mode"):
            node[key] = PAYLOAD
        elif numbers_too and isinstance(v, (int, float)) and not isinstance(v, bool) and key != "version":
            node[key] = PAYLOAD
    return bad


def chain(trace: dict, length: int) -> dict:
    """Step 1 replaced by a single chain of `length` nodes (depth 0..length-1)."""
    bad = copy.deepcopy(trace)
    nodes = [{"id": i, "token": 5, "text": "a", "parent": i - 1, "depth": i, "prob": 0.5, "pruned": False,
              "accepted": True} for i in range(length)]
    bad["steps"][1].update(nodes=nodes, accepted=list(range(length)))
    return bad


def deep_json(levels: int) -> bytes:
    """A trace whose meta hides `levels` nested lists (raw bytes: json.dumps itself would recurse)."""
    return (b'{"schema": "specstream-trace", "version": 1, "meta": {"x": ' + b"[" * levels + b"]" * levels
            + b'}, "prompt": {}, "steps": [], "output": {}, "stats": {}}')


def mutate(trace: dict, rng: random.Random) -> bytes:
    """One hostile variant of a real trace, as the bytes a visitor would upload."""
    kind = rng.random()
    if kind < 0.04:
        return deep_json(rng.choice([50, 900, 5000, 200_000]))
    if kind < 0.08:
        return rng.choice([b"", b"{", b"[]", b"null", b"1" * 5000, b'{"schema": "specstream-trace"}',
                           json.dumps(PAYLOAD).encode(), bytes(range(256))])
    bad = copy.deepcopy(trace)
    if kind < 0.12:
        bad["meta"]["gamma"] = rng.choice([100, 10**4, 10**12, -3, "4", 4.5])
    elif kind < 0.16 and len(bad["steps"]) > 1:
        bad = chain(bad, rng.choice([33, 1000, 5000]))
    elif kind < 0.20 and len(bad["steps"]) > 1:
        node = rng.choice(bad["steps"][1]["nodes"])
        node["depth"] = rng.choice([10**6, 10**12, -1, 2**70])
    elif kind < 0.24:
        room = max(1, 10_000_000 // len(json.dumps(trace)))  # stay near the upload cap, not 100s of MB
        bad["steps"] = bad["steps"] * min(room, rng.choice([2, 50, 3000]))
    elif kind < 0.30:
        bad = html_everywhere(bad, numbers_too=rng.random() < 0.5)
    else:
        targets = paths(bad)
        for _ in range(rng.choice([1, 1, 2, 3, 8])):
            node, key = rng.choice(targets)
            if isinstance(node, dict) and rng.random() < 0.15:
                del node[key]
                targets = paths(bad)
            else:
                node[key] = copy.deepcopy(rng.choice(HOSTILE_VALUES))
    try:
        return json.dumps(bad).encode("utf-8", "surrogatepass")
    except ValueError:  # a structure json.dumps refuses: upload it as it stands, truncated
        return json.dumps(trace).encode()[: rng.randrange(1, 2000)]

"""Reading a trace (the engine's JSON schema, `specstream_core/decoding/trace.py`) for the lab's views:
validation, one pass, γ, labels. Pure functions; figures, explanations and the race replay use them."""

from __future__ import annotations

import html

from specstream_core.decoding.trace import validate
from specstream_core.errors import SpecstreamError


def checked(trace) -> dict:
    """The trace's compact form, validated against the engine's schema and limits (raises
    SpecstreamError); a trace that is already a validated `Trace` comes back as it is."""
    return validate(trace)


def step_of(trace: dict, index) -> dict:
    steps = checked(trace)["steps"]
    if not steps:
        raise SpecstreamError("the trace has no steps")
    if isinstance(index, bool) or not isinstance(index, (int, float)) or int(index) != index:
        raise SpecstreamError(f"step index must be an integer, got {index!r}")
    index = int(index)
    if not 0 <= index < len(steps):
        raise SpecstreamError(f"step {index} is out of range; this trace has steps 0..{len(steps) - 1}")
    step = steps[index]
    if [n["id"] for n in step["nodes"]] != list(range(len(step["nodes"]))):
        raise SpecstreamError(f"step {index}: node ids must be 0..n-1 in order")
    return step


def trace_gamma(trace: dict) -> int:
    g = trace.get("meta", {}).get("gamma", 0)
    return int(g) if isinstance(g, (int, float)) and g > 0 else 0


def token_label(text) -> str:
    """Token text with whitespace made visible (labels on a plot)."""
    if not isinstance(text, str):
        return "?"
    if text == "":
        return "∅"
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "")


def plot_label(text) -> str:
    """`token_label` escaped for Plotly, which renders a subset of HTML in labels, titles and hovers
    (`<b>` would turn bold; entities are decoded back to the characters)."""
    return html.escape(token_label(text), quote=False)


def is_speculative(trace: dict) -> bool:
    return trace.get("meta", {}).get("mode") == "ss"


def decode_steps(trace: dict) -> list[dict]:
    """The verification passes (the prefill pass of a speculative run verifies nothing)."""
    steps = trace["steps"]
    return steps[1:] if is_speculative(trace) and len(steps) > 1 else ([] if is_speculative(trace) else steps)


def node_status(node: dict) -> str:
    if node.get("accepted"):
        return "accepted"
    return "pruned" if node.get("pruned") else "rejected"

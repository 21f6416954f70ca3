"""The command line's one vocabulary of method and precision names (plain data: `--help` imports no torch).

Every command that decodes or measures names a method with one word without spaces (`ar`, `ss`, `hf-greedy`, ...)
and a precision apart from it (`--precision` for one engine, `--precisions` for a list): the names of
`model/precisions.py`. Names a list does not know fail with one line that lists the valid ones; an old spelling
still works and says, on one stderr line, what it is now.
"""

from __future__ import annotations

import argparse
import sys

from specstream_core.errors import SpecstreamError
from specstream_core.model.precisions import PRECISIONS

# what each method name means, in every command that lists it
METHODS = {
    "ar": "our plain decoding loop",
    "ss": "speculative streaming (the --streams set)",
    "ss-shared": "speculative streaming with a shared-mode set (--shared-streams)",
    "hf-greedy": "transformers' greedy generate",
    "hf-greedy-kernel": "transformers' greedy generate with its Linears on our row-invariant kernel (int4, int4-a8)",
    "hf-pld": "transformers' prompt lookup",
    "hf-assisted": "transformers' assisted generation with a draft model",
    "pld": "our prompt-lookup drafter through our tree verifier",
    "medusa": "Medusa-style heads through our tree verifier",
    "llama.cpp": "llama.cpp on the same GGUF file (its own 4-bit arithmetic)",
    "llama-bench": "llama.cpp's own llama-bench binary on the same GGUF file (generation only, no Python, no tokenizer)",
}
# precisions a list may name (`auto` only where one engine is loaded: --precision)
LISTED_PRECISIONS = tuple(p for p in PRECISIONS if p != "auto")


def note(text: str) -> None:
    """One deprecation line on stderr."""
    print(f"note: {text}", file=sys.stderr)


def names(text: str | None, flag: str, valid, old: dict[str, str] | None = None) -> list[str]:
    """The comma-separated names of `text`, each one of `valid`; `old` maps an old spelling to its name now
    (said once on stderr). Order kept, repeats dropped; one clear error line for an unknown or empty list."""
    old = old or {}
    out = []
    for raw in (text or "").split(","):
        name = " ".join(raw.split())
        if not name:
            continue
        if name in old and name not in valid:
            note(f"{flag} {name!r} is now {old[name]!r} (the old spelling still works)")
            name = old[name]
        if name not in valid:
            raise SpecstreamError(f"{flag}: unknown name {name!r}; valid: {', '.join(valid)}")
        if name not in out:
            out.append(name)
    if not out:
        raise SpecstreamError(f"{flag} names nothing; valid: {', '.join(valid)}")
    return out


def precisions(text: str | None, flag: str = "--precisions", valid=LISTED_PRECISIONS) -> list[str]:
    """A list of precision names (`model/precisions.py`), checked."""
    return names(text, flag, valid)


class Deprecated(argparse.Action):
    """An old flag kept working: stores into the new flag's dest (through `convert`) and says so on one line."""

    def __init__(self, option_strings, dest, new: str = "", convert=None, **kwargs):
        self.new, self.convert = new, convert
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            value = self.convert(values) if self.convert else values
        except ValueError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        note(f"{option_string} is now {self.new}" + (f" {value}" if value is not None else "")
             + " (the old flag still works)")
        if value is not None:  # None: the old flag's "no change" value
            setattr(namespace, self.dest, value)


def add_tree_topk(p, help_text: str) -> None:
    """--tree-topk (the draft tree's candidates per depth; `--topk` is its old spelling, beside sampling's
    --sample-top-k)."""
    p.add_argument("--tree-topk", dest="topk", default=None, metavar="K,K,...", help=help_text)
    p.add_argument("--topk", dest="topk", action=Deprecated, new="--tree-topk")

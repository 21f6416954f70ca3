"""Per-row decoding state, in one place: what a row emitted, what it will feed next, when it stops,
and what it costs.

A row's cache holds prompt + output[:-1]; its last emitted token (`pending`) is the root of its next
draft tree and enters the cache in the next pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specstream_core.decoding.drafters import Drafter


@dataclass
class Row:
    """One sequence of a decoding (B = 1 for single decoding)."""
    index: int  # position in the caller's list
    prompt_ids: list[int]
    generator: torch.Generator  # seeded with (cfg.seed or 0) + index
    drafter: Drafter
    output: list[int] = field(default_factory=list)
    pending: int | None = None  # emitted, not yet in the cache
    done: bool = False
    forward_passes: int = 0
    rows_total: int = 0  # rows this sequence put through the model, averaged over layers
    depth_hits: list[int] = field(default_factory=list)  # passes that accepted a draft at depth j+1
    wall_s: float = 0.0  # time of the passes this row took part in
    trace: object | None = None  # a `tracer.RowTrace` when the config asks for traces
    equals: str = ""  # what the output equals (`exactness.for_engine`), carried into its stats

    @property
    def context(self) -> list[int]:
        """Tokens before the current root (the pending token): prompt + output without its last token."""
        return self.prompt_ids + self.output[:-1]

    def count_depths(self, accepted: int) -> None:
        """A pass accepted `accepted` draft tokens past the root."""
        for depth in range(1, accepted + 1):
            if depth - 1 < len(self.depth_hits):
                self.depth_hits[depth - 1] += 1

    def stats(self) -> dict:
        n = len(self.output)
        steps = max(1, self.forward_passes - 1)
        return {
            "forward_passes": self.forward_passes,
            "new_tokens": n,
            "mean_accepted": n / self.forward_passes if self.forward_passes else 0.0,
            "wall_s": self.wall_s,
            "tokens_per_s": n / self.wall_s if self.wall_s else 0.0,
            "depth_acceptance": [h / steps for h in self.depth_hits],
            "rows_processed": self.rows_total,
            **({"equals": self.equals} if self.equals else {}),
        }


@dataclass(frozen=True)
class Limits:
    """When a row stops: EOS ids (if enabled), max new tokens, stop strings (cut at the first one)."""
    max_new_tokens: int
    eos_ids: frozenset
    stop_strings: tuple[str, ...]
    decode_text: object  # ids -> text (stop strings are checked on text)

    def emit(self, row: Row, tokens: list[int]) -> list[int]:
        """Append tokens to the row's output under the limits; returns what was appended."""
        tokens = tokens[: self.max_new_tokens - len(row.output)]
        for i, tok in enumerate(tokens):
            if tok in self.eos_ids:
                tokens, row.done = tokens[: i + 1], True
                break
        row.output.extend(tokens)
        if self.stop_strings and self._cut_at_stop_string(row):
            row.done = True
        if len(row.output) >= self.max_new_tokens:
            row.done = True
        return tokens

    def _cut_at_stop_string(self, row: Row) -> bool:
        decode, stops = self.decode_text, self.stop_strings
        if not any(s in decode(row.output) for s in stops):
            return False
        for n in range(1, len(row.output) + 1):  # shortest prefix that contains a stop string
            if any(s in decode(row.output[:n]) for s in stops):
                del row.output[n:]
                return True
        return True

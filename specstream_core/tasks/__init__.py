"""The task suite: seven templated categories in the style of Spec-Bench / the Speculative Streaming paper.

    from specstream_core.tasks import CATEGORIES, load_split, score, format_example
    for ex in load_split("eval", "sql", n=5):
        print(ex["prompt"] + ex["reference"])

Examples are ``{"category", "prompt", "reference"}``. Prompts follow one template
(``### Task: <category>\\n### Input:\\n<input>\\n### Output:\\n``); the reference is the answer without
the end marker; training text is ``prompt + reference + EOS`` (``format_example``).

Splits are generated, not stored: ``train`` and ``eval`` use different seeds, and every prompt is
assigned to exactly one split by a hash of its text (1 in ``EVAL_BUCKETS`` buckets is eval-only), so
the two are disjoint by construction and within-split duplicates are dropped. Nothing depends on
files outside this package, so the splits are identical on every machine.
"""

from __future__ import annotations

from typing import Iterator

from .common import EOS, PROMPT_TEMPLATE, format_example, make_prompt, seeded_rng, stable_int
from .generators import GENERATORS
from .scoring import score

CATEGORIES = tuple(GENERATORS)
SPLITS = ("train", "eval")
EVAL_BUCKETS = 10
DEFAULT_N = {"train": 4000, "eval": 200}

__all__ = ["CATEGORIES", "EOS", "PROMPT_TEMPLATE", "format_example", "iter_split", "load_split",
           "make_prompt", "score", "split_of"]


def split_of(prompt: str) -> str:
    """The only split a prompt may belong to."""
    return "eval" if stable_int("split/" + prompt) % EVAL_BUCKETS == 0 else "train"


def iter_split(split: str, category: str) -> Iterator[dict]:
    """Endless, deterministic stream of unique examples of one category in one split."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    if category not in GENERATORS:
        raise ValueError(f"unknown category {category!r}; choose from {', '.join(CATEGORIES)}")
    rng = seeded_rng("specstream-tasks", split, category)
    seen: set[str] = set()
    misses = 0
    while True:
        ex = GENERATORS[category](rng)
        if split_of(ex["prompt"]) != split or ex["prompt"] in seen:
            misses += 1
            if misses > 20_000:  # the template space is exhausted
                return
            continue
        misses = 0
        seen.add(ex["prompt"])
        yield ex


def load_split(split: str, category: str | None = None, n: int | None = None) -> list[dict]:
    """Up to ``n`` examples per category (default 4000 train / 200 eval), categories interleaved.

    A category with a small template space (``code`` has ~4,000 distinct train prompts) may return fewer.
    """
    cats = CATEGORIES if category is None else (category,)
    n = DEFAULT_N.get(split, 0) if n is None else n
    per_cat = []
    for cat in cats:
        stream = iter_split(split, cat)
        per_cat.append([ex for _, ex in zip(range(n), stream)])
    # Interleave categories; a category whose template space is exhausted just ends early.
    longest = max(len(group) for group in per_cat)
    return [group[i] for i in range(longest) for group in per_cat if i < len(group)]

"""Shared pieces of the task suite: the prompt template, the end marker, seeded RNGs and word pools.

Every example is a dict ``{"category", "prompt", "reference"}``. The prompt ends with the
``### Output:`` header; the reference is the answer text *without* the end marker. Training text is
``prompt + reference + EOS`` (see ``format_example``), so a model trained on it stops by emitting EOS.
"""

from __future__ import annotations

import hashlib
import random

EOS = "<|endoftext|>"

PROMPT_TEMPLATE = "### Task: {category}\n### Input:\n{input}\n### Output:\n"


def make_prompt(category: str, text: str) -> str:
    return PROMPT_TEMPLATE.format(category=category, input=text)


def make_example(category: str, text: str, reference: str) -> dict:
    return {"category": category, "prompt": make_prompt(category, text), "reference": reference}


def format_example(example: dict) -> str:
    """The training text of one example: prompt, reference, end marker."""
    return example["prompt"] + example["reference"] + EOS


def stable_int(text: str) -> int:
    """A process-independent hash (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def seeded_rng(*parts: object) -> random.Random:
    return random.Random(stable_int("/".join(str(p) for p in parts)))


FIRST_NAMES = [
    "Tom", "Anna", "Lucas", "Maria", "James", "Sofia", "David", "Emma", "Peter", "Olivia", "Jack",
    "Laura", "Sam", "Nina", "Ben", "Clara", "Leo", "Julia", "Max", "Grace", "Oscar", "Alice", "Henry",
    "Rosa", "Adam", "Eva", "Noah", "Mia", "Paul", "Lily", "Mark", "Sara", "Ivan", "Chloe", "Ryan",
    "Hannah", "Eric", "Zoe", "Victor", "Amy",
]
SHE = {"Anna", "Maria", "Sofia", "Emma", "Olivia", "Laura", "Nina", "Clara", "Julia", "Grace", "Alice",
       "Rosa", "Eva", "Mia", "Lily", "Sara", "Chloe", "Hannah", "Zoe", "Amy"}


def pronoun(name: str) -> str:
    return "she" if name in SHE else "he"


def possessive(name: str) -> str:
    return "her" if name in SHE else "his"


SYLLABLES = ["ka", "lo", "mir", "ven", "tas", "dor", "bel", "ri", "nu", "sol", "tar", "ve", "lin", "mo",
             "zar", "pel", "qui", "ros", "ta", "gen", "fal", "dun", "ash", "or", "el", "vik", "ma", "thal"]


def invented_name(rng: random.Random, lo: int = 2, hi: int = 3) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(lo, hi))).capitalize()

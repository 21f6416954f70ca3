"""Shared pieces of the chat corpus: held-out partitions, template registries, word pools."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..common import FIRST_NAMES, seeded_rng, stable_int

SPLITS = ("train", "eval")
EVAL_SHARE = 5  # 1 in EVAL_SHARE items of a material pool is eval-only


def material_split(key: str) -> str:
    """The only split a piece of source material (a table, a topic, a name, a passage) may feed."""
    return "eval" if stable_int("corpus-material/" + key) % EVAL_SHARE == 0 else "train"


def pool(items, split: str, tag: str) -> list:
    """The part of ``items`` reserved for ``split`` (by a hash of ``tag/item``); never empty."""
    items = list(items)
    chosen = [x for x in items if material_split(f"{tag}/{x}") == split]
    if not chosen:  # tiny pool: fall back to a fixed one-item (eval) / rest (train) cut
        chosen = items[:1] if split == "eval" else items[1:]
    return chosen


@dataclass(frozen=True)
class Template:
    id: str
    text: str
    split: str  # "train" or "eval"


def templates(category: str, train: dict[str, str], eval: dict[str, str]) -> dict[str, list[Template]]:
    """Register a category's instruction templates; eval templates are never used for training."""
    out = {"train": [Template(f"{category}.{k}", v, "train") for k, v in train.items()],
           "eval": [Template(f"{category}.{k}", v, "eval") for k, v in eval.items()]}
    ids = [t.id for ts in out.values() for t in ts]
    assert len(ids) == len(set(ids)), f"duplicate template id in {category}"
    return out


def pick(rng: random.Random, ts: dict[str, list[Template]], split: str) -> Template:
    return rng.choice(ts[split])


NAMES = sorted(set(FIRST_NAMES + [
    "Aisha", "Bruno", "Carmen", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kenji",
    "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rafael", "Selin", "Tariq", "Ursula", "Viktor",
    "Wen", "Ximena", "Yusuf", "Zara", "Arjun", "Beatriz", "Chen", "Diego", "Esther", "Felix", "Hana",
    "Igor", "Jana", "Kofi", "Lucia", "Malik", "Noor", "Pablo", "Rania", "Stefan", "Tomas", "Vera",
]))

__all__ = ["EVAL_SHARE", "NAMES", "SPLITS", "Template", "material_split", "pick", "pool", "seeded_rng",
           "stable_int", "templates"]

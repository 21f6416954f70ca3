"""The chat prompt corpus: plain user messages in eight categories, for self-distillation and an honest eval.

    from specstream_core.tasks.corpus import load_corpus, score
    for rec in load_corpus("eval", "sql", n=3):
        print(rec["prompt"]); print(score(rec, my_answer))

or ``python -m specstream_core prompts --split train --out train.jsonl``.

Each record is ``{"id": "<category>-<split>-<n>", "category", "split", "prompt", "reference", "template",
"source", "check"}``. ``prompt`` is a plain user message (no chat template: the engine wraps it).
``reference`` is a correct answer where the category has a checkable one (sql: a query; math: a worked
solution ending "The answer is N."; qa: the answer span; data2text and summarization: a plain
realisation; translation: the target sentence; code write/fix: a solution) and ``None`` otherwise
(instruct, code explain). ``template`` names the instruction wording (and problem kind) used; ``source``
names the material (``generated:...`` or ``python-stdlib:<module>/<name>``). ``check`` is what the
scorer needs (sql setup statements, code asserts, attribute values, keywords, ...).

Categories: sql, summarization, data2text, math, qa, code, translation, instruct (see each ``gen_*``
module). Material: template generators with many slots; Python's standard-library docstrings,
signatures and short functions (a snapshot stored in the package, see ``stdlib_text``), so the corpus
is byte-identical on every machine and needs no Debian text packages. Self-instruct (questions the model
writes about that text) is a hook only: ``self_instruct_prompts``.

**The eval split is worded differently from train.** Every category has train-only and eval-only
instruction templates (eval ones are chattier: "Can you give me the gist of this exchange?"), eval-only
question phrasings per problem kind (sql, math, qa, instruct), eval-only record formats (data2text: JSON
and Markdown tables instead of ``key[value]`` lists), and held-out material: tables, dialogue
scenarios, names, goods, topics, code families, phrase fillers and stdlib modules are partitioned by a
hash (1 in 5 is eval-only, ``base.material_split``). No eval record uses a train template id, and no
eval prompt is a train prompt (tested).

**Order.** ``load_corpus("train")`` interleaves categories round-robin, so every prefix is balanced.
Streams are seeded per (category, split), so record ``k`` of a category never changes when ``n`` grows.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterator

from ..common import seeded_rng
from . import gen_code, gen_data2text, gen_instruct, gen_math, gen_qa, gen_sql, gen_summarization, gen_translation
from .base import SPLITS
from .scoring import score
from .base import material_split
from .gen_instruct import _keywords
from .stdlib_text import entries

GENERATORS = {
    "sql": gen_sql.generate,
    "summarization": gen_summarization.generate,
    "data2text": gen_data2text.generate,
    "math": gen_math.generate,
    "qa": gen_qa.generate,
    "code": gen_code.generate,
    "translation": gen_translation.generate,
    "instruct": gen_instruct.generate,
}
CATEGORIES = tuple(GENERATORS)
DEFAULT_N = {"train": 800, "eval": 50}
MAX_MISSES = 5000

__all__ = ["CATEGORIES", "DEFAULT_N", "SPLITS", "iter_category", "load_corpus", "score", "score_answers",
           "self_instruct_prompts"]


def iter_category(category: str, split: str) -> Iterator[dict]:
    """Endless (until the template space runs dry), deterministic stream of distinct records."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    if category not in GENERATORS:
        raise ValueError(f"unknown category {category!r}; choose from {', '.join(CATEGORIES)}")
    rng = seeded_rng("specstream-chat-corpus", category, split)
    seen: set[str] = set()
    misses = 0
    for n in itertools.count():
        while True:
            item = GENERATORS[category](rng, split)
            if item["prompt"] not in seen:
                break
            misses += 1
            if misses > MAX_MISSES:
                return
        misses = 0
        seen.add(item["prompt"])
        yield {"id": f"{category}-{split}-{n}", "category": category, "split": split, "prompt": item["prompt"],
               "reference": item["reference"], "template": item["template"], "source": item["source"],
               "check": item["check"]}


def _parse_categories(category) -> list[str]:
    if category is None:
        return list(CATEGORIES)
    cats = [c.strip() for c in category.split(",")] if isinstance(category, str) else list(category)
    for c in cats:
        if c not in GENERATORS:
            raise ValueError(f"unknown category {c!r}; choose from {', '.join(CATEGORIES)}")
    return cats


def load_corpus(split: str, category: str | list[str] | None = None, n: int | None = None) -> list[dict]:
    """Up to ``n`` records per category (default 800 train / 50 eval), interleaved round-robin.

    ``category`` is one name, a comma-separated string or a list (default: all eight).
    """
    cats = _parse_categories(category)
    n = DEFAULT_N[split] if n is None else n
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    groups = [list(itertools.islice(iter_category(c, split), n)) for c in cats]
    longest = max((len(g) for g in groups), default=0)
    return [g[i] for i in range(longest) for g in groups if i < len(g)]


def score_answers(records: list[dict], answers: dict[str, str]) -> dict:
    """Per-category mean scores of ``answers`` (record id -> answer text) over the records answered.

    Returns ``{"categories": {cat: {"n", "score"}}, "mean": mean over categories, "missing": [ids]}``.
    """
    per: dict[str, list[float]] = {}
    missing = []
    for rec in records:
        if rec["id"] not in answers:
            missing.append(rec["id"])
            continue
        per.setdefault(rec["category"], []).append(score(rec, answers[rec["id"]]))
    cats = {c: {"n": len(v), "score": sum(v) / len(v)} for c, v in per.items() if v}
    mean = sum(c["score"] for c in cats.values()) / len(cats) if cats else None
    return {"categories": cats, "mean": mean, "missing": missing}


def self_instruct_prompts(generate: Callable[[str], str], n_per_entry: int = 1, limit: int | None = None,
                          split: str = "train") -> list[dict]:
    """Self-instruct hook (not run by default): ask the model itself for questions about stdlib docs.

    ``generate(prompt) -> answer`` is any text generator (e.g. the base model, greedy). For each stdlib
    entry of ``split``'s modules it asks for ``n_per_entry`` questions, keeps lines ending in "?",
    and returns instruct records (``template`` ``instruct.self+question``, reference ``None``) whose
    prompt is the documentation followed by the model's question.
    """
    out = []
    items = [e for e in entries() if material_split(f"stdlib-module/{e['module'].split('.')[0]}") == split]
    for e in items[:limit]:
        ask = (f"Here is the documentation of {e['module']}.{e['name']}:\n\n{e['doc']}\n\n"
               f"Write {n_per_entry} question(s) a programmer might ask about it, one per line.")
        lines = [ln.strip(" -*0123456789.") for ln in generate(ask).splitlines()]
        for q in [ln for ln in lines if ln.endswith("?")][:n_per_entry]:
            out.append({"id": f"instruct-self-{len(out)}", "category": "instruct", "split": split,
                        "prompt": f"{q}\n\nDocumentation of {e['module']}.{e['name']}:\n{e['doc']}", "reference": None,
                        "template": "instruct.self+question", "source": f"self-instruct:{e['module']}/{e['name']}",
                        "check": {"keywords": _keywords(e["name"].split(".")[-1], q)}})
    return out

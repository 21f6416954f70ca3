"""Prompt presets: one eval-split example per category of the chat prompt corpus (plain user messages;
the engine wraps them in the model's chat template), or a few built-in prompts.

Each preset may have a recorded trace in assets/smollm2/traces/<slug>.json (or $SPECSTREAM_TRACES_DIR;
`trace_path`), replayed by the lab before any model has run (scripts/record_traces.py makes them)."""

from __future__ import annotations

import os
import re
from functools import lru_cache

from specstream_core.model import defaults

BUILTIN = {
    "sql · employees": "Table employees: id (INTEGER), name (TEXT), city (TEXT)\n"
                       "Write an SQL query for: what are the names of employees whose city is Paris?",
    "math · cookies": "Zoe has 28 cookies and shares them equally among 4 friends. How many cookies does each "
                      "friend get?",
    "instruct · story": "Write the opening two sentences of a story set in a small village by the sea.",
}


def _label(record: dict) -> str:
    first = next((line.strip() for line in record["prompt"].splitlines() if line.strip()), "")
    return f"{record['category']} · {first[:48]}{'…' if len(first) > 48 else ''}"


@lru_cache(maxsize=1)
def presets(per_category: int = 1) -> dict[str, str]:
    """label -> prompt, categories interleaved (sql, summarization, data2text, math, qa, code, translation,
    instruct): the corpus's eval split, worded unlike anything the streams were trained on."""
    try:
        from specstream_core.tasks.corpus import CATEGORIES, load_corpus

        out = {}
        for category in CATEGORIES:
            for record in load_corpus("eval", category, n=per_category):
                out.setdefault(_label(record), record["prompt"])
        return out or dict(BUILTIN)
    except Exception:  # the corpus is optional here: fall back rather than fail the app
        return dict(BUILTIN)


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:60] or "preset"


def trace_path(label: str, directory: str | None = None) -> str | None:
    """The recorded trace of a preset, when one is bundled."""
    directory = directory or os.environ.get("SPECSTREAM_TRACES_DIR") or defaults.SMOL_TRACES_DIR
    path = os.path.join(directory, slug(label) + ".json")
    return path if os.path.isfile(path) else None

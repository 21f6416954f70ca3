"""Prompt presets: examples from the bundled task suite's eval split, or a few built-in prompts."""

from __future__ import annotations

from functools import lru_cache

BUILTIN = {
    "sql · employees": "### Task: sql\n### Input:\nCREATE TABLE employees (id INTEGER, name TEXT, city TEXT)\n"
                       "Question: What are the names of employees whose city is Paris?\n### Output:\n",
    "math · cookies": "### Task: math\n### Input:\nZoe has 28 cookies and shares them equally among 4 friends. "
                      "How many cookies does each friend get?\n### Output:\n",
    "story": "Once upon a time, in a small village by the sea,",
}


@lru_cache(maxsize=1)
def presets(per_category: int = 2) -> dict[str, str]:
    """label -> prompt, categories interleaved (sql, summarization, data2text, math, rag, code, translation)."""
    try:
        from specstream_core.tasks import load_split
    except ImportError:
        return dict(BUILTIN)
    out = {}
    try:
        examples = load_split("eval", n=per_category)
    except Exception:  # the suite is optional here: fall back rather than fail the app
        return dict(BUILTIN)
    for ex in examples:
        first = ex["prompt"].split("### Input:\n", 1)[-1].strip().splitlines()[0]
        label = f"{ex['category']} · {first[:48]}{'…' if len(first) > 48 else ''}"
        out.setdefault(label, ex["prompt"])
    return out or dict(BUILTIN)

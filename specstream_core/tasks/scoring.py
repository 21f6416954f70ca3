"""Per-category scores in [0, 1].

- ``sql``, ``code``, ``rag``: exact match after whitespace normalisation (trailing spaces, blank edges).
- ``math``: accuracy of the final answer (the number after "The answer is").
- ``summarization``, ``data2text``, ``translation``: ROUGE-L F1 over lower-cased word tokens.
"""

from __future__ import annotations

import re

from .common import EOS

EXACT = {"sql", "code", "rag"}
ROUGE = {"summarization", "data2text", "translation"}

_ANSWER = re.compile(r"answer is\s*(-?\d+)")
_WORD = re.compile(r"\w+|[^\w\s]")


def clean(text: str) -> str:
    """Cut at the end marker and normalise whitespace (line structure kept, for code)."""
    text = text.split(EOS, 1)[0]
    lines = [re.sub(r"[ \t]+$", "", line) for line in text.strip("\n").split("\n")]
    return "\n".join(lines).strip()


def final_answer(text: str) -> str | None:
    m = _ANSWER.findall(text)
    return m[-1] if m else None


def rouge_l(prediction: str, reference: str) -> float:
    p = _WORD.findall(prediction.lower())
    r = _WORD.findall(reference.lower())
    if not p or not r:
        return float(p == r)
    # LCS by dynamic programming over the shorter sequence: O(len(p) * len(r)).
    prev = [0] * (len(r) + 1)
    for tok in p:
        cur = [0]
        for j, rt in enumerate(r):
            cur.append(prev[j] + 1 if tok == rt else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(p), lcs / len(r)
    return 2 * precision * recall / (precision + recall)


def score(category: str, prediction: str, reference: str) -> float:
    prediction, reference = clean(prediction), clean(reference)
    if category == "math":
        want = final_answer(reference)
        return float(want is not None and final_answer(prediction) == want)
    if category in EXACT:
        return float(prediction == reference)
    if category in ROUGE:
        return rouge_l(prediction, reference)
    raise ValueError(f"unknown category {category!r}")

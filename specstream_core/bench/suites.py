"""The prompt suites `bench` can run: the chat corpus's eval split (default) or the old templated task
suite; each with its categories, eval examples and per-example task score."""

from __future__ import annotations

from specstream_core import tasks
from specstream_core.tasks import corpus


def suite_categories(suite: str) -> tuple[str, ...]:
    return tuple(tasks.CATEGORIES if suite == "tasks" else corpus.CATEGORIES)


def suite_examples(suite: str, category: str, n: int) -> list[dict]:
    """Eval examples of one category: {"prompt", ...} records the suite's scorer understands."""
    if suite == "tasks":
        return tasks.load_split("eval", category, n=n)
    return corpus.load_corpus("eval", category, n=n)


def suite_scorer(suite: str, examples: dict[str, list[dict]], engine):
    """score(category, index, output tokens) -> the example's task score of the decoded answer."""
    scorer = tasks.score if suite == "tasks" else corpus.score

    def score(category, i, tokens):
        return float(scorer(examples[category][i], engine.decode_text(tokens)))
    return score

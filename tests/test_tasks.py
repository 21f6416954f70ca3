"""The task suite: every category present, splits deterministic and disjoint, scoring sane."""

from specstream_core.tasks import CATEGORIES, EOS, format_example, load_split, score, split_of
from specstream_core.tasks.offline_text import documents


def test_categories():
    assert {"sql", "summarization", "data2text", "math", "rag", "code"} <= set(CATEGORIES)
    assert len(CATEGORIES) >= 6


def test_examples_follow_the_template():
    for ex in load_split("eval", n=5):
        assert set(ex) == {"category", "prompt", "reference"}
        assert ex["prompt"].startswith(f"### Task: {ex['category']}\n### Input:\n")
        assert ex["prompt"].endswith("\n### Output:\n")
        assert ex["reference"].strip() and EOS not in ex["reference"]
        assert format_example(ex).endswith(ex["reference"] + EOS)
    assert [ex["category"] for ex in load_split("eval", n=1)] == list(CATEGORIES)


def test_deterministic():
    assert load_split("train", n=30) == load_split("train", n=30)
    assert load_split("eval", "sql", n=10) == load_split("eval", n=10)[0::len(CATEGORIES)]


def test_splits_disjoint():
    train = {ex["prompt"] for ex in load_split("train", n=400)}
    evals = load_split("eval", n=100)
    assert len({ex["prompt"] for ex in evals}) == len(evals)  # no duplicates within a split
    assert not train & {ex["prompt"] for ex in evals}
    assert all(split_of(ex["prompt"]) == "eval" for ex in evals)
    assert all(split_of(p) == "train" for p in train)


def test_reference_scores_one():
    for ex in load_split("eval", n=20):
        assert score(ex["category"], ex["reference"], ex["reference"]) == 1.0
        assert score(ex["category"], ex["reference"] + EOS + "junk", ex["reference"]) == 1.0


def test_wrong_answers_score_low():
    for ex in load_split("eval", n=20):
        cat, ref = ex["category"], ex["reference"]
        assert score(cat, "", ref) == 0.0
        if cat in ("sql", "code", "rag"):
            assert score(cat, ref[:-3], ref) == 0.0
    math = load_split("eval", "math", n=1)[0]["reference"]
    answer = math.rsplit(" ", 1)[1].rstrip(".")
    assert score("math", f"blah. The answer is {answer}.", math) == 1.0
    assert score("math", f"The answer is {int(answer) + 1}.", math) == 0.0
    assert 0.3 < score("summarization", "Tom books a table for two", "Tom books a table for four people") < 1.0


def test_offline_text_needs_nothing_extra():
    docs = documents(20_000, sources=["python-stdlib"])
    assert docs and sum(map(len, docs)) >= 20_000

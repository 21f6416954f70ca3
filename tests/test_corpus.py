"""The chat prompt corpus: size, balance, an eval split worded differently, scorers."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from specstream_core.tasks import corpus
from specstream_core.tasks.corpus import CATEGORIES, load_corpus, score
from specstream_core.tasks.corpus import scoring

REQUIRED = {"id", "category", "split", "prompt", "reference", "template", "source"}


@pytest.fixture(scope="module")
def train():
    return load_corpus("train")


@pytest.fixture(scope="module")
def evals():
    return load_corpus("eval")


def test_train_size_and_categories(train):
    assert len(CATEGORIES) >= 8
    assert {"sql", "summarization", "data2text", "math", "qa", "code", "translation", "instruct"} <= set(CATEGORIES)
    prompts = [r["prompt"] for r in train]
    assert len(set(prompts)) == len(prompts) >= 5000
    for r in train:
        assert REQUIRED <= set(r) and r["split"] == "train" and r["prompt"].strip()
        assert r["id"].startswith(f"{r['category']}-train-")
        assert not r["prompt"].startswith(("### Task", "<|im_start|>")), "plain user messages, no template"
    assert len({r["id"] for r in train}) == len(train)


def test_round_robin_prefix_is_balanced(train):
    k = len(CATEGORIES)
    for prefix in (k, 10 * k, 625 * k):
        counts = {c: 0 for c in CATEGORIES}
        for r in train[:prefix]:
            counts[r["category"]] += 1
        assert set(counts.values()) == {prefix // k}


def test_eval_disjoint_and_worded_differently(train, evals):
    by_cat = {c: [r for r in evals if r["category"] == c] for c in CATEGORIES}
    assert all(len(v) >= 40 for v in by_cat.values()), {c: len(v) for c, v in by_cat.items()}
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in evals}
    assert not {r["template"] for r in train} & {r["template"] for r in evals}
    # held-out material: eval sql tables and stdlib modules never feed train
    train_sources = {r["source"] for r in train if r["category"] == "sql"}
    assert not train_sources & {r["source"] for r in evals if r["category"] == "sql"}
    mods = lambda recs: {r["source"].split(":")[1].split(".")[0].split("/")[0]  # noqa: E731
                         for r in recs if r["source"].startswith("python-stdlib:")}
    assert mods(evals) and not mods(train) & mods(evals)
    assert all(r["split"] == "eval" and r["id"].startswith(f"{r['category']}-eval-") for r in evals)


def test_deterministic_and_prefix_stable(train):
    again = load_corpus("train", category="code,translation", n=30)
    assert again == [r for r in train if r["category"] in ("translation", "code")][:60]
    assert load_corpus("eval", "math", n=5) == load_corpus("eval", "math", n=5)
    assert load_corpus("train", "math", n=3) == [r for r in train if r["category"] == "math"][:3]


# A distillation run reads the first 5,000 train records, and published figures use the eval split:
# neither may change (the corpus is append-only; a new generator must not alter these streams).
FROZEN_TRAIN_5000 = "2e246f7e8b55be1d5a52f9fa21a6184225cb3a4e03e37b3d1513e2ce540b8371"
FROZEN_EVAL_50 = "8fff3e11baf8dfaefaef5dd50f6239aa2db178de96f7f706d0b58f39214d38a7"


def _digest(records):
    return hashlib.sha256("\n".join(json.dumps(r, sort_keys=True, ensure_ascii=False) for r in records).encode()).hexdigest()


def test_frozen_records(train, evals):
    assert _digest(train[:5000]) == FROZEN_TRAIN_5000, "the first 5,000 train records changed"
    assert _digest(evals) == FROZEN_EVAL_50, "the eval split (50 per category) changed"


def test_references_score_one(train, evals):
    sample = [r for c in CATEGORIES for r in ([x for x in train if x["category"] == c][:15]
                                              + [x for x in evals if x["category"] == c][:5])]
    for r in sample:
        if r["reference"] is None:
            assert r["category"] in ("instruct", "code") and r["check"]["keywords"]
            continue
        if r["category"] == "code":
            continue  # subprocesses: a few are checked below
        assert score(r, r["reference"]) == 1.0, r["id"]


def _first(recs, cat, pred=lambda r: True):
    return next(r for r in recs if r["category"] == cat and pred(r))


WRONG = {"sql": "SELECT 1;", "summarization": "", "data2text": "I like turtles.", "math": "The answer is 1234567.",
         "qa": "I do not know.", "translation": "1234", "instruct": "ok"}


@pytest.mark.parametrize("cat", sorted(WRONG))
def test_wrong_answers_score_zero(train, cat):
    assert score(_first(train, cat), WRONG[cat]) == 0.0


def test_chat_style_answers(train):
    sql = _first(train, "sql")
    assert score(sql, f"Sure! Here is the query:\n\n```sql\n{sql['reference']}\n```\n\nIt filters the rows.") == 1.0
    text_eq = _first(train, "sql", lambda r: re.search(r"= '[a-z]", r["reference"]) is not None)
    upper = re.sub(r"= '([a-z])", lambda m: "= '" + m.group(1).upper(), text_eq["reference"])
    assert upper != text_eq["reference"] and score(text_eq, upper) == 1.0  # value case does not matter
    m = _first(train, "math")
    assert score(m, f"Let's see... so the final answer is **{m['check']['answer']}**.") == 1.0
    qa = _first(train, "qa")
    assert score(qa, f"According to the passage, it is {qa['reference']}.") == 1.0
    tr = _first(train, "translation")
    assert score(tr, f'The translation is: "{tr["reference"]}"') == 1.0
    ins = _first(train, "instruct", lambda r: r["source"].startswith("generated:"))
    on_topic = "Here is a helpful answer about " + " ".join(ins["check"]["keywords"]) + " with some detail."
    assert score(ins, on_topic) == 1.0 and 0 < score(ins, "This answer talks about nothing in particular at all.") < 1
    d2t = _first(train, "data2text")
    half = d2t["check"]["values"][: len(d2t["check"]["values"]) // 2]
    assert score(d2t, " ".join(half)) == pytest.approx(len(half) / len(d2t["check"]["values"]))


def test_sql_scorer_survives_hostile_answers(train):
    r = _first(train, "sql")
    table = r["check"]["setup"][0].split()[2]
    hostile = [f"DROP TABLE {table};", f"DELETE FROM {table}; SELECT 1;", "SELEC broken syntax",
               "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c;",
               "ATTACH DATABASE '/tmp/specstream-evil.db' AS evil;", "SELECT zeroblob(2000000000);",
               f"```sql\nUPDATE {table} SET id = 0;\n```", "VACUUM INTO '/tmp/specstream-evil-vacuum.db'",
               "SELECT load_extension('/tmp/nothing')", f"SELECT * FROM {table} a, {table} b, {table} c, {table} d, {table} e, {table} f",
               "PRAGMA writable_schema = ON"]
    for answer in hostile:
        assert score(r, answer) == 0.0, answer
    assert score(r, r["reference"]) == 1.0  # the database was never changed
    assert not os.path.exists("/tmp/specstream-evil.db") and not os.path.exists("/tmp/specstream-evil-vacuum.db")


def test_code_scorer_runs_isolated(train, monkeypatch):
    monkeypatch.setattr(scoring, "CODE_TIMEOUT", 1.0)
    r = _first(train, "code", lambda x: "tests" in x["check"])
    f = r["check"]["function"]
    assert score(r, f"Here you go:\n```python\n{r['reference']}\n```") == 1.0
    assert score(r, f"def {f}(*args):\n    return None") == 0.0
    assert score(r, f"def {f}(*args):\n    while True:\n        pass") == 0.0
    assert score(r, f"def {f}(:\n    return") == 0.0
    assert score(r, "import sys\nsys.exit(0)\n" + r["reference"]) == 0.0
    assert score(r, "I cannot write code.") == 0.0
    assert score(r, f"def {f}(*a):\n    raise SystemExit(0)") == 0.0
    # a child process the answer leaves behind neither holds the result back nor survives
    stray = "import subprocess\nsubprocess.Popen(['sleep', '37.25'])\n" + r["reference"]
    assert score(r, stray) == 1.0
    if os.path.isdir("/proc/self"):
        import time

        time.sleep(0.2)
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    alive.append(f.read())
            except OSError:
                pass
        assert not [c for c in alive if b"37.25" in c]
    fix = _first(train, "code", lambda x: x["template"].startswith("code.fix"))
    assert score(fix, fix["reference"]) == 1.0
    explain = _first(train, "code", lambda x: x["reference"] is None)
    assert score(explain, "") == 0.0


def test_chrf_and_normalisation():
    assert scoring.chrf("Wo ist der Bahnhof?", "Wo ist der Bahnhof?") == 1.0
    assert 0 < scoring.chrf("Wo ist Bahnhof", "Wo ist der Bahnhof?") < 1
    assert scoring.final_number("It costs $1,250.00 in total") == 1250
    assert scoring.extract_sql("Try: select a from t where b = 1; -- done") == "select a from t where b = 1"
    assert scoring.extract_sql("```sql\nCREATE TABLE t (a INT);\n```\nthen\n```sql\nSELECT a FROM t;\n```") == "SELECT a FROM t"


def _prompts_cli():
    """`python -m specstream_core prompts ...` as cli.main runs it, without importing every other command
    (cli.build_parser imports them all, ~6 s of torch/transformers on this machine)."""
    import argparse
    import importlib

    from specstream_core.cli import COMMANDS
    from specstream_core.errors import SpecstreamError

    module = importlib.import_module(COMMANDS["prompts"][0])  # the registered command module

    def main(argv):
        assert argv[0] == "prompts"
        p = argparse.ArgumentParser()
        module.add_arguments(p)
        try:
            return int(module.run(p.parse_args(argv[1:])) or 0)
        except SpecstreamError:
            return 2
    return main


def test_cli_writes_jsonl(tmp_path, capsys):
    main = _prompts_cli()

    out = tmp_path / "eval.jsonl"
    assert main(["prompts", "--split", "eval", "--n-per-category", "3", "--categories", "sql,math", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["category"] for r in rows] == ["sql", "math"] * 3
    assert all(REQUIRED <= set(r) for r in rows)
    text = capsys.readouterr().out
    assert "sql" in text and "math" in text and "6" in text
    assert main(["prompts", "--split", "eval", "--categories", "nope", "--out", str(out)]) == 2
    # --score: a model's answers (by id) scored per category
    answers = tmp_path / "answers.jsonl"
    answers.write_text("\n".join(json.dumps({"id": r["id"], "answer": r["reference"] if r["category"] == "sql" else "no idea"})
                                  for r in rows) + "\n")
    capsys.readouterr()
    assert main(["prompts", "--split", "eval", "--n-per-category", "3", "--categories", "sql,math",
                 "--score", str(answers), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sql"] == {"n": 3, "score": 1.0} and report["math"] == {"n": 3, "score": 0.0} and report["mean"] == 0.5


def test_self_instruct_hook():
    recs = corpus.self_instruct_prompts(lambda p: "1. What does it return?\n2. not a question", limit=2)
    assert len(recs) == 2 and all(r["category"] == "instruct" and "What does it return?" in r["prompt"] for r in recs)


def test_scorer_edge_cases(train, monkeypatch):
    monkeypatch.setattr(scoring, "CODE_TIMEOUT", 1.0)
    code = _first(train, "code", lambda x: "tests" in x["check"])
    f = code["check"]["function"]
    # a usage example that fails after a correct function does not void it
    assert score(code, code["reference"] + f"\n\nprint({f}(object()))\n") == 1.0
    # printed text cannot fake the pass count
    assert score(code, f"def {f}(*a):\n    print('0123456789abcdef 4')\n    return None") == 0.0
    # sql: an empty reference result only matches a real attempt at the same table
    empty = next(r for r in load_corpus("train", "sql", n=200)
                 if scoring.run_sql(r["check"]["setup"], r["reference"]) == [])
    assert score(empty, empty["reference"]) == 1.0
    assert score(empty, "SELECT " + ", ".join(["1"] * empty["reference"].count(",")) + " WHERE 0") == 0.0
    # qa / summarization normalisation
    assert scoring._normalize("62,000 people at 3 p.m.") == scoring._normalize("62000 people at 3pm")


def test_proxies_resist_echo_and_loops(train, monkeypatch):
    """Failure modes seen in SmolLM2-135M-Instruct's real answers to this corpus."""
    monkeypatch.setattr(scoring, "CODE_TIMEOUT", 1.0)
    d2t = _first(train, "data2text", lambda r: "\n" in r["prompt"].split("\n", 1)[1])
    record_lines = d2t["prompt"].split("\n", 1)[1]
    assert score(d2t, record_lines) == 0.0  # echoing the record is not a description
    assert score(d2t, "Here it is: " + ", ".join(d2t["check"]["values"]) + ".") == 1.0
    summ = _first(train, "summarization")
    dialogue = "\n".join(ln for ln in summ["prompt"].splitlines() if ": " in ln)
    assert score(summ, dialogue) == 0.0  # echoing the dialogue is not a summary
    assert score(summ, summ["reference"]) == 1.0 and score(summ, (summ["reference"] + " ") * 3) < 1.0
    loop = ("I'm here to help you with your business. " * 12).strip()
    ins = _first(train, "instruct", lambda r: r["source"].startswith("generated:"))
    assert score(ins, loop + " " + " ".join(ins["check"]["keywords"])) < 0.5
    m = _first(train, "math")
    assert scoring.final_number("so the 4th friend gets the rest") is None
    assert score(m, f"First {m['check']['answer']} apples, then the 4th one.") == 1.0
    code = _first(train, "code", lambda x: x["template"].startswith("code.write"))
    renamed = code["reference"].replace(f"def {code['check']['function']}(", "def my_renamed_helper(")
    assert score(code, f"```python\n{renamed}\n```") == 1.0
    tr = _first(train, "translation")
    assert score(tr, f'"{tr["check"]["source_text"]}" means something.') < 0.5

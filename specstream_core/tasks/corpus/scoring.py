"""Scores in [0, 1] for free-form chat answers of a small model: ``score(record, answer)``.

What each category's score means (proxies are marked as such):

- **sql** — execution match. The SQL is taken from the first fenced code block (```sql ... ```) that
  holds a query, or else from the first ``SELECT``/``WITH`` up to a ``;`` or blank line. It runs in a
  fresh in-memory SQLite database built from ``check["setup"]`` (text columns compare without regard
  to case, so ``color = 'Silver'`` finds ``silver``) and its result rows are compared with the reference query's
  (as multisets; in order when the reference sorts without LIMIT; floats rounded to 4 places; the
  columns may come in another order). 1 if equal, else 0. When the reference result is empty (about 5%
  of the sql records), an empty answer result only counts if it has the same number of columns, reads
  the same table and has a WHERE clause. Only one read-only statement runs: an authorizer denies everything except reads and
  functions (so ``DROP``, ``INSERT``, ``ATTACH``, ``PRAGMA`` fail), a progress handler aborts after
  ``SQL_STEPS`` VM steps (a recursive CTE that never ends), and values are capped at 1 MB.
- **math** — final-answer accuracy. The number after the last "answer is" / "answer:" / "final
  answer" if present, else the last standalone number in the answer (not "4th"; commas and currency
  signs stripped; "12.0" equals 12), against ``check["answer"]``.
- **qa** — answer-span containment: 1 if any reference answer appears in the answer after lower-casing,
  removing punctuation and articles, and collapsing spaces (SQuAD-style normalisation), else 0.
- **data2text** — slot recall (a proxy for faithfulness and coverage): the fraction of the record's
  attribute values (``check["values"]``; yes/no flags excluded) found in the answer's prose, normalised
  as for qa. Lines that just restate the record (table rows, JSON, ``key[value]``, and ``key: value``
  lines whose value is one of the record's) are ignored, so echoing the input scores 0. Times the repetition factor (below). It does not penalise
  invented facts or judge fluency.
- **translation** — chrF (character n-grams 1–6, β = 2) of the best candidate — the whole answer, any
  line, any quoted or bold span, except spans closer to the source sentence than to the reference (an
  echo of the question) — against the reference. 1.0 only for the exact sentence (up to spacing).
- **code** — write/fix prompts: the answer's code (fenced blocks, else the text from the first ``def``)
  runs with the generated asserts in a separate ``python -I`` process in its own session (temp dir,
  ``CODE_TIMEOUT`` s, memory/CPU/file-size limits; output to a file; the whole process group is
  killed afterwards, so stray children neither survive nor hold the result back); the
  score is the fraction of asserts that pass (0 if the function is missing, the code does not compile,
  or the process dies or times out). A failing usage example after the function does not void it. The
  pass count is read from a line tagged with a random nonce, so printed text cannot fake it. Nothing
  from the answer runs in-process. If the answer renames the function (``clamp`` -> ``clamp_to_range``,
  common for small models), its first top-level function is tested under the asked name.
  explain prompts (reference ``None``): the **proxy** used for instruct, with the function's name and
  parameters as keywords.
- **summarization** — a **proxy**, not ROUGE: 0.7 × recall of the dialogue's key facts
  (``check["keywords"]``: names, days, times, places, amounts) + 0.3 if the length is plausible for a
  summary (5 words up to the dialogue's own length), times the repetition factor. Lines in the
  dialogue's ``Speaker: ...`` form (a speaker of this dialogue) are dropped first, so echoing or
  continuing the dialogue scores 0. It does not check
  that facts are related correctly.
- **instruct** — a **proxy**: 0 for an empty answer or one under 5 words; otherwise 0.5 for a length of
  5–600 words (0.25 beyond) + 0.5 × recall of the instruction's content words (``check["keywords"]``,
  a prefix match so "volcano" counts for "volcanoes"), times the repetition factor. It measures being
  on topic and not looping, not quality.
- **repetition factor** (summarization, data2text, instruct, code explain): distinct word trigrams /
  all word trigrams of the answer, divided by 0.6 and capped at 1 (answers under 12 words: 1). A
  small model's typical failure, and what a lossy decoding mode would add, is looping text
  ("a city of legend, a city of legend, ..."); ordinary prose stays at 1.

These are cheap checks for comparing a base model with stream sets (shared mode must not lose task
score); they are not benchmarks of answer quality.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import time

from .metrics import _ngrams, chrf  # noqa: F401

SQL_STEPS = 2_000_000  # SQLite VM steps (checked every 1000) before a query is aborted
SQL_SECONDS = 2.0
CODE_TIMEOUT = 5.0

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_NUM = re.compile(r"(?<![\w.])-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?![\w])")  # not "4th", "x2", "mp3"


def _normalize(text: str) -> str:
    text = text.lower()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 62,000 -> 62000
    text = re.sub(r"\b(\d{1,2}(?::\d\d)?)\s*([ap])\.?\s?m\b\.?", r"\1 \2m", text)  # 3pm, 3 p.m. -> 3 pm
    text = re.sub(r"[^\w\s.£€$%]|(?<!\d)\.|\.(?!\d)", " ", text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _contains(haystack_norm: str, needle: str) -> bool:
    n = _normalize(needle)
    return bool(n) and re.search(r"(?<!\w)" + re.escape(n) + r"(?!\w)", haystack_norm) is not None


# ------------------------------------------------------------------------------------------------ sql
def extract_sql(answer: str) -> str:
    blocks = [body for lang, body in _FENCE.findall(answer) if lang.lower() in ("sql", "sqlite", "")]
    with_query = [b for b in blocks if re.search(r"\b(SELECT|WITH)\b", b, re.I)]
    text = (with_query or blocks or [answer])[0]
    m = re.search(r"\b(SELECT|WITH)\b", text, re.I)
    if not m:
        return text.strip() if blocks else ""
    sql = text[m.start():]
    sql = re.split(r";|\n\s*\n", sql, maxsplit=1)[0]
    return sql.strip()


_SQL_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_SQL_RECURSIVE = getattr(sqlite3, "SQLITE_RECURSIVE", 33)


def _authorizer(action, *_):
    return sqlite3.SQLITE_OK if action in _SQL_ALLOWED or action == _SQL_RECURSIVE else sqlite3.SQLITE_DENY


def run_sql(setup: list[str], query: str, max_rows: int = 10_000, with_width: bool = False):
    """Rows of ``query`` on a fresh database (with the column count if ``with_width``), or ``None`` if it
    fails, writes, returns too much or runs too long."""
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in setup:  # text compares case-insensitively: 'Silver' finds 'silver'
            conn.execute(re.sub(r"\bTEXT\b", "TEXT COLLATE NOCASE", stmt) if stmt.startswith("CREATE TABLE") else stmt)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.set_authorizer(_authorizer)
        start, steps = time.monotonic(), [0]

        def progress():
            steps[0] += 1000
            return int(steps[0] > SQL_STEPS or time.monotonic() - start > SQL_SECONDS)

        conn.set_progress_handler(progress, 1000)
        cur = conn.execute(query)
        rows = cur.fetchmany(max_rows + 1)
        if len(rows) > max_rows:
            return None
        rows = [tuple(round(v, 4) if isinstance(v, float) else v for v in row) for row in rows]
        return (len(cur.description or ()), rows) if with_width else rows
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError):
        return None
    finally:
        conn.close()


def _row_key(row) -> tuple:
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in row)


def _columns_as_set(rows) -> list:
    return [tuple(sorted(row, key=lambda v: (v is None, type(v).__name__, v if v is not None else 0))) for row in rows]


def score_sql(record: dict, answer: str) -> float:
    check = record["check"]
    query = extract_sql(answer)
    want = run_sql(check["setup"], record["reference"], with_width=True)
    got = run_sql(check["setup"], query, with_width=True) if query else None
    if want is None or got is None or want[0] != got[0]:
        return 0.0
    (_, want), (_, got) = want, got
    if not want:
        table = check["setup"][0].split()[2]
        return float(not got and re.search(rf"\b{re.escape(table)}\b", query, re.I) is not None
                     and re.search(r"\bWHERE\b", query, re.I) is not None)
    for a, b in ((got, want), (_columns_as_set(got), _columns_as_set(want))):
        if check.get("ordered") and a == b:
            return 1.0
        if not check.get("ordered") and sorted(a, key=_row_key) == sorted(b, key=_row_key):
            return 1.0
    return 0.0


# ----------------------------------------------------------------------------------------------- math
def final_number(text: str) -> float | None:
    text = text.replace("$", "").replace("€", "").replace("£", "")
    m = list(re.finditer(r"(?:answer\s*(?:is|:|=)|final answer[^\d-]*)\s*\**\s*(-?[\d,]*\.?\d+)", text, re.I))
    if m:
        raw = m[-1].group(1)
    else:
        nums = _NUM.findall(text)
        if not nums:
            return None
        raw = nums[-1]
    try:
        return float(raw.replace(",", ""))
    except ValueError:
        return None


def score_math(record: dict, answer: str) -> float:
    got = final_number(answer)
    return float(got is not None and math.isclose(got, float(record["check"]["answer"]), abs_tol=1e-6))


# --------------------------------------------------------------------------------------- qa, data2text
def score_qa(record: dict, answer: str) -> float:
    norm = _normalize(answer)
    return float(any(_contains(norm, a) for a in record["check"]["answers"]))


_RECORD_LINE = re.compile(r"^\s*(?:[|{}\[\]]|\"[^\"]{1,30}\"\s*:|.*\w\[[^\]]*\])")
_KEY_VALUE = re.compile(r"^\s*[-*•]?\s*\**([\w ]{1,30})\**\s*[:=]\s*(.+?)\s*[,;.]?\s*$")


def prose(answer: str, values: list[str]) -> str:
    """The answer without lines that restate the record: table rows, JSON, ``key[value]``, and
    ``key: value`` / ``key = value`` lines whose value is one of the record's."""
    wanted = {_normalize(v) for v in values}
    keep = []
    for ln in answer.splitlines():
        kv = _KEY_VALUE.match(ln)
        if _RECORD_LINE.match(ln) or (kv and _normalize(kv.group(2)) in wanted):
            continue
        keep.append(ln)
    return "\n".join(keep)


def score_data2text(record: dict, answer: str) -> float:
    values = record["check"]["values"]
    if not values:
        return 0.0
    norm = _normalize(prose(answer, values).replace("-", " "))
    recall = sum(_contains(norm, v.replace("-", " ")) for v in values) / len(values)
    return recall * repetition_factor(answer)


# ---------------------------------------------------------------------------------------- translation


def score_translation(record: dict, answer: str) -> float:
    ref, src = record["reference"], record["check"].get("source_text", "")
    cands = [ln.strip() for ln in answer.splitlines() if ln.strip()]
    cands += re.findall(r"[\"“«]\s*([^\"”»]+?)\s*[\"”»]", answer) + re.findall(r"\*\*([^*]+)\*\*", answer)
    cands = [c.strip().strip("*").strip() for c in cands]
    # a line or quote that merely repeats the source sentence is not a translation of it
    cands = [answer] + [c for c in cands if not (src and c and chrf(c, src) > chrf(c, ref))]
    return max(chrf(c, ref) for c in cands)


# -------------------------------------------------------------------------------------- code (sandbox)
def extract_code(answer: str) -> str:
    blocks = [body for lang, body in _FENCE.findall(answer) if lang.lower() in ("python", "py", "python3", "")]
    if blocks:
        return "\n\n".join(blocks)
    m = re.search(r"^(?:def|import|from|class)\b", answer, re.M)
    return answer[m.start():] if m else ""


def _limits():  # runs in the child before exec (POSIX)
    import resource

    for what, value in ((resource.RLIMIT_AS, 1 << 30), (resource.RLIMIT_CPU, int(CODE_TIMEOUT) + 1),
                        (resource.RLIMIT_FSIZE, 1 << 20), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(what, (value, value))
        except (ValueError, OSError):
            pass
    os.setsid()


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the answer's process and anything it started (it runs in its own session)."""
    if os.name == "posix":
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    else:
        proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def run_tests(code: str, tests: list[str], timeout: float = CODE_TIMEOUT) -> float:
    """Fraction of ``tests`` (assert lines) that pass after ``code``, run in a separate process."""
    if not code.strip() or not tests:
        return 0.0
    nonce = secrets.token_hex(8)
    # A failing top-level statement (say, a usage example) does not void the answer: the tests still run
    # against whatever it defined before failing. A syntax error defines nothing.
    harness = ["import sys as _s", "_passed = 0", "try:", "    _compiled = compile(_CODE, '<answer>', 'exec')",
               "except BaseException:", "    _s.exit(3)", "try:", "    exec(_compiled, globals())",
               "except BaseException:", "    pass"]
    for t in tests:
        harness += ["try:", f"    exec({t!r}, globals())", "    _passed += 1", "except BaseException:", "    pass"]
    harness.append(f"_s.stdout.write('\\n{nonce} %d\\n' % _passed)")
    program = f"_CODE = {code!r}\n" + "\n".join(harness) + "\n"
    with tempfile.TemporaryDirectory(prefix="specstream-score-") as tmp:
        path = os.path.join(tmp, "check.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(program)
        out_path = os.path.join(tmp, "out.txt")
        # output goes to a file, not a pipe: a child the answer leaves behind cannot hold the result back
        with open(out_path, "wb") as out_file:
            try:
                proc = subprocess.Popen([sys.executable, "-I", "-S", path], cwd=tmp, stdin=subprocess.DEVNULL,
                                        stdout=out_file, stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"},
                                        preexec_fn=_limits if os.name == "posix" else None)
            except OSError:
                return 0.0
            try:
                proc.wait(timeout=timeout)
                finished = True
            except subprocess.TimeoutExpired:
                finished = False
            finally:
                _kill_group(proc)
        if not finished:
            return 0.0
        with open(out_path, "rb") as f:
            out = f.read(1 << 20)
    m = re.search(rf"^{nonce} (\d+)$", out.decode("utf-8", "replace"), re.M)
    return int(m.group(1)) / len(tests) if m else 0.0


def score_code(record: dict, answer: str) -> float:
    check = record["check"]
    if "tests" not in check:
        return score_instruct(record, answer)
    code = extract_code(answer)
    name = check["function"]
    if not re.search(rf"^def\s+{re.escape(name)}\s*\(", code, re.M):
        # small models often rename the function (clamp -> clamp_to_range): test their first one instead
        other = re.search(r"^def\s+([A-Za-z_]\w*)\s*\(", code, re.M)
        if other is None:
            return 0.0
        code += f"\n\n{name} = {other.group(1)}\n"
    return run_tests(code, check["tests"])


# ---------------------------------------------------------------------------- summarization, instruct
def _recall(answer: str, keywords: list[str], prefix: bool = False) -> float:
    if not keywords:
        return 1.0
    norm = _normalize(answer)
    words = norm.split()
    hits = 0
    for k in keywords:
        kn = _normalize(k)
        if _contains(norm, k) or (prefix and len(kn) > 4 and any(w.startswith(kn[:max(5, len(kn) - 2)]) for w in words)):
            hits += 1
    return hits / len(keywords)


def repetition_factor(answer: str, floor: float = 0.6) -> float:
    """1.0 unless the answer loops: distinct word trigrams / all trigrams, scaled so ``floor`` maps to 1."""
    words = _normalize(answer).split()
    if len(words) < 12:
        return 1.0
    grams = list(zip(words, words[1:], words[2:]))
    return min(1.0, len(set(grams)) / len(grams) / floor)


def score_summarization(record: dict, answer: str) -> float:
    # lines in the dialogue's own "Speaker: ..." form restate it: they are not a summary
    speakers = set(re.findall(r"^(\w+): ", record["prompt"], re.M))
    summary = "\n".join(ln for ln in answer.splitlines()
                        if not (m := re.match(r"^\s*\**(\w+)\**:", ln)) or m.group(1) not in speakers)
    words = len(summary.split())
    if words == 0:
        return 0.0
    fits = 5 <= words <= max(20, record["check"].get("dialogue_words", 100))
    return (0.7 * _recall(summary, record["check"]["keywords"]) + 0.3 * fits) * repetition_factor(answer)


def score_instruct(record: dict, answer: str) -> float:
    words = len(answer.split())
    if words < 5:
        return 0.0
    length = 0.5 if words <= 600 else 0.25
    return (length + 0.5 * _recall(answer, record["check"]["keywords"], prefix=True)) * repetition_factor(answer)


SCORERS = {"sql": score_sql, "summarization": score_summarization, "data2text": score_data2text, "math": score_math,
           "qa": score_qa, "code": score_code, "translation": score_translation, "instruct": score_instruct}


def score(record: dict, answer: str) -> float:
    """The record's category score of ``answer`` (a model's reply, chat template removed), in [0, 1]."""
    try:
        fn = SCORERS[record["category"]]
    except KeyError:
        raise ValueError(f"unknown category {record.get('category')!r}") from None
    return float(min(1.0, max(0.0, fn(record, answer or ""))))

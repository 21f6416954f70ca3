"""The JSONL files of `generate-batch` (`pipeline.py`): reading input lines (one error record per bad
line, never a crash), checking text, and scanning an output file for what a resumed run may skip."""

from __future__ import annotations

import codecs
import json
import os

from specstream_core.errors import SpecstreamError

RESERVED = ("id", "prompt")  # input fields the pipeline reads; everything else is carried under "extra"
MAX_LISTED = 20


def read_objects(path: str, what: str = "data"):
    """(line number, object) for each non-empty line of a JSONL file of JSON objects (a UTF-8 BOM is
    allowed); a missing file or a bad line raises one SpecstreamError naming the file and the line."""
    if not os.path.isfile(path):
        raise SpecstreamError(f"{what} file not found: {path}")
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecstreamError(f"cannot read {what} file {path}: {exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise SpecstreamError(f"{path}:{n}: not valid JSON") from None
        if not isinstance(obj, dict):
            raise SpecstreamError(f"{path}:{n}: expected a JSON object")
        yield n, obj


def _key(value) -> str:
    """Ids compare as JSON values: 1 and "1" are different ids."""
    return json.dumps(value)


def _parse_line(text: str, line: int) -> tuple[dict | None, str | None]:
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"line {line}: invalid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(rec, dict):
        return None, f"line {line}: expected a JSON object with \"id\" and \"prompt\", got {type(rec).__name__}"
    if "id" not in rec:
        return None, f"line {line}: missing \"id\""
    if isinstance(rec["id"], bool) or not isinstance(rec["id"], (str, int)):
        return None, f"line {line}: \"id\" must be a string or an integer, got {json.dumps(rec['id'])}"
    if "prompt" not in rec:
        return None, f"line {line}: missing \"prompt\" (id {json.dumps(rec['id'])})"
    if not isinstance(rec["prompt"], str):
        return None, f"line {line}: \"prompt\" must be a string (id {json.dumps(rec['id'])})"
    return rec, None


def scan_input(path: str) -> int:
    """Check every line's structure before anything runs; the number of prompts. Raises on bad lines."""
    if not os.path.isfile(path):
        raise SpecstreamError(f"input file {path} does not exist")
    problems, first_line = [], {}
    for line, text in _input_lines(path):
        if not text.strip():
            continue
        rec, problem = _parse_line(text, line)
        if problem is None:
            key = _key(rec["id"])
            if key in first_line:
                problem = f"line {line}: duplicate id {key} (first on line {first_line[key]})"
            else:
                first_line[key] = line
        if problem:
            problems.append(problem)
    if problems:
        listed = "; ".join(problems[:MAX_LISTED]) + ("; …" if len(problems) > MAX_LISTED else "")
        raise SpecstreamError(f"{len(problems)} bad line(s) in {path}, nothing was generated: {listed}")
    if not first_line:
        raise SpecstreamError(f"input file {path} holds no prompts")
    return len(first_line)


def _input_lines(path: str):
    """(line number, text) for each line of a UTF-8 input file; a leading byte-order mark is skipped.

    Lines end at "\\n" only (as the readers' `open(..., newline="\\n")`) and are decoded one at a time, so
    that a byte that is not UTF-8 is reported with its own line number."""
    with open(path, "rb") as f:
        for line, raw in enumerate(f, start=1):
            if line == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                yield line, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SpecstreamError(f"input file {path} is not UTF-8 text: line {line}, byte {exc.start + 1} "
                                      f"(0x{raw[exc.start]:02x}); save it as UTF-8") from None


def not_unicode(value, where: str = "") -> str | None:
    """Where in a parsed JSON value a lone surrogate such as "\\ud800" sits (valid JSON, but no Unicode text:
    a tokenizer refuses it and a UTF-8 file cannot hold it), as `"field"` or `"field"."inner"[2]`; None when clean."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the value"
    elif isinstance(value, dict):
        for k, v in value.items():
            name = (where + "." if where else "") + json.dumps(k)  # ASCII: a field name may hold one too
            found = not_unicode(k, f"{name} (its name)") or not_unicode(v, name)
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = not_unicode(v, f"{where}[{i}]")
            if found:
                return found
    return None


def check_unicode(rec: dict) -> None:
    where = not_unicode(rec)
    if where:
        raise SpecstreamError(f"field {where} holds a lone surrogate (such as \\ud800), which is not Unicode text")


def _output_record(raw: bytes) -> dict | None:
    """An output line parsed as a record with an id, or None."""
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) and "id" in rec else None


def scan_output(path: str) -> tuple[set[str], int, object, bool]:
    """(ids already written, error records among them, last id, whether a truncated last line was cut)."""
    done, errors, last = set(), 0, None
    if not os.path.exists(path):
        return done, errors, last, False
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    partial = lines.pop()  # after the last newline: b"" when the file ends in one
    whole_tail = bool(partial.strip()) and _output_record(partial) is not None  # a record missing only its newline
    if whole_tail:
        lines.append(partial)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        rec = _output_record(raw)
        if rec is None:
            raise SpecstreamError(f"output file {path} line {number} is not a JSON record with an \"id\"; "
                                  f"fix or move the file before resuming")
        done.add(_key(rec["id"]))
        errors += "error" in rec
        last = rec["id"]
    repaired = bool(partial.strip()) and not whole_tail
    if whole_tail:  # keep it, and end it so the next record starts on its own line
        with open(path, "ab") as f:
            f.write(b"\n")
    elif partial:  # a killed run's partial write
        with open(path, "r+b") as f:
            f.truncate(len(data) - len(partial))
    return done, errors, last, repaired

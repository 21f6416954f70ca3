"""No tracked file narrates the work that built the project or cites an internal issue number: the project
speaks of itself, and the git log keeps its history.

What counts (each pattern names what it stands for):
- an issue or pull-request reference: `#12` after a space or bracket (not a C preprocessor line, a CSS colour,
  a heading or a URL's anchor), "issue 12", "PR 12", "the issue's";
- a work session: the word "session" where it means one (`gr`/HTTP sessions and the like are code);
- an ordinal account of the work: "since the eighteenth", "the ninth ...'s run", "fifth trial";
- a date of work in prose: an ISO date (2026-12-03) outside result data (JSON under a `bench/` folder, training
  logs, recorded traces), where it is a measurement's record, not an account."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = (".py", ".md", ".txt", ".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".json", ".c", ".h", ".html",
        ".css", ".js", ".svg")
ORDINAL = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
           r"fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|twenty-\w+)")
PATTERNS = {
    "issue reference": re.compile(r"(?:^|[\s(\[,;])#\d{1,4}(?:'s)?(?![\w.])"),
    "issue number": re.compile(r"\b(?:issue|issues|PR|pull request)\s+#?\d+\b|\b(?:the|this|that) (?:issue|ticket)'s\b|"
                               r"\b(?:the|this) (?:issue|ticket) (?:asks|says|wants|requires)\b", re.I),
    "work session": re.compile(r"\b(?:previous|earlier|later|next|prior|past|helper|work|coding) sessions?\b|"
                               r"\bsessions? \d+\b|\bin (?:this|that|one) session\b", re.I),
    "ordinal account": re.compile(rf"\bsince the {ORDINAL}\b|\bthe {ORDINAL}\b[^.\n]{{0,40}}'s (?:run|work|change)|"
                                  rf"\b{ORDINAL} (?:trial|attempt|wave)s?\b", re.I),
    "date of work": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p.endswith(TEXT) and os.path.isfile(os.path.join(ROOT, p))]


def _data_with_dates(path: str) -> bool:
    """Result data, where a date is a measurement's record: files under a bench/ folder, training logs, traces."""
    parts = path.split("/")
    return "bench" in parts[:-1] or "traces" in parts[:-1] or parts[-1] == "train_log.json"


def _skip_line(name: str, line: str, path: str) -> bool:
    """C preprocessor lines, Markdown headings and CSS colours are not issue references."""
    stripped = line.lstrip()
    if name != "issue reference":
        return False
    return (path.endswith((".c", ".h")) and stripped.startswith("#") or stripped.startswith("# ")
            or re.search(r"(?:color|background|border|fill|stroke|outline)[\w-]*\s*:", line) is not None)


def hits(paths: list[str]) -> list[str]:
    """'path:line: what: text' for every line that narrates the work or cites an issue number."""
    this = os.path.relpath(os.path.abspath(__file__), ROOT)
    found = []
    for path in paths:
        if path == this:
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines, 1):
            for name, pattern in PATTERNS.items():
                if name == "date of work" and _data_with_dates(path):
                    continue
                if pattern.search(line) and not _skip_line(name, line, path):
                    found.append(f"{path}:{i}: {name}: {line.strip()[:160]}")
    return found


@pytest.mark.parametrize("text,expected", [
    ("as #11's kernel showed", True), ("fixed in issue 42", True), ("see PR #7", True),
    ("measured in the previous session", True), ("since the eighteenth change", True),
    ("the ninth helper's run", True), ("Shared mode, fifth trial", True), ("(2026-12-03)", True),
    ("#include <stdint.h>", False), ('color: "#fff"', False), ("see METHOD.md#4", False),
    ("come from the issue's trial", True), ("a session's trace, after its last update", False), ("a later session starts from them", True),
    ("color: #555;", False), ("the second round of the load test", False), ("the first stream's guess", False), ("arXiv 2402.11131", False),
])
def test_patterns_tell_narration_from_code(tmp_path, text, expected):
    found = any(p.search(text) and not _skip_line(n, text, "x.md") for n, p in PATTERNS.items())
    assert found is expected, text


def test_no_tracked_file_narrates_the_work():
    found = hits(_tracked())
    assert not found, f"{len(found)} lines narrate the work or cite an issue number:\n" + "\n".join(found[:60])

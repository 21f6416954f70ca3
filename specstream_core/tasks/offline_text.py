"""General English and Python text for pretraining, from files already on the machine.

Sources, used when present (Debian: ``apt-get install -y fortunes-min wordnet-base dict-jargon
sqlite3-doc``): fortune cookies, WordNet glosses, the Jargon File, the SQLite documentation.
The Python standard library's own source (docstrings, comments and code) is always available and is
the fallback, so ``documents()`` never needs anything beyond Python itself. Output is deterministic for
a given set of installed files (sorted paths, fixed caps).
"""

from __future__ import annotations

import gzip
import html
import re
import sysconfig
from pathlib import Path
from typing import Iterator

FORTUNES = Path("/usr/share/games/fortunes")
WORDNET = Path("/usr/share/wordnet")
JARGON = Path("/usr/share/dictd/jargon.dict.dz")
SQLITE_DOCS = Path("/usr/share/doc/sqlite3")
APT_HINT = "apt-get install -y fortunes-min wordnet-base dict-jargon sqlite3-doc"

_TAG = re.compile(r"<[^>]+>")
_SPACES = re.compile(r"[ \t]+")


def _fortunes() -> Iterator[str]:
    for name in ("fortunes", "literature", "riddles"):
        path = FORTUNES / name
        if path.is_file():
            for chunk in path.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
                chunk = chunk.strip()
                if 20 <= len(chunk) <= 1200:
                    yield chunk


def _wordnet() -> Iterator[str]:
    for pos in ("noun", "verb", "adj", "adv"):
        path = WORDNET / f"data.{pos}"
        if not path.is_file():
            continue
        lines = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            fields = line.split()
            word = fields[4].replace("_", " ")
            lines.append(f"{word}: {line.split('|', 1)[1].strip()}")
            if len(lines) == 20:  # group glosses into small documents
                yield "\n".join(lines)
                lines = []


def _jargon() -> Iterator[str]:
    if not JARGON.is_file():
        return
    text = gzip.open(JARGON, "rt", encoding="utf-8", errors="replace").read()
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(line.strip() for line in para.splitlines()).strip()
        if 80 <= len(para) <= 2000:
            yield para


def _sqlite_docs() -> Iterator[str]:
    if not SQLITE_DOCS.is_dir():
        return
    for path in sorted(SQLITE_DOCS.glob("*.html")):
        raw = path.read_text(encoding="utf-8", errors="replace")
        raw = re.sub(r"(?is)<(script|style)[^>]*>.*?</\1>", " ", raw)
        for para in re.split(r"(?i)</?p>|<br>|</h\d>|</li>", raw):
            para = html.unescape(_SPACES.sub(" ", _TAG.sub(" ", para))).strip()
            para = re.sub(r"\s*\n\s*", " ", para)
            if 80 <= len(para) <= 2000:
                yield para


def _python_stdlib(max_file_chars: int = 12000) -> Iterator[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.glob("*.py")):  # top-level modules only: no tests, no vendored packages
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        text = text[:max_file_chars]
        for block in re.split(r"\n(?=def |class )", text):
            block = block.strip()
            if 80 <= len(block) <= 3000:
                yield block


SOURCES = {
    "fortunes": _fortunes,
    "wordnet": _wordnet,
    "jargon": _jargon,
    "sqlite-docs": _sqlite_docs,
    "python-stdlib": _python_stdlib,
}


def available_sources() -> list[str]:
    found = [name for name, fn in SOURCES.items() if next(fn(), None) is not None]
    return found


def documents(max_chars: int, sources: list[str] | None = None) -> list[str]:
    """Up to ``max_chars`` of text, taken round-robin from every available source."""
    names = available_sources() if sources is None else sources
    if not names:
        raise RuntimeError(f"no offline text found (not even the Python stdlib at {sysconfig.get_paths()['stdlib']})")
    iters = [SOURCES[name]() for name in names]
    out, total = [], 0
    while iters and total < max_chars:
        for it in list(iters):
            doc = next(it, None)
            if doc is None:
                iters.remove(it)
                continue
            out.append(doc)
            total += len(doc)
            if total >= max_chars:
                break
    return out


if __name__ == "__main__":
    docs = documents(200_000)
    print(f"sources: {available_sources()} (missing ones: {APT_HINT!r}); {len(docs)} docs")
    print(docs[0][:500])

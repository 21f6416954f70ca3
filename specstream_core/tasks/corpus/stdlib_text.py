"""Offline text for the chat corpus: docstrings, signatures and short sources of Python's standard library.

The corpus must be identical on every machine, but the standard library's text changes a little
between Python releases. So the text is read once (``python -m specstream_core.tasks.corpus.stdlib_text``,
run under Python 3.11) with ``ast`` (nothing is imported or executed) from a fixed list of modules, and
the snapshot is stored in ``data/stdlib_docs.json.gz`` (the Python Software Foundation License allows
redistribution). ``entries()`` reads the snapshot; rebuilding it is only needed to refresh the text.

Each entry: ``{"module", "name", "signature", "params": [[name, default or None], ...], "doc", "code"}``;
``code`` is the function's source when it is a short, self-contained top-level function, else ``None``.
"""

from __future__ import annotations

import ast
import functools
import gzip
import inspect
import json
import sysconfig
from pathlib import Path
from .base import material_split
import platform

SNAPSHOT = Path(__file__).with_name("data") / "stdlib_docs.json.gz"

# Well-known pure-Python modules (path relative to the stdlib root). Sorted; the order is the snapshot's.
MODULES = sorted([
    "abc.py", "argparse.py", "base64.py", "bisect.py", "calendar.py", "cmd.py", "code.py", "codecs.py",
    "collections/__init__.py", "colorsys.py", "configparser.py", "contextlib.py", "copy.py", "csv.py",
    "dataclasses.py", "datetime.py", "difflib.py", "dis.py", "email/utils.py", "enum.py", "filecmp.py",
    "fileinput.py", "fnmatch.py", "fractions.py", "ftplib.py", "functools.py", "genericpath.py",
    "getopt.py", "gettext.py", "glob.py", "gzip.py", "hashlib.py", "heapq.py", "hmac.py", "html/__init__.py",
    "http/cookies.py", "imaplib.py", "inspect.py", "ipaddress.py", "json/__init__.py", "json/decoder.py",
    "json/encoder.py", "keyword.py", "linecache.py", "locale.py", "logging/__init__.py", "lzma.py",
    "mailbox.py", "mimetypes.py", "netrc.py", "ntpath.py", "numbers.py", "operator.py", "optparse.py",
    "os.py", "pathlib.py", "pickle.py", "pkgutil.py", "platform.py", "plistlib.py", "poplib.py",
    "posixpath.py", "pprint.py", "queue.py", "quopri.py", "random.py", "re/__init__.py", "reprlib.py",
    "sched.py", "secrets.py", "selectors.py", "shelve.py", "shlex.py", "shutil.py", "smtplib.py",
    "socket.py", "socketserver.py", "statistics.py", "string.py", "struct.py", "subprocess.py",
    "tarfile.py", "tempfile.py", "textwrap.py", "threading.py", "timeit.py", "tokenize.py", "trace.py",
    "traceback.py", "types.py", "typing.py", "urllib/parse.py", "urllib/request.py", "uuid.py",
    "warnings.py", "wave.py", "weakref.py", "xml/dom/minidom.py", "zipfile.py", "zipimport.py",
])
PER_MODULE = 24


def _module_name(rel: str) -> str:
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _params(fn: ast.FunctionDef) -> list[list]:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
    out = [[p.arg, d] for p, d in zip(positional, defaults)]
    if a.vararg:
        out.append(["*" + a.vararg.arg, None])
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append([p.arg, None if d is None else ast.unparse(d)])
    if a.kwarg:
        out.append(["**" + a.kwarg.arg, None])
    return [p for p in out if p[0] not in ("self", "cls")]


def _extract(root: Path, rel: str) -> list[dict]:
    text = (root / rel).read_text(encoding="utf-8")
    tree = ast.parse(text)
    module = _module_name(rel)
    lines = text.splitlines()
    out = []
    nodes = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            nodes.append((node.name, node, True))
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef) and not sub.name.startswith("_"):
                        nodes.append((f"{node.name}.{sub.name}", sub, False))
    for name, node, top in nodes:
        doc = ast.get_docstring(node)
        if not doc:
            continue
        doc = inspect.cleandoc(doc).strip()
        if not 80 <= len(doc) <= 900 or ">>>" in doc:
            continue
        if isinstance(node, ast.FunctionDef):
            params = _params(node)
            sig = f"{name}(" + ", ".join(p if d is None else f"{p}={d}" for p, d in params) + ")"
        else:
            init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
            params = _params(init) if init else []
            sig = f"{name}(" + ", ".join(p if d is None else f"{p}={d}" for p, d in params) + ")"
        code = None
        if top and isinstance(node, ast.FunctionDef) and not node.decorator_list:
            src = "\n".join(lines[node.lineno - 1: node.end_lineno])
            if 4 <= src.count("\n") + 1 <= 30 and len(src) <= 1500:
                code = src
        out.append({"module": module, "name": name, "signature": sig, "params": params, "doc": doc, "code": code})
        if len(out) >= PER_MODULE:
            break
    return out


def build(root: Path | None = None) -> list[dict]:
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    out = []
    for rel in MODULES:
        if (root / rel).is_file():
            out.extend(_extract(root, rel))
    return out


@functools.lru_cache(maxsize=1)
def entries() -> tuple[dict, ...]:
    """The stored snapshot (identical on every machine)."""
    with gzip.open(SNAPSHOT, "rt", encoding="utf-8") as f:
        return tuple(json.load(f))


@functools.lru_cache(maxsize=None)
def stdlib_items(split: str, with_code: bool = False) -> tuple[dict, ...]:
    """Entries whose module is reserved for ``split`` (modules are partitioned by hash)."""
    return tuple(e for e in entries() if material_split(f"stdlib-module/{e['module'].split('.')[0]}") == split
                 and ((e["code"] and len(e["code"]) <= 900) or not with_code))


def brief(doc: str, limit: int = 600) -> str:
    """The docstring's leading paragraphs, up to about ``limit`` characters (prompts stay short)."""
    out = ""
    for para in doc.split("\n\n"):
        if out and len(out) + len(para) + 2 > limit:
            break
        out = f"{out}\n\n{para}" if out else para
    return out[: limit + 300]


def main() -> None:
    data = build()
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(data, ensure_ascii=False, indent=0).encode("utf-8")
    with open(SNAPSHOT, "wb") as f:  # mtime 0: the same bytes on every rebuild
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
            gz.write(raw)
    print(f"{len(data)} entries from {len(MODULES)} modules of Python {platform.python_version()} -> {SNAPSHOT}")


if __name__ == "__main__":
    main()

"""The README and docs/BENCHMARKS.md: short enough to read, and their figures made by `report` from the result
files in docs/bench/ (regenerating them changes nothing)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from specstream_core.bench import report
from specstream_core.bench.provenance import stamp
from specstream_core.cli import main
from specstream_core.errors import SpecstreamError
from specstream_core.bench.report_sources import FOLDERS, kind_of, load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURE = re.compile(r"\d(?:[\d,]*\.\d+)?\s*(?:×|tokens/s|tok/s|ms\b|MB\b|GB\b|%)")


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def reader_words(markdown: str) -> int:
    """Words as a reader counts them: no front matter, HTML tags or comments, link targets or table rules."""
    text = re.sub(r"\A---\n.*?\n---\n", "", markdown, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"^\|?[\s|:-]+\|?$", " ", text, flags=re.M)
    return len([w for w in re.split(r"[\s|]+", text) if re.search(r"\w", w)])


def test_readme_is_short_and_opens_with_picture_commands_and_results():
    text = _readme()
    assert text.startswith("---\n") and "app_file: app.py" in text.split("---")[1]  # the Space's front matter
    assert reader_words(text) <= 1500, reader_words(text)
    body = text.split("---", 2)[2]
    first = [body.index(s) for s in ("docs/screenshots/", "## Two commands", "<!-- results:begin -->")]
    assert first == sorted(first) and first[-1] < len(body) // 3  # the picture, the commands, the table, up top
    assert "arxiv.org/abs/2402.11131" in body and "llama.cpp" in body


def test_the_generated_parts_are_current():
    assert report.check(ROOT) == [], "run `python -m specstream_core report`"


def test_figures_outside_the_generated_parts_are_none():
    """Every measured figure in the README sits in a generated block (so it comes from a result file)."""
    text = re.sub(r"<!-- (\S+):begin -->.*?<!-- \1:end -->", "", _readme(), flags=re.S)
    assert not FIGURE.findall(text), FIGURE.findall(text)


def test_every_table_names_its_command_and_host_and_the_page_is_short():
    sources = load(ROOT)
    assert {s.kind for s in sources} >= {"speed", "bench", "draft-tau", "pass-cost", "batch", "footprint"}
    for s in sources:
        assert s.command.startswith("python -m specstream_core ") and s.host, s.path
    with open(os.path.join(ROOT, report.PAGE)) as f:
        page = f.read()
    assert len(page.splitlines()) <= 400
    used = {s.name for s in sources}
    stems = {os.path.splitext(n)[0] for n in used}
    unused = [n for folder in FOLDERS for n in os.listdir(os.path.join(ROOT, folder))
              if n not in used and not (os.path.splitext(n)[1] in (".md", ".svg") and os.path.splitext(n)[0] in stems)]
    # a shown file's table or figure may stay beside it
    assert not unused, f"docs/bench holds files the page does not show: {sorted(unused)}"


def _copy(tmp_path) -> str:
    root = str(tmp_path / "repo")
    for folder in FOLDERS:
        shutil.copytree(os.path.join(ROOT, folder), os.path.join(root, folder))
    shutil.copy(os.path.join(ROOT, "README.md"), root)
    shutil.copytree(os.path.join(ROOT, report.STREAM_SET), os.path.join(root, report.STREAM_SET),
                    ignore=shutil.ignore_patterns("*.safetensors", "*.npz"))
    return root


def test_figures_follow_the_files_and_a_new_file_appears(tmp_path):
    root = _copy(tmp_path)
    speed = os.path.join(root, "docs", "bench", report.README_SPEED)
    with open(speed) as f:
        data = json.load(f)
    data["rows"][0]["tokens_per_s"] = 12345.6
    with open(speed, "w") as f:
        json.dump(data, f)
    with open(os.path.join(ROOT, "docs", "bench", "pass-cost.json")) as f:
        cost = json.load(f)
    cost["title"], cost["runs"] = "A new model family", cost["runs"][:1]
    with open(os.path.join(root, "docs", "bench", "pass-cost-new.json"), "w") as f:
        json.dump(cost, f)
    os.remove(os.path.join(root, "docs", "bench", "footprint.json"))  # a missing file is tolerated
    assert set(report.check(root)) == {report.PAGE, report.README}
    assert main(["report", "--check", "--root", root]) == 1
    assert main(["report", "--root", root]) == 0
    readme, page = (open(os.path.join(root, p)).read() for p in (report.README, report.PAGE))
    assert "12345.6" in readme and "12345.6" in page and "### A new model family" in page
    assert "## Footprint" in page and main(["report", "--check", "--root", root]) == 0


def test_result_files_record_their_command_and_host():
    rows = [{"precision": "fp32", "load_s": 1.0, "peak_rss_mb": 900.0}]
    made = stamp(rows, "python -m specstream_core footprint --json f.json")
    assert made["command"].endswith("--json f.json") and made["host"] and made["rows"] == rows
    assert kind_of(made) == "footprint" and kind_of(stamp({"runs": []}, "x")) == "pass-cost"
    assert list(stamp({"runs": [], "host": "old"}, "c"))[:2] == ["command", "host"]


def test_a_file_report_cannot_read_is_named(tmp_path):
    root = _copy(tmp_path)
    with open(os.path.join(root, "docs", "bench", "pass-cost-odd.json"), "w") as f:
        json.dump({"runs": [{"label": "x", "passes": [{"nodes": 1}]}]}, f)
    with pytest.raises(SpecstreamError, match="pass-cost-odd.json"):
        report.check(root)

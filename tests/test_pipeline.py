"""generate-batch: order, equality with one-by-one decoding, resume, loud failures, malformed input."""

import json
import time

import pytest

from specstream_core import DecodeConfig, Engine, SpecstreamError
from specstream_core.io import pipeline
from specstream_core.cli import main
from tiny_models import save_tiny_model_dir

PROMPTS = ["abc", "hello world", "z", "the quick brown fox", "ab ab ab", "qrstuv", "mn", "lorem ipsum dolor"]
CFG = DecodeConfig(mode="ss", max_new_tokens=6, tree_topk=(3, 2, 1))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def engine(model_dir):
    return Engine.load(model_dir, gamma=3)


@pytest.fixture(scope="module")
def expected(engine):
    return {i: engine.generate(p, CFG).token_ids for i, p in enumerate(PROMPTS)}


def write_input(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def read_output(path):
    return [json.loads(line) for line in open(path)]


def rows(indices=range(len(PROMPTS))):
    return [{"id": i, "prompt": PROMPTS[i], "category": "t"} for i in indices]


class Spy:
    """Counts the engine's batch calls and the prompts it was given; can fail on a chosen call."""

    def __init__(self, engine, fail_on_call=None, batch_api=True):
        self.engine, self.calls, self.fail_on_call = engine, [], fail_on_call
        if batch_api:
            self.generate_batch = self._generate_batch

    def _generate_batch(self, prompts, cfg):
        self.calls.append(len(prompts))
        if self.fail_on_call == len(self.calls):
            raise RuntimeError("injected model failure")
        return self.engine.generate_batch(prompts, cfg)

    def generate(self, prompt, cfg):
        self.calls.append(1)
        if self.fail_on_call == len(self.calls):
            raise RuntimeError("injected model failure")
        return self.engine.generate(prompt, cfg)

    def __getattr__(self, name):
        if name == "generate_batch":  # batch_api=False: an engine without the batch API
            raise AttributeError(name)
        return getattr(self.engine, name)


@pytest.mark.parametrize("batch_api", [True, False])
def test_order_kept_and_equal_to_one_by_one(engine, expected, tmp_path, batch_api):
    if batch_api and not hasattr(engine, "generate_batch"):
        pytest.skip("the engine has no generate_batch yet")
    spy = Spy(engine, batch_api=batch_api)
    out = tmp_path / "out.jsonl"
    summary = pipeline.run(spy, write_input(tmp_path / "in.jsonl", rows()), str(out), CFG, batch_size=3, progress=False)
    records = read_output(out)
    assert [r["id"] for r in records] == list(range(len(PROMPTS)))
    for r in records:
        assert r["token_ids"] == expected[r["id"]], r["id"]
        assert r["text"] == engine.decode_text(r["token_ids"])
        assert r["stats"]["new_tokens"] == len(r["token_ids"])
        assert r["extra"] == {"category": "t"}
    assert spy.calls == ([3, 3, 2] if batch_api else [1] * len(PROMPTS))
    assert (summary.written, summary.skipped, summary.errors) == (len(PROMPTS), 0, 0)


def test_resume_skips_written_ids_and_repairs_a_truncated_line(engine, expected, tmp_path):
    inp = write_input(tmp_path / "in.jsonl", rows())
    out = tmp_path / "out.jsonl"
    pipeline.run(engine, write_input(tmp_path / "first.jsonl", rows(range(3))), str(out), CFG, batch_size=2,
                 progress=False)
    with open(out, "a") as f:  # a killed run: half of record 3
        f.write(json.dumps({"id": 3, "text": "x", "token_ids": [1, 2]})[:15])
    spy = Spy(engine, batch_api=False)
    summary = pipeline.run(spy, inp, str(out), CFG, batch_size=2, progress=False)
    assert summary.repaired and summary.skipped == 3 and summary.written == len(PROMPTS) - 3
    assert sum(spy.calls) == len(PROMPTS) - 3  # only the missing ids were generated
    records = read_output(out)
    assert [r["id"] for r in records] == list(range(len(PROMPTS)))
    assert all(r["token_ids"] == expected[r["id"]] for r in records)
    # a finished run: nothing to do, the engine is not even loaded
    summary = pipeline.run(lambda: pytest.fail("loaded the model with nothing to do"), inp, str(out), CFG,
                           progress=False)
    assert summary.written == 0 and summary.skipped == len(PROMPTS)
    assert len(read_output(out)) == len(PROMPTS)


@pytest.mark.parametrize("stage", ["generator", "reader", "writer"])
def test_a_crashing_worker_fails_loudly_and_reports_what_was_written(engine, tmp_path, stage, monkeypatch, capsys):
    spy = Spy(engine, fail_on_call=3 if stage == "generator" else None, batch_api=False)
    if stage == "reader":
        calls = []
        real_copy = pipeline._own_copy

        def failing_copy(tokenizer):
            tok = real_copy(tokenizer)

            def encode(text, **kw):
                calls.append(text)
                if len(calls) == 4:
                    raise RuntimeError("injected tokenizer failure")
                return tok(text, **kw)
            return encode
        monkeypatch.setattr(pipeline, "_own_copy", failing_copy)
    if stage == "writer":
        real = pipeline._Run._write_one

        def failing_write(self, out, item, bar):
            if item.seq == 2:
                raise OSError("injected disk failure")
            return real(self, out, item, bar)
        monkeypatch.setattr(pipeline._Run, "_write_one", failing_write)
    out = tmp_path / "out.jsonl"
    t0 = time.perf_counter()
    with pytest.raises(pipeline.PipelineError) as info:
        pipeline.run(spy, write_input(tmp_path / "in.jsonl", rows()), str(out), CFG, batch_size=1, progress=False)
    assert time.perf_counter() - t0 < 20
    message = str(info.value)
    assert f"the {stage} stage failed" in message and "injected" in message
    ids = [r["id"] for r in read_output(out)] if out.exists() else []
    assert ids == list(range(len(ids)))  # whole lines only, in order
    if stage != "reader":  # the reader fails ahead of generation: how far the generator got varies
        assert ids == [0, 1]
    assert f"wrote {len(ids)} record(s)" in message
    assert f"last id in the file: {ids[-1] if ids else 'none'}" in message
    assert "Traceback" in capsys.readouterr().err  # an unexpected crash shows where it happened


def test_cli_end_to_end_with_crash_and_resume(model_dir, expected, tmp_path, monkeypatch, capsys):
    inp = write_input(tmp_path / "in.jsonl", rows())
    out = str(tmp_path / "out.jsonl")
    args = ["generate-batch", "--base", model_dir, "--gamma", "3", "--topk", "3,2,1", "--max-new-tokens", "6",
            "--input", inp, "--output", out, "--batch-size", "3"]
    real = Engine.generate_batch if hasattr(Engine, "generate_batch") else None
    method = "generate_batch" if real is not None else "generate"
    original = getattr(Engine, method)
    state = {"calls": 0}

    def flaky(self, *a, **kw):
        state["calls"] += 1
        if state["calls"] == 2:
            raise RuntimeError("injected model failure")
        return original(self, *a, **kw)
    monkeypatch.setattr(Engine, method, flaky)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "error: the generator stage failed" in err and "rerun the same command to resume" in err
    written = len(read_output(out))
    assert 0 < written < len(PROMPTS)
    monkeypatch.setattr(Engine, method, original)
    assert main(args) == 0
    records = read_output(out)
    assert [r["id"] for r in records] == list(range(len(PROMPTS)))
    assert all(r["token_ids"] == expected[r["id"]] for r in records)


@pytest.mark.parametrize("line,needle", [
    ("{not json", "invalid JSON"),
    ('["a"]', "JSON object"),
    ('{"prompt": "abc"}', "missing \"id\""),
    ('{"id": 1.5, "prompt": "abc"}', "\"id\" must be"),
    ('{"id": 7}', "missing \"prompt\""),
    ('{"id": 7, "prompt": 3}', "\"prompt\" must be a string"),
    ('{"id": 0, "prompt": "again"}', "duplicate id 0 (first on line 1)"),
])
def test_malformed_lines_abort_before_anything_runs(tmp_path, line, needle):
    inp = write_input(tmp_path / "in.jsonl", rows(range(2)) + [line])
    out = tmp_path / "out.jsonl"
    with pytest.raises(SpecstreamError) as info:
        pipeline.run(lambda: pytest.fail("loaded the model for bad input"), inp, str(out), CFG, progress=False)
    assert "line 3" in str(info.value) and needle in str(info.value)
    assert not out.exists()


def test_unusable_prompts_become_error_records(model_dir, tmp_path, capsys):
    inp = write_input(tmp_path / "in.jsonl", [{"id": "a", "prompt": "abc"}, {"id": "b", "prompt": "   "},
                                              {"id": "c", "prompt": "x" * 80}, "", {"id": "d", "prompt": "hello"}])
    out = str(tmp_path / "out.jsonl")
    assert main(["generate-batch", "--base", model_dir, "--max-new-tokens", "4", "--mode", "ar", "--no-progress",
                 "--input", inp, "--output", out]) == 1
    records = read_output(out)
    assert [r["id"] for r in records] == ["a", "b", "c", "d"]
    assert "empty" in records[1]["error"] and "context length" in records[2]["error"]
    assert "token_ids" in records[0] and "token_ids" in records[3]
    err = capsys.readouterr().err
    assert "input line 2 (id \"b\")" in err and "input line 3 (id \"c\")" in err
    assert "holds 2 error record(s)" in err
    # resuming keeps the error records and still reports them
    assert main(["generate-batch", "--base", model_dir, "--input", inp, "--output", out, "--mode", "ar",
                 "--max-new-tokens", "4"]) == 1
    assert len(read_output(out)) == 4


def test_bad_settings_and_files(tmp_path, capsys):
    inp = write_input(tmp_path / "in.jsonl", rows(range(2)))
    assert main(["generate-batch", "--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["generate-batch", "--input", str(empty), "--output", str(tmp_path / "o")]) == 2
    assert "no prompts" in capsys.readouterr().err
    assert main(["generate-batch", "--input", inp, "--output", str(tmp_path / "o"), "--batch-size", "0"]) == 2
    assert "batch size" in capsys.readouterr().err
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": 0, "prompt": "caf\xe9"}\n')
    assert main(["generate-batch", "--input", str(latin), "--output", str(tmp_path / "o")]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text('{"id": 0, "text": "x"}\nnot json\n{"id": 1}\n')
    with pytest.raises(SpecstreamError, match="line 2"):
        pipeline.run(lambda: None, inp, str(corrupt), CFG, progress=False)


def test_poisoned_lines_become_error_records_and_the_run_goes_on(engine, expected, tmp_path, capsys):
    """A lone surrogate is valid JSON but no text: it used to stop the run (tokenizer TypeError, writer
    UnicodeEncodeError) with nothing written, on every rerun."""
    lines = [{"id": 0, "prompt": PROMPTS[0]},
             {"id": 1, "prompt": "ab\ud800c"},  # the tokenizer refuses it
             {"id": 2, "prompt": PROMPTS[2], "note": {"tags": ["ok", "\udfff"]}},  # UTF-8 cannot hold it
             {"id": "x\ud800", "prompt": PROMPTS[3]},  # even the id
             {"id": 4, "prompt": PROMPTS[4], "category": "t"}]
    inp = write_input(tmp_path / "in.jsonl", lines)  # json.dumps writes "\ud800" escapes: a valid JSON file
    out = tmp_path / "out.jsonl"
    summary = pipeline.run(engine, inp, str(out), CFG, batch_size=2, progress=False)
    assert (summary.written, summary.errors) == (5, 3)
    records = read_output(out)
    assert [r["id"] for r in records] == [0, 1, 2, "x\ud800", 4]
    assert records[0]["token_ids"] == expected[0] and records[4]["token_ids"] == expected[4]
    assert records[4]["extra"] == {"category": "t"}
    for r, field in zip(records[1:4], ('"prompt"', '"note"."tags"[1]', '"id"')):
        assert set(r) == {"id", "error"} and f"field {field} holds a lone surrogate" in r["error"], r
    assert "input line 2 (id 1)" in capsys.readouterr().err
    # a rerun resumes: every id is there, nothing is generated again
    summary = pipeline.run(lambda: pytest.fail("loaded the model with nothing to do"), inp, str(out), CFG,
                           progress=False)
    assert (summary.written, summary.skipped, summary.errors_in_file) == (0, 5, 3)


def test_input_encoding_bom_and_the_line_of_a_bad_byte(engine, expected, tmp_path):
    inp = tmp_path / "bom.jsonl"  # as Notepad saves "UTF-8 with BOM"
    inp.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows(range(2))).encode())
    out = tmp_path / "out.jsonl"
    summary = pipeline.run(engine, str(inp), str(out), CFG, progress=False)
    assert summary.written == 2 and [r["token_ids"] for r in read_output(out)] == [expected[0], expected[1]]
    latin = tmp_path / "latin.jsonl"  # blank lines count: the message names the line an editor shows
    latin.write_bytes(b'{"id": 0, "prompt": "a"}\n\n\n{"id": 1, "prompt": "caf\xe9"}\n{"id": 2, "prompt": "b"}\n')
    with pytest.raises(SpecstreamError, match=r"not UTF-8 text: line 4, byte 25 \(0xe9\)"):
        pipeline.run(lambda: pytest.fail("loaded the model for bad input"), str(latin), str(tmp_path / "o"), CFG,
                     progress=False)


def test_a_whole_last_record_without_its_newline_is_kept(engine, expected, tmp_path):
    out = tmp_path / "out.jsonl"
    pipeline.run(engine, write_input(tmp_path / "first.jsonl", rows(range(3))), str(out), CFG, progress=False)
    out.write_bytes(out.read_bytes().rstrip(b"\n"))  # e.g. an editor that drops the final newline
    spy = Spy(engine, batch_api=False)
    summary = pipeline.run(spy, write_input(tmp_path / "in.jsonl", rows()), str(out), CFG, progress=False)
    assert not summary.repaired and summary.skipped == 3 and sum(spy.calls) == len(PROMPTS) - 3
    records = read_output(out)
    assert [r["id"] for r in records] == list(range(len(PROMPTS)))
    assert all(r["token_ids"] == expected[r["id"]] for r in records)


def test_a_second_run_on_the_same_output_is_refused(engine, tmp_path):
    fcntl = pytest.importorskip("fcntl")
    inp = write_input(tmp_path / "in.jsonl", rows(range(2)))
    out = tmp_path / "out.jsonl"
    with open(out, "ab") as holder:  # another run (flock locks belong to the open file, even in one process)
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SpecstreamError, match="another run is writing to .*out.jsonl"):
            pipeline.run(lambda: pytest.fail("loaded the model while another run holds the output"), inp, str(out),
                         CFG, progress=False)
    assert pipeline.run(engine, inp, str(out), CFG, progress=False).written == 2  # free again once it is done
    with pytest.raises(SpecstreamError, match="cannot open the output file"):
        pipeline.run(engine, inp, str(tmp_path / "missing" / "out.jsonl"), CFG, progress=False)

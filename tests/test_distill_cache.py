"""The self-distillation cache survives a kill, plain or compressed, and finds its sidecar either way."""

import gzip
import json
import os

from specstream_core.training.distill import _Appender, meta_path, read_cache

SHIPPED = os.path.join(os.path.dirname(__file__), "..", "assets", "smollm2", "distill", "answers.jsonl.gz")


def _lines(records):
    return "".join(json.dumps({"prompt_ids": p, "answer_ids": a}) + "\n" for p, a in records)


def _append(path, records):
    app = _Appender(str(path))
    app.write(_lines(records))
    app.close()


def test_compressed_cache_appends_whole_members_and_drops_a_cut_one(tmp_path, capsys):
    path = tmp_path / "answers.jsonl.gz"
    _append(path, [([1, 2], [3, 4])])
    _append(path, [([5], [6, 7]), ([8], [9])])
    assert gzip.decompress(path.read_bytes()).count(b"\n") == 3  # a valid multi-member gzip file
    good = path.stat().st_size
    with open(path, "ab") as f:  # a kill in the middle of the next member
        f.write(gzip.compress(_lines([([10], [11])]).encode())[:-9])
    assert read_cache(str(path)) == {"1,2": [3, 4], "5": [6, 7], "8": [9]}
    assert "cut compressed block" in capsys.readouterr().err
    _append(path, [([12], [13])])  # the next run cuts the broken member off, then appends
    assert path.stat().st_size > good
    assert read_cache(str(path)) == {"1,2": [3, 4], "5": [6, 7], "8": [9], "12": [13]}
    assert gzip.decompress(path.read_bytes()).count(b"\n") == 4


def test_plain_cache_drops_a_half_written_line(tmp_path):
    path = tmp_path / "answers.jsonl"
    _append(path, [([1], [2])])
    with open(path, "ab") as f:
        f.write(b'{"prompt_ids": [3], "answ')
    assert read_cache(str(path)) == {"1": [2]}
    _append(path, [([4], [5])])
    assert read_cache(str(path)) == {"1": [2], "4": [5]}


def test_sidecar_of_a_compressed_cache_drops_the_gz_suffix():
    assert meta_path("a/answers.jsonl.gz") == meta_path("a/answers.jsonl") == "a/answers.jsonl.meta.json"
    assert os.path.isfile(meta_path(SHIPPED))
    assert len(read_cache(SHIPPED)) > 10000

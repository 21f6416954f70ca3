"""generate-batch across processes (specstream_core/io/shard.py): each rank's share, per-shard resume, the merge in
input order, and a real 2-process launch on CPU that equals the one-process output."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specstream_core import DecodeConfig, Engine, SpecstreamError
from specstream_core.io import shard
from specstream_core.cli import main
from tiny_models import save_tiny_model_dir

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["abc", "hello world", "z", "the quick brown fox", "ab ab ab", "qrstuv", "mn"]
CFG = DecodeConfig(mode="ss", max_new_tokens=6, tree_topk=(3, 2, 1))
DECODE_ARGS = ["--gamma", "3", "--topk", "3,2,1", "--max-new-tokens", "6", "--batch-size", "2", "--no-progress"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def engine(model_dir):
    return Engine.load(model_dir, gamma=3)


def write_input(path):
    lines = [json.dumps({"id": f"p{i}", "prompt": p, "n": i}) for i, p in enumerate(PROMPTS)]
    lines.insert(3, "")  # a blank line: not a prompt, not counted in the split
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def records(path):
    return [json.loads(line) for line in open(path)]


def tokens(path):
    return [(r["id"], r["token_ids"], r.get("extra")) for r in records(path)]


@pytest.fixture(scope="module")
def one_process(model_dir, tmp_path_factory):
    """The reference: an ordinary one-process generate-batch run."""
    tmp = tmp_path_factory.mktemp("one")
    out = str(tmp / "out.jsonl")
    assert main(["generate-batch", "--base", model_dir, "--input", write_input(tmp / "in.jsonl"), "--output", out,
                 *DECODE_ARGS]) == 0
    return out


def test_world_from_the_launcher_environment(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert shard.world() == shard.World(0, 1, 0)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert shard.world() == shard.World(3, 4, 1)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(SpecstreamError, match="RANK=4"):
        shard.world()


def test_shares_resume_per_shard_and_merge_in_input_order(engine, one_process, tmp_path, monkeypatch):
    """Two ranks run in turn in this process (the meeting point stubbed): rank 0 was killed after one record."""
    inp, out = write_input(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl")
    monkeypatch.setattr(shard, "_meet", lambda w, outcome: [dict(outcome, rank=r) for r in range(w.size)])
    w0, w1 = shard.World(0, 2), shard.World(1, 2)
    shard_in0, shard_out0, count0 = shard.write_share(inp, out, w0)
    assert count0 == 4 and [json.loads(x)["id"] for x in open(shard_in0)] == ["p0", "p2", "p4", "p6"]
    # rank 0's earlier run, killed after its first record and in the middle of the second
    first = next(r for r in open(one_process) if json.loads(r)["id"] == "p0")
    Path(shard_out0).write_text(first + '{"id": "p2", "te')

    mine1, merged = shard.run(engine, inp, out, CFG, batch_size=2, progress=False, w=w1)
    assert merged is None and mine1.written == 3 and not os.path.exists(out)  # only rank 0 merges
    mine0, merged = shard.run(engine, inp, out, CFG, batch_size=2, progress=False, w=w0)
    assert (mine0.written, mine0.skipped, mine0.repaired) == (3, 1, True)  # resumed its own shard
    assert (merged.written, merged.skipped, merged.errors_in_file) == (7, 0, 0)
    assert tokens(out) == tokens(one_process)
    assert not os.path.exists(shard.shard_dir(out))  # shards removed once merged

    # a finished run, rerun: nothing to generate, nothing to merge
    mine0, merged = shard.run(engine, inp, out, CFG, batch_size=2, progress=False, w=w0)
    assert (mine0.written, merged.written, merged.skipped) == (0, 0, 7)
    assert tokens(out) == tokens(one_process)


def test_a_merge_cut_short_is_finished_by_the_next_run(engine, one_process, tmp_path, monkeypatch):
    inp, out = write_input(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl")
    lines = open(one_process).readlines()
    Path(out).write_text("".join(lines[:2]) + lines[2][:10])  # the merge was killed mid-line
    monkeypatch.setattr(shard, "_meet", lambda w, outcome: [dict(outcome, rank=r) for r in range(w.size)])
    for rank in (1, 0):
        shard.run(engine, inp, out, CFG, batch_size=2, progress=False, w=shard.World(rank, 2))
    assert tokens(out) == tokens(one_process)


def test_a_failed_rank_stops_every_rank_and_nothing_is_merged(engine, tmp_path, monkeypatch):
    inp, out = write_input(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl")
    monkeypatch.setattr(shard, "_meet", lambda w, outcome: [outcome, {"rank": 1, "error": "injected: out of memory"}])
    with pytest.raises(SpecstreamError, match="1 of 2 rank.*rank 1: injected: out of memory"):
        shard.run(engine, inp, out, CFG, batch_size=2, progress=False, w=shard.World(0, 2))
    assert not os.path.exists(out) or not open(out).read()
    assert len(records(shard.shard_paths(out, shard.World(0, 2))[1])) == 4  # rank 0's share kept for the rerun


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("launcher", ["--multi_gpu"])
def test_accelerate_launch_two_processes_equals_one_process(model_dir, one_process, tmp_path, launcher):
    """`accelerate launch --num_processes 2` on CPU, ~15-45 s.

    `--multi_gpu` starts 2 processes through torch.distributed.run (RANK/WORLD_SIZE set); they run on the
    CPU with --device cpu. (accelerate 1.15's `--cpu --num_processes 2` starts ONE process unless MPI is
    configured: an ordinary one-process run, which the other tests here cover; its branch below stays for
    a run with `launcher="--cpu"`.)"""
    inp, out = write_input(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl")
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [str(accelerate), "launch", launcher, "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
           "-m", "specstream_core", "generate-batch", "--base", model_dir, "--input", inp, "--output", out,
           "--device", "cpu", *DECODE_ARGS]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if launcher == "--multi_gpu":
        assert "2 ranks: merged 7 record(s)" in proc.stderr
    else:
        assert "wrote 7 record(s)" in proc.stderr
    assert tokens(out) == tokens(one_process)
    assert not os.path.exists(shard.shard_dir(out))

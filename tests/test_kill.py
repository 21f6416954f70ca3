"""Kill tests: SIGKILL at random points of generate-batch and in the middle of train's checkpoint writes,
then rerun; the result must equal an uninterrupted run's.

Each test starts four or five `python` processes (tiny models): about 25-45 s each on 2 busy CPU cores.
`KILL_TEST_SEED=N` replays one sequence of generate-batch kill points (the seed is in any failure message).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.io import pipeline
from tiny_models import save_tiny_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error")

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")


# ---- generate-batch ------------------------------------------------------------------------------------
N_PROMPTS = 36
POISONED = {7: {"prompt": "ab\ud800cd"}, 13: {"meta": ["\udc00"]}, 21: {"prompt": ""}}
# the only fields of a record that may differ between runs: timing, and the size of the batch the prompt was
# decoded in (a resumed run starts its batches where the killed one stopped)
RUN_DEPENDENT = ("wall_s", "tokens_per_s", "batch_size")


def batch_input(path):
    rng = random.Random(1)
    lines = []
    for i in range(N_PROMPTS):
        rec = {"id": i, "prompt": "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(3, 30))), "n": i}
        rec.update(POISONED.get(i, {}))
        lines.append(json.dumps(rec) + "\n")  # "\ud800" escaped: valid JSON
    path.write_text("".join(lines))
    return str(path)


def comparable(path):
    records = [json.loads(line) for line in open(path, encoding="utf-8")]
    for r in records:
        for key in RUN_DEPENDENT:
            r.get("stats", {}).pop(key, None)
    return records


def lines_in(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def test_generate_batch_killed_at_random_points_resumes_to_the_uninterrupted_output(tmp_path):
    model_dir = save_tiny_model_dir(tmp_path / "model")
    inp = batch_input(tmp_path / "in.jsonl")
    reference = tmp_path / "reference.jsonl"
    cfg = DecodeConfig(mode="ss", max_new_tokens=16, tree_topk=(3, 2, 1))
    summary = pipeline.run(Engine.load(model_dir, gamma=3), inp, str(reference), cfg, batch_size=3, progress=False)
    assert summary.errors == len(POISONED)

    seed = int(os.environ.get("KILL_TEST_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "specstream_core", "generate-batch", "--base", model_dir, "--gamma", "3",
           "--topk", "3,2,1", "--max-new-tokens", "16", "--batch-size", "3", "--no-progress",
           "--input", inp, "--output", str(out)]
    history = []  # (lines before, lines after, how it ended) per run
    for attempt in range(3):  # up to 3 kills (each run starts a Python with torch: ~5-8 s here), then one to the end
        before = lines_in(out)
        with open(tmp_path / f"stderr-{attempt}.txt", "w") as err:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err)
            if attempt == 0:  # somewhere in start-up or model loading
                time.sleep(rng.uniform(0.2, 2.0))
            else:  # once it writes, at a random moment of generating and writing (a batch takes ~0.1 s)
                deadline = time.monotonic() + 120
                while proc.poll() is None and lines_in(out) == before and time.monotonic() < deadline:
                    time.sleep(0.002)
                time.sleep(rng.uniform(0.0, 0.25))
            killed = proc.poll() is None
            if killed:
                proc.send_signal(signal.SIGKILL)
            code = proc.wait()
        history.append((before, lines_in(out), "killed" if killed else f"exit {code}"))
        if not killed:
            break
    else:  # the last run goes to the end
        code = subprocess.run(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        history.append((history[-1][1], lines_in(out), f"exit {code}"))
    why = f"KILL_TEST_SEED={seed}; runs (lines before, after, end): {history}"
    print(why)
    assert code == 1, why  # 1: finished, and the output holds error records (the poisoned lines)
    assert sum(end == "killed" for *_, end in history) >= 2, why
    records = comparable(out)
    assert [r["id"] for r in records] == list(range(N_PROMPTS)), why  # one record per id, in input order
    assert records == comparable(reference), why
    assert all("error" in records[i] for i in POISONED), why


# ---- train ----------------------------------------------------------------------------------------------
def child(out, where="none", nth=1):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "kill_train_child.py"), str(out), where, str(nth)],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    return proc


def test_train_killed_mid_checkpoint_resumes_bit_identically(tmp_path):
    import kill_train_child as job

    straight = tmp_path / "straight"
    job.run(str(straight), log=lambda *a: None)
    ckpt = tmp_path / "killed" / "checkpoint" / "checkpoint.pt"
    # checkpoints at steps 4, 8, 12; each run resumes from what the previous one left
    for where, nth, step_left in (("mid-write", 2, 4),  # half of step 8's file written: step 4 stays
                                  ("before-rename", 1, 4),  # step 8's file complete but not in place: 4 stays
                                  ("after-rename", 1, 8),  # step 8 in place, killed before the folder's fsync
                                  ("mid-write", 1, 8)):  # half of step 12's file: 8 stays
        proc = child(tmp_path / "killed", where, nth)
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
        assert torch.load(ckpt, weights_only=True)["step"] == step_left, where
    messages = []
    summary = job.run(str(tmp_path / "killed"), log=messages.append)
    assert summary["steps"] == 12 and any("resumed from step 8" in m for m in messages)
    assert not os.path.exists(f"{ckpt}.tmp")
    a, b = torch.load(ckpt, weights_only=True), torch.load(straight / "checkpoint" / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] == 12
    assert all(torch.equal(a["streams"][k], b["streams"][k]) for k in b["streams"])
    for i, state in b["optimizer"]["state"].items():
        assert all(torch.equal(torch.as_tensor(a["optimizer"]["state"][i][k]), torch.as_tensor(v))
                   for k, v in state.items())
    assert a["scheduler"] == b["scheduler"] and torch.equal(a["data_rng"], b["data_rng"])
    assert (tmp_path / "killed" / "streams.safetensors").read_bytes() == (straight / "streams.safetensors").read_bytes()

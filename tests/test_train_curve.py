"""`train-curve`: τ against training time from a stream training run's evaluation records (`train --eval-every`),
as a result file the benchmark page shows, with its figure."""

import json
import os

import pytest
import torch

from specstream_core import cli
from specstream_core.bench import report_tables, train_curve
from specstream_core.bench.report_sources import Source, kind_of
from specstream_core.training.config import TrainConfig
from specstream_core.training.data import pack_examples
from specstream_core.training.streams import train
from tiny_models import tiny_model

CFG = TrainConfig(mode="lossless", gamma=2, n_stream_layers=1, adapter_rank=2, steps=6, batch_size=4, seq_len=64,
                  precision="fp32", checkpoint_every=3, eval_every=3, eval_rows=4)


def _data():
    g = torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(40):
        pattern = torch.randint(3, 128, (3,), generator=g).tolist()
        seq = (pattern * 12)[:32]
        pairs.append((seq[:6], seq[6:]))
    return pack_examples(pairs, 64)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    data = _data()
    train(tiny_model("llama", seed=0), CFG, data, str(out), eval_data=data, progress=False, log=lambda *a: None)
    return out


def test_the_curves_of_runs_are_a_result_file_and_a_figure(run_dir, tmp_path, capsys):
    out, figure = tmp_path / "curve.json", tmp_path / "curve.svg"
    argv = ["train-curve", str(run_dir), str(run_dir), "--labels", "a", "b", "--json", str(out), "--plot", str(figure),
            "--title", "tiny"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert kind_of(data) == "train-curve" and data["command"].startswith("python -m specstream_core train-curve")
    assert [c["label"] for c in data["curves"]] == ["a", "b"]
    pts = data["curves"][0]["points"]
    assert [p["step"] for p in pts] == [0, 3, 6] and data["curves"][0]["training"]["gamma"] == 2
    assert all(p["tau_estimate"] >= 1.0 and len(p["stream_top1"]) == 2 for p in pts)
    assert "a: step     6" in printed and "b: step     6" in printed
    svg = figure.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 4 and svg.count("<circle") == 12
    src = Source("docs/bench/curve.json", "train-curve", data, data["command"], data["host"], "tiny",
                 "docs/bench/curve.svg")
    lines = report_tables.train_curve_section(src)
    assert "![tiny](bench/curve.svg)" in lines and sum("at step 6" in line for line in lines) == 2
    assert cli.main(["train-curve", str(run_dir), "--labels", "a", "b"]) == 2
    assert "names 2 runs, but 1" in capsys.readouterr().err


def test_a_checkpoint_newer_than_the_log_is_read_and_a_run_without_records_is_refused(run_dir, tmp_path, capsys):
    run = train_curve.read_run(str(run_dir))  # the finished run: its log is newer than its last checkpoint
    assert [p["step"] for p in train_curve.points(run["history"])] == [0, 3, 6]
    ckpt = run_dir / "checkpoint" / "checkpoint.pt"
    later = (run_dir / "train_log.json").stat().st_mtime + 10
    os.utime(ckpt, (later, later))  # a run still going: its checkpoint is the newer record
    run = train_curve.read_run(str(run_dir))
    assert [p["step"] for p in train_curve.points(run["history"])] == [0, 3, 6] and run["settings"]["eval_every"] == 3
    plain = tmp_path / "plain"
    data = _data()
    from dataclasses import replace

    train(tiny_model("llama", seed=0), replace(CFG, eval_every=0), data, str(plain), eval_data=data, progress=False,
          log=lambda *a: None)
    assert cli.main(["train-curve", str(plain)]) == 2
    assert "--eval-every" in capsys.readouterr().err
    assert cli.main(["train-curve", str(tmp_path / "nothing")]) == 2
    assert "holds no stream training run" in capsys.readouterr().err

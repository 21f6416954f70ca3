"""scripts/gpu_check.sh, the prepared GPU check: valid bash, lint-clean Python, and a quick run on the CPU
(a tiny model, every measurement of the GPU run, about 15 s) that must succeed and report each of them."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_is_valid_bash_and_lint_clean():
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")]).returncode == 0
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not os.path.exists(ruff):
        pytest.skip("ruff not installed (pip install -r requirements-dev.txt)")
    proc = subprocess.run([ruff, "check", "scripts/gpu_check.py"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_gpu_check_quick_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--device", "cpu", "--quick", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    fp32 = results["precisions"]["fp32"]
    assert fp32["differ"] == 0 and fp32["tau"] >= 1.0 and fp32["speedup_vs_hf"] > 0  # fp32 is exact
    assert fp32["race"]["identical"] and fp32["race"]["device"] == "cpu" and fp32["race"]["exact"] is True
    assert results["zerogpu"]["crossed_a_process"] and results["zerogpu"]["identical"]
    assert "ZeroGPU path" in proc.stdout and "lab race on cpu" in proc.stdout

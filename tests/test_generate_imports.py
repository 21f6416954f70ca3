"""A `generate` call loads only the decoding stack: none of the training, benchmark, task or lab modules, and none
of the libraries only they use (gradio, peft, plotting). Checked on a real call, in a fresh process, on a tiny model.

What transformers itself imports (scipy, sympy, torch._dynamo, torch.distributed, accelerate) is not ours to
trim: its Llama config and modeling modules import them whichever entry point loads the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tiny_models import save_tiny_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_ON_THE_GENERATE_PATH = ("specstream_core.training", "specstream_core.bench", "specstream_core.tasks", "app",
                            "gradio", "peft", "plotly", "matplotlib", "pandas")

PROBE = """
import json, sys
from specstream_core import cli
code = cli.main(sys.argv[1:])
loaded = sorted({m for m in sys.modules for root in %r if m == root or m.startswith(root + ".")})
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
""" % (NOT_ON_THE_GENERATE_PATH,)


def test_generate_imports_no_training_bench_or_lab_module(tmp_path):
    base = save_tiny_model_dir(tmp_path / "tiny")
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    argv = ["generate", "--base", base, "--prompt", "ab", "--max-new-tokens", "3"]  # the default precision
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, proc.stderr
    assert proc.stdout.strip(), proc.stderr  # it did decode and print an answer
    assert report["loaded"] == [], f"generate imported {report['loaded']}"

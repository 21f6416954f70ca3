"""The command line answers `--help`, `--version` and argument errors without importing torch or transformers
(each command's machinery loads in its `run()`), so they come back in well under a second."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specstream_core.cli import COMMANDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("torch", "transformers", "gradio", "numpy")

PROBE = """
import json, sys
from specstream_core import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
""" % (HEAVY,)


def run_cli(*argv: str) -> tuple[dict, str, str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report, proc.stdout, proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--version"]] + [[name, "--help"] for name in COMMANDS],
                         ids=lambda argv: " ".join(argv))
def test_help_imports_no_heavy_module(argv):
    report, out, _ = run_cli(*argv)
    assert report["code"] == 0
    assert report["heavy"] == [], f"{' '.join(argv)} imported {report['heavy']}"
    assert out.strip()


def test_version_names_the_package_version():
    from specstream_core import __version__

    _, out, _ = run_cli("--version")
    assert out.strip().endswith(__version__)


@pytest.mark.parametrize("argv", [["generate", "--max-new-tokens", "many"], ["bench", "--no-such-flag"],
                                  ["no-such-command"]], ids=lambda argv: " ".join(argv))
def test_argument_errors_import_no_heavy_module(argv):
    report, _, err = run_cli(*argv)
    assert report["code"] == 2
    assert report["heavy"] == []
    assert "error:" in err


def test_help_shows_defaults():
    _, out, _ = run_cli("generate", "--help")
    assert "(default: " in out

"""The package installs (`pip install .` and `pip install -e .`) into a fresh venv, the `specstream` command
works there, and the code meets the ruff settings of pyproject.toml.

The fresh venv sees the test interpreter's site-packages through a .pth file, so torch and the other pinned
dependencies are not reinstalled (pip runs with --no-deps --no-index); a separate test checks that the
dependencies pyproject declares are the ones installed here. A few seconds per install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _fresh_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(path)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # the test interpreter's packages (torch, transformers, setuptools, ...) after the venv's own
    (Path(purelib) / "_outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _pip_install(python: Path, *args: str) -> None:
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_FIND_LINKS": ""}
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-build-isolation",
           "--no-deps", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _run_installed(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python.parent / "specstream"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_pip_install_then_specstream_help(tmp_path, editable):
    python = _fresh_venv(tmp_path / "venv")
    work = tmp_path / "elsewhere"
    work.mkdir()
    if editable:
        _pip_install(python, "-e", ".")
    else:
        # build from a copy of what the package is made of (as an sdist holds), so no build/ or egg-info
        # directory lands in the checkout
        src = tmp_path / "src"
        shutil.copytree(ROOT / "specstream_core", src / "specstream_core",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, src / name)
        _pip_install(python, str(src))
    proc = _run_installed(python, "--help", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: specstream"), proc.stdout
    assert "generate-batch" in proc.stdout
    # the installed copy is the one imported, and it carries its package data (the corpus, the kernel's C sources)
    probe = ("import os, specstream_core, specstream_core.tasks.corpus.stdlib_text as s, specstream_core.kernels.library as k; "
             "print(specstream_core.__file__); print(s.SNAPSHOT.is_file()); "
             "print(len(k.SOURCES) >= 7 and len(k.HEADERS) == 1 and os.path.isfile(os.path.join(k.CSRC, 'bench', 'burn.c')))")
    out = subprocess.run([str(python), "-c", probe], cwd=work, capture_output=True, text=True, check=True).stdout
    where, has_data, has_kernel = out.split()
    assert has_data == "True" and has_kernel == "True"
    if editable:
        assert Path(where).resolve().is_relative_to(ROOT)
    else:
        assert "site-packages" in where


def test_declared_dependencies_are_installed():
    """pyproject's dependencies (and the dev extra) are met by this environment: the pins did not drift
    from requirements.txt / requirements-dev.txt, which set it up."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    problems = []
    for spec in project["dependencies"] + project["optional-dependencies"]["dev"]:
        req = Requirement(spec)
        try:
            have = version(req.name)
        except PackageNotFoundError:
            problems.append(f"{req.name}: not installed")
            continue
        if not req.specifier.contains(have.split("+")[0], prereleases=True):
            problems.append(f"{req.name}: {have} does not meet {req.specifier}")
    assert not problems, problems


def _pins(path: Path) -> dict[str, str]:
    from packaging.requirements import Requirement

    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            pins[req.name.lower()] = str(req.specifier)
    return pins


def test_pins_match_requirements_files():
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {}
    for spec in project["dependencies"] + project["optional-dependencies"]["lab"] + \
            project["optional-dependencies"]["dev"]:
        req = Requirement(spec)
        declared[req.name.lower()] = str(req.specifier)
    wanted = {**_pins(ROOT / "requirements.txt"), **_pins(ROOT / "requirements-dev.txt")}
    assert {k: declared.get(k) for k in wanted} == wanted


def test_ruff_passes():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff not installed (pip install -r requirements-dev.txt)")
    proc = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr

"""The repository as a Hugging Face Space: one requirements file per kind of hardware, the same packages in
each; the front matter and packages.txt a Space reads."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = {"cpu": "requirements.txt", "gpu": "requirements-gpu.txt", "zerogpu": "requirements-zerogpu.txt"}


def _lines(name: str) -> list[str]:
    return [ln.split("#")[0].strip() for ln in (ROOT / name).read_text().splitlines() if ln.split("#")[0].strip()]


def _packages(name: str) -> dict[str, str]:
    from packaging.requirements import Requirement

    reqs = [Requirement(ln) for ln in _lines(name) if not ln.startswith("-")]
    return {r.name.lower(): str(r.specifier) for r in reqs}


def test_requirements_files_differ_only_in_torch():
    cpu, gpu, zero = (_packages(FILES[k]) for k in ("cpu", "gpu", "zerogpu"))
    assert cpu["torch"] == gpu["torch"] == "==2.13.0" and "torch" not in zero  # ZeroGPU brings its own torch
    assert {k: v for k, v in cpu.items() if k != "torch"} == {k: v for k, v in gpu.items() if k != "torch"}
    assert {k: v for k, v in cpu.items() if k not in ("torch", "spaces")} == \
        {k: v for k, v in zero.items() if k != "spaces"}
    assert "spaces" in cpu and "spaces" in zero


def test_cpu_requirements_take_torch_from_the_cpu_index():
    """torch==2.13.0 matches 2.13.0+cpu (a PEP 440 local version), which pip prefers to PyPI's CUDA build."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in _lines(FILES["cpu"])
    assert not [ln for ln in _lines(FILES["gpu"]) + _lines(FILES["zerogpu"]) if ln.startswith("-")]
    assert Version("2.13.0+cpu") in SpecifierSet(_packages(FILES["cpu"])["torch"])
    assert Version("2.13.0+cpu") > Version("2.13.0")
    assert not [ln for ln in _lines(FILES["cpu"]) if ln.startswith("-r")]  # a Space installs this file alone


def test_front_matter_and_system_packages():
    head = (ROOT / "README.md").read_text().split("---")[1]
    fields = dict(ln.split(":", 1) for ln in head.strip().splitlines())
    assert fields["sdk"].strip() == "gradio" and fields["app_file"].strip() == "app.py"
    assert fields["suggested_hardware"].strip() in ("cpu-basic", "cpu-upgrade")
    assert "build-essential" in _lines("packages.txt")  # gcc for the C kernel

"""The kernel's C sources against the Python side that loads them (`kernels/library.py`): small files, one table that
types every exported function, the same return codes, ABI and layer kinds, and structures laid out as C lays them."""

import ctypes
import glob
import os
import re
import shutil
import subprocess

import pytest

from specstream_core.errors import SpecstreamError
from specstream_core.kernels import builder, library
from specstream_core.kernels.steps import rowinv_steps

MAX_LINES = 700
HEADER = os.path.join(library.CSRC, "rowinv.h")
needs_kernel = pytest.mark.skipif(not library.available(), reason=f"kernel unavailable: {library.unavailable_reason()}")


def _header() -> str:
    with open(HEADER) as f:
        return f.read()


def test_no_c_source_is_over_700_lines():
    files = glob.glob(os.path.join(library.CSRC, "**", "*.[ch]"), recursive=True)
    assert len(files) >= len(library.SOURCES) + 2  # the header and the benchmarks' loops too
    for path in files:
        with open(path) as f:
            lines = sum(1 for _ in f)
        assert lines <= MAX_LINES, f"{os.path.relpath(path, library.CSRC)} has {lines} lines (at most {MAX_LINES})"


def test_the_codes_abi_and_layer_kinds_are_the_headers():
    header = _header()
    codes = {name: int(value) for name, value in re.findall(r"\bRI_([A-Z_]+) = (\d+)", header)}
    assert codes == {s.name: s.value for s in library.Status}
    assert int(re.search(r"#define ROWINV_ABI (\d+)", header).group(1)) == library.ABI
    kinds = {name: int(value) for name, value in re.findall(r"\b(LIN_[A-Z0-9]+) = (\d+)", header)}
    assert kinds == {name: getattr(rowinv_steps, name) for name in kinds} and len(kinds) == 7
    assert "#define LORA_TILES ((int64_t)1 << 32)" in header and rowinv_steps.LORA_TILES == 1 << 32


def test_every_typed_function_is_declared_in_the_header():
    header = _header()
    for name in library.SIGNATURES:
        assert re.search(rf"^\w[\w ]*\b{name}\(", header, re.M), f"{name} is typed but not declared in rowinv.h"


@needs_kernel
@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm here to list the library's symbols")
def test_every_exported_symbol_is_typed_and_no_benchmark_ships():
    lib = library.library()
    out = subprocess.run(["nm", "-D", "--defined-only", lib._name], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert exported == set(library.SIGNATURES)
    assert not {"fma_burn", "dot8_burn"} & exported


@needs_kernel
def test_the_structures_are_laid_out_as_c_lays_them(tmp_path):
    """Each ctypes mirror's size and field offsets against the compiler's own for rowinv.h's structures."""
    mirrors = {"draft_args": library.DraftArgs, "layer_args": library.LayerArgs, "step_args": library.StepArgs,
               "layer_run": library.LayerRun}
    prints = [f'printf("{c} %zu\\n", sizeof({c}));' for c in mirrors]
    prints += [f'printf("{c}.{f} %zu\\n", offsetof({c}, {f}));' for c, m in mirrors.items() for f, _ in m._fields_]
    source = tmp_path / "layout.c"
    source.write_text(f'#include <stddef.h>\n#include <stdio.h>\n#include "{HEADER}"\n'
                      f'int main(void) {{ {" ".join(prints)} return 0; }}\n')
    exe = tmp_path / "layout"
    subprocess.run([builder.compiler(), *builder.isa_flags(), str(source), "-o", str(exe)], check=True,
                   capture_output=True, timeout=120)
    got = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True).stdout.splitlines())
    for c, mirror in mirrors.items():
        assert int(got[c]) == ctypes.sizeof(mirror), c
        for f, _ in mirror._fields_:
            assert int(got[f"{c}.{f}"]) == getattr(mirror, f).offset, f"{c}.{f}"


def test_a_failed_call_names_its_reason():
    library.check(library.Status.OK, "Linear")
    with pytest.raises(SpecstreamError, match="Linear could not run: out of memory"):
        library.check(library.Status.NO_MEMORY, "Linear")
    with pytest.raises(library.KernelError, match="AVX512-VNNI") as err:
        library.check(2, "int4-a8 Linear")
    assert err.value.status is library.Status.NO_FEATURE
    with pytest.raises(library.KernelError, match="code 99"):
        library.check(99, "Linear")

"""Compiling the row-invariant kernel (`rowinv.c`) for this CPU: which build it runs (AVX-512 with VNNI and AMX's
bf16 tiles, with VNNI, without, else AVX2 + FMA), the compiler, the tuning for its vendor, and a build cached by
source and flags.

Tuning: on Intel CPUs the blocked fp32 / bf16 Linears also prefetch their weights into L2, 16 KB ahead
(`-DL2_AHEAD=16384`, beside the L1 prefetch 8 KB ahead every build has). On a 2-core Xeon with AVX-512 and AMX
(one thread, SmolLM2's layer shapes, ad-hoc A/B) this took 5 rows of the 30 layers from 42.6 to 36.9 ms and one
row from 36.6 to 35.3 in fp32, and one bf16 row from 23.0 to 18.7 ms; the 4-bit weights against 8-bit activations
(int4-a8) prefetch the same way: its plain loop 1.05-1.07x, its speculative one level. On the AMD EPYC hosts an L2
prefetch in place
of the L1 one was slower, and this addition was not measured there, so AMD builds go without. `SPECSTREAM_L2_AHEAD`
(bytes, 0: off) overrides it on any CPU.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings

from specstream_core import paths

# the builds, best first: (CPU flags it needs, compiler flags); rowinv.c picks its code by the flags
_AVX512 = (("avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"), ["-mavx512f", "-mavx512dq", "-mavx512vl",
                                                                  "-mavx512bw", "-mfma"])
_VNNI = (_AVX512[0] + ("avx512_vnni",), _AVX512[1] + ["-mavx512vnni"])
BUILDS = ((_VNNI[0] + ("amx_tile", "amx_bf16"), _VNNI[1] + ["-mamx-tile", "-mamx-bf16"]), _VNNI, _AVX512,
          (("avx2", "fma"), ["-mavx2", "-mfma"]))
CFLAGS = ["-O3", "-fopenmp", "-shared", "-fPIC"]
L2_AHEAD = {"GenuineIntel": 16384}  # bytes ahead the blocked Linears prefetch into L2, by CPU vendor (else none)


def _cpuinfo(field: str) -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> set[str]:
    return set(_cpuinfo("flags").split())


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def isa_flags() -> list[str] | None:
    """The compiler flags of the best build this CPU runs, or None where it runs none."""
    have = cpu_flags()
    return next((flags for needs, flags in BUILDS if all(f in have for f in needs)), None)


def tuning_flags() -> list[str]:
    """This CPU's tuning defines (`L2_AHEAD`; $SPECSTREAM_L2_AHEAD, in bytes, overrides the vendor's)."""
    ahead = os.environ.get("SPECSTREAM_L2_AHEAD", "").strip()
    if ahead and not ahead.isdigit():
        warnings.warn(f"SPECSTREAM_L2_AHEAD={ahead!r} is not a number of bytes (0: off); this CPU's default is used",
                      stacklevel=2)
    bytes_ahead = int(ahead) if ahead.isdigit() else L2_AHEAD.get(_cpuinfo("vendor_id"), 0)
    return [f"-DL2_AHEAD={bytes_ahead}"] if bytes_ahead else []


def library_path(source: str, cc: str, flags: list[str]) -> str:
    with open(source, "rb") as f:
        key = hashlib.sha256(f.read() + " ".join([cc] + flags + CFLAGS).encode()).hexdigest()[:16]
    return os.path.join(paths.cache_root(), "kernels", f"rowinv-{key}.so")


def build(source: str, cc: str, flags: list[str], path: str) -> None:
    """Compile into a temporary file beside `path`, then rename: concurrent builds never see half a file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    try:
        out = subprocess.run([cc, *flags, *CFLAGS, source, "-o", tmp], capture_output=True, text=True, timeout=120)
        if out.returncode:
            raise OSError((out.stderr or out.stdout).strip().splitlines()[-1] if (out.stderr or out.stdout) else "failed")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)

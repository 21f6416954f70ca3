"""Compiling the row-invariant kernel (the C sources in `csrc/`, one shared library) for this CPU: which build it runs
(AVX-512 with VNNI and AMX's bf16 tiles, with VNNI, without, else AVX2 + FMA), the compiler, the tuning for its vendor,
and a build cached by its sources, headers and flags (`compiled`). The benchmarks' own loops (`csrc/bench/`) are
built the same way, apart.

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
import sys
import time
import os
import shutil
import subprocess
import tempfile
import warnings

from specstream_core import paths

# the builds, best first: (CPU flags it needs, compiler flags); the sources pick their code by the flags
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


def library_path(name: str, files: list[str], cc: str, flags: list[str]) -> str:
    """Where the build of `name` is cached: by a digest of its files' names and bytes (sources and headers), the
    compiler and the flags."""
    digest = hashlib.sha256()
    for file in sorted(files):
        with open(file, "rb") as f:
            digest.update(os.path.basename(file).encode() + b"\0" + f.read() + b"\0")
    digest.update(" ".join([cc] + flags + CFLAGS).encode())
    return os.path.join(paths.cache_root(), "kernels", f"{name}-{digest.hexdigest()[:16]}.so")


def build(sources: list[str], cc: str, flags: list[str], path: str) -> None:
    """Compile the sources into one library, in one compiler call, into a temporary file beside `path`, then rename:
    concurrent builds never see half a file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    try:
        out = subprocess.run([cc, *flags, *CFLAGS, *sources, "-o", tmp], capture_output=True, text=True, timeout=300)
        if out.returncode:
            raise OSError((out.stderr or out.stdout).strip().splitlines()[-1] if (out.stderr or out.stdout) else "failed")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def built(name: str, sources: list[str], headers: list[str]) -> bool:
    """Whether `sources` are already built for this CPU (`compiled` would load them without compiling)."""
    flags, cc = isa_flags(), compiler()
    return flags is not None and cc is not None and os.path.exists(
        library_path(name, sources + headers, cc, flags + tuning_flags()))


def compiled(name: str, sources: list[str], headers: list[str]) -> tuple[str | None, str]:
    """(the path of `sources` built for this CPU as one library, ""), built now where no build of these sources,
    headers and flags is cached; or (None, why it cannot be built here)."""
    flags = isa_flags()
    if flags is None:
        return None, "this CPU has neither AVX-512 nor AVX2 with FMA"
    cc = compiler()
    if cc is None:
        return None, "no C compiler found (install gcc, or set CC)"
    flags = flags + tuning_flags()
    path = library_path(name, sources + headers, cc, flags)
    try:
        if not os.path.exists(path):
            # the first use on a machine (or after an update) compiles: say so, it takes seconds
            print(f"specstream: compiling the {name} CPU kernel for this machine ({' '.join(flags)}), once...",
                  file=sys.stderr, flush=True)
            start = time.perf_counter()
            build(sources, cc, flags, path)
            print(f"specstream: compiled in {time.perf_counter() - start:.1f} s ({path})", file=sys.stderr, flush=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"the kernel did not build: {exc}"
    return path, ""

"""What a result file says about where it came from: the command that made it and the host it ran on, at the top
of its JSON (`command`, `host`), so the benchmark page can name both beside its table (bench/report.py)."""

from __future__ import annotations

import os
import platform
import sys

ISA = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx512_vnni", "VNNI"), ("amx_tile", "AMX"))


def host() -> str:
    """'AMD EPYC, 2 cores, AVX-512, VNNI': the CPU's name, its cores and the instruction sets the kernels use;
    the GPU's name too where torch is loaded and sees one."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    parts = [name or platform.processor() or platform.machine(), f"{os.cpu_count()} cores"]
    parts += [label for flag, label in ISA if flag in flags and not (label == "AVX2" and "avx512f" in flags)]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        parts.append(torch.cuda.get_device_name(0))
    return ", ".join(parts)


def stamp(data, command: str | None):
    """`data` with `command` and `host` first; a list becomes {"command", "host", "rows": list}."""
    head = {"command": command or "", "host": host()}
    if isinstance(data, list):
        return {**head, "rows": data}
    return {**head, **{k: v for k, v in data.items() if k not in head}}

"""One footprint measurement, run as its own process by `footprint.measure`: load an engine at one precision, decode one
answer, and print one JSON line with the times and this process's peak resident memory.

    python -m specstream_core.bench.footprint_child --precision int4-a8 --started <time.time() of the launch>
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import warnings

from specstream_core.decoding import engine_image
from specstream_core.errors import SpecstreamError
from specstream_core.kernels.linears import pack_cache, rowinv
from specstream_core.model import defaults

PROMPT = "Name three planets."


def measure(precision: str, base: str | None, streams: str | None, tokens: int, started: float) -> dict:
    """{"precision", "imports_s" (from the launch to here: the interpreter, torch), "load_s" (the engine's start as
    `generate` starts it: `engine_image.start`), "decode_s" (a `tokens`-token speculative answer), "new_tokens",
    "peak_rss_mb" (ru_maxrss), "layouts_packed" (kernel layouts packed by this load), "entries_loaded" (kernel cache
    entries it loaded instead: `pack_cache`), "from_image" (started from the engine's image), "has_image" (the engine
    has one now), "modeling_imported" (transformers' modeling modules were imported)}."""
    imported = time.time()
    if precision == "bf16" and not rowinv.kernel_for("bf16", "cpu", "auto"):
        raise SpecstreamError(f"bf16 is measured on the row-invariant kernel only ({rowinv.unavailable_reason()})")
    base, streams = defaults.resolve(base, streams)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        asked = engine_image.request(base, streams, precision)
        engine, from_image = engine_image.start(asked)  # as `generate` starts it
        t1 = time.perf_counter()
        result = engine.generate(PROMPT, engine.decode_config(mode="ss", max_new_tokens=tokens))
        t2 = time.perf_counter()
    return {"precision": engine.precision, "asked": precision, "imports_s": round(imported - started, 3),
            "load_s": round(t1 - t0, 3), "decode_s": round(t2 - t1, 3), "new_tokens": len(result.token_ids),
            "peak_rss_mb": round(peak_rss_kb() / 1024, 1),
            "layouts_packed": pack_cache.COUNTS["packed"], "entries_loaded": pack_cache.COUNTS["loaded"],
            "from_image": from_image, "has_image": engine_image.kept(asked),
            "modeling_imported": "transformers.modeling_utils" in sys.modules}


def peak_rss_kb() -> int:
    """This process's peak resident memory in KiB: VmHWM of /proc/self/status (this program's own, from its exec),
    else ru_maxrss (which on Linux also counts the launching process's resident memory at the spawn)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", required=True)
    p.add_argument("--base")
    p.add_argument("--streams")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--started", type=float, default=None, help="time.time() when the parent launched this process")
    args = p.parse_args(argv)
    started = args.started if args.started is not None else time.time()
    try:
        row = measure(args.precision, args.base, args.streams, args.tokens, started)
    except SpecstreamError as exc:
        row = {"asked": args.precision, "error": str(exc)}
    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

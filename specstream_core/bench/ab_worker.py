"""One side of an A/B run (`bench/ab.py`): a JSON-lines server on stdin/stdout that loads one engine and decodes
the prompts it is sent, timing each `generate` end to end.

The runner passes this file's source to `python -c` with PYTHONPATH set to the side's source tree, so an older
revision needs none of it: it uses only the package's public names, which every revision since the package's
layout has (`Engine.load`, `engine.encode`, `engine.decode_config` or `DecodeConfig`, `engine.generate` -> a
Result with `token_ids` and `stats`).

Requests, one JSON object a line, each answered by one line ({"error": message} when it fails):
    {"op": "load", "base": DIR, "precision": P, "threads": T, "load": {Engine.load keywords}}
        -> {"precision": the engine's precision}
    {"op": "encode", "text": TEXT, "max_new_tokens": N}  -> {"ids": [...]}
    {"op": "generate", "ids": [...], "settings": {DecodeConfig fields}}  -> {"tokens": [...], "wall_s": S, "passes": P}
"""

import json
import os
import sys
import time

import torch

from specstream_core import DecodeConfig, Engine


def _serve(requests, reply) -> None:
    engine, configs = None, {}
    for line in requests:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req["op"]
            if op == "load":
                torch.set_num_threads(int(req["threads"]))
                engine = Engine.load(req["base"], precision=req["precision"], **req.get("load", {}))
                reply({"precision": getattr(engine, "precision", req["precision"])})
            elif op == "encode":
                reply({"ids": engine.encode(req["text"], int(req["max_new_tokens"]))})
            elif op == "generate":
                key = json.dumps(req["settings"], sort_keys=True)
                if key not in configs:  # made once, outside the timed call
                    configs[key] = _config(engine, req["settings"])
                t0 = time.perf_counter()
                result = engine.generate(req["ids"], configs[key])
                wall = time.perf_counter() - t0
                reply({"tokens": list(result.token_ids), "wall_s": wall,
                       "passes": int(result.stats.get("forward_passes", 0))})
            else:
                reply({"error": f"unknown request {op!r}"})
        except Exception as exc:  # reported to the runner, which stops the run with this message
            reply({"error": f"{type(exc).__name__}: {exc}"})


def _config(engine, settings: dict):
    """A DecodeConfig from JSON settings (lists become tuples), with the stream set's recommended draft where the
    revision has `decode_config`."""
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}
    if hasattr(engine, "decode_config"):
        return engine.decode_config(**settings)
    return DecodeConfig(**settings)


def main() -> None:
    # the replies get the real stdout; anything else printed (warnings, C libraries) goes to stderr
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def reply(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    _serve(sys.stdin, reply)


if __name__ == "__main__":
    main()

"""Record one lab trace per preset on the default model, for the lab to replay before any compute.

    .venv/bin/python scripts/record_traces.py [--out assets/smollm2/traces] [--max-new 64] [--threads 1]

Each preset (app/presets.py: one chat-corpus eval prompt per category) is raced exactly as the lab
races it (plain and speculative decoding alternating, the stream set's recommended tree, attention
captured in the top multi-stream layer, to keep assets/ small) and saved as <slug>.json, checked by the same validator as an
upload.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> int:
    import torch

    from app.presets import presets, slug
    from app.race import race
    from specstream_core.model import defaults
    from specstream_core.decoding.engine import Engine
    from specstream_core.decoding.trace import save_trace, validate

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=defaults.SMOL_TRACES_DIR)
    p.add_argument("--max-new", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--base", default=None)
    p.add_argument("--streams", default=None)
    p.add_argument("--attention-layers", type=int, default=1,
                   help="capture stream attention in this many top layers (each adds ~15 KB per pass)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    base, streams = defaults.resolve(args.base, args.streams)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = Engine.load(base, streams)
    engine.name = os.path.basename(base.rstrip("/"))
    top = engine.streams.cfg.num_layers
    layers = tuple(range(max(engine.streams.cfg.birth_layer, top - args.attention_layers), top))
    os.makedirs(args.out, exist_ok=True)
    cfg = engine.decode_config(max_new_tokens=args.max_new)
    engine.generate("Hello", cfg)  # warm-up
    for label, prompt in presets().items():
        final = None
        for final in race(engine, prompt, cfg, attention_layers=layers):
            pass
        trace = validate(final.trace)
        path = os.path.join(args.out, slug(label) + ".json")
        save_trace(trace, path)
        s, b = trace["stats"], trace["meta"]["baseline"]["stats"]
        same = trace["meta"]["baseline"]["output"]["token_ids"] == trace["output"]["token_ids"]
        print(f"{label}: τ {s['mean_accepted']:.2f}, {b['wall_s'] / max(1e-9, s['wall_s']):.2f}× "
              f"({'identical' if same else 'DIFFERENT'}), {os.path.getsize(path) / 1024:.0f} KB -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

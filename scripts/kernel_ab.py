"""The row-invariant kernel of another commit against the working tree's, on the default model, in one process:
an engine per kernel, loaded under it (the other commit's `rowinv.c` built beside this one; the weights in each
kernel's own layout), kernel and engine swapped per prompt, the eval prompts of the chat corpus (chat-wrapped, as
`bench`), plain loop and speculative streaming with the stream set's draft, the order reversed every other prompt, one thread (`--threads`); prints tokens/s medians, the per-prompt ratio and
how many prompts give the same tokens. The other kernel runs the layer steps of its own time: where it lacks the
whole-layer calls (`layer_stack`) or the call after the activation (`layer_back`), the direct steps go without them.

    python scripts/kernel_ab.py --against da17c5d --precisions int4-a8,fp32 --n 2    # ~2.5 minutes
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.model import compat, defaults  # noqa: E402
from specstream_core.kernels.linears import rowinv  # noqa: E402

STEP_CALLS = ("layer_back", "layer_stack", "silu_rows")  # symbols an older kernel may lack


def _build(source: str):
    """The kernel built from `source`, as rowinv builds its own (the modules that type their own calls of it,
    `rowinv.typed`, follow whichever library rowinv holds)."""
    keep = rowinv.SOURCE
    rowinv.SOURCE, rowinv._lib, rowinv._why = source, None, None
    try:
        return rowinv.library()
    finally:
        rowinv.SOURCE = keep


def kernels(commit: str) -> dict:
    text = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:specstream_core/kernels/csrc/rowinv.c"], check=True,
                          capture_output=True, text=True).stdout
    lacks = [name for name in STEP_CALLS if f" {name}(" not in text]
    stubs = "".join(f"\nint {name}(void) {{ return -1; }} /* not in {commit}: never called */" for name in lacks)
    if " rowinv_span(" not in text:  # blocked weights before spans of columns: one span, all of K
        stubs += "\nlong long rowinv_span(long long K) { return K; }"
    if " rowinv_amx(" not in text:  # before bf16 on AMX tiles: bf16 stays on the vector kernel
        stubs += "\nint rowinv_amx(void) { return 0; }\nint linear_bf16x(void) { return -1; } /* never called */"
    path = os.path.join(tempfile.mkdtemp(), "rowinv.c")
    with open(path, "w") as f:
        f.write(text + stubs + "\n")
    return {commit: (_build(path), bool(lacks)), "working tree": (_build(rowinv.SOURCE), False)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", required=True, help="a commit whose rowinv.c to compare with")
    p.add_argument("--precisions", default="int4-a8,fp32")
    p.add_argument("--n", type=int, default=2, help="eval prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the kernel's calls take as many)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    built = kernels(args.against)
    names = list(built)
    prompts = [e["prompt"] for c in suite_categories("chat") for e in suite_examples("chat", c, args.n)]
    base, streams = defaults.resolve(None, None)
    for precision in args.precisions.split(","):
        engines = {name: _engine(built[name], base, streams, precision) for name in names}

        def use(name):
            rowinv._lib = built[name][0]
            return engines[name]

        for mode in ("ar", "ss"):
            cfg = engines[names[1]].decode_config(mode=mode, max_new_tokens=args.max_new_tokens)
            for name in names:  # warm-up
                use(name).generate(prompts[0], cfg)
            speed, same = {name: [] for name in names}, 0
            for i, prompt in enumerate(prompts):
                tokens = {}
                for name in (names if i % 2 == 0 else names[::-1]):
                    engine = use(name)
                    t = time.perf_counter()
                    r = engine.generate(prompt, cfg)
                    speed[name].append(len(r.token_ids) / (time.perf_counter() - t))
                    tokens[name] = r.token_ids
                same += tokens[names[0]] == tokens[names[1]]
                print(f"\r{precision} {mode}: {i + 1}/{len(prompts)}", end="", file=sys.stderr, flush=True)
            ratio = statistics.median(b / a for a, b in zip(speed[names[0]], speed[names[1]]))
            print(f"\r{precision} {mode}: {names[0]} {statistics.median(speed[names[0]]):.1f} tokens/s, working tree "
                  f"{statistics.median(speed[names[1]]):.1f}; working tree / {names[0]} per prompt {ratio:.2f}x; "
                  f"same tokens on {same}/{len(prompts)}")


def _engine(kernel, base, streams, precision):
    """An engine loaded under `kernel` (its Linears' blocked weights in that kernel's layout, which may differ
    between commits); an older kernel without the whole-layer calls runs the direct steps without them."""
    rowinv._lib, older = kernel
    engine = Engine.load(base, streams, precision=precision)
    for layer in compat.decoder_layers(engine.model):
        step = layer.__dict__.get(compat.DIRECT_STEP)
        if step is not None and older:
            step.back, step.whole = None, False
    return engine

if __name__ == "__main__":
    main()

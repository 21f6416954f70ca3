"""The per-step Python of a decoding, this checkout's against a commit's, in one process: the functions that the
tenth session's change touched (tree visibility, one sequence's step inputs and mask, the greedy choice, the
pass, the run of layers) are loaded from `--against` as well and swapped in per generate, so both sides share one
engine, one kernel and one memory layout. Plain and speculative decoding at one precision, chat eval prompts,
every combination on each prompt in turn (order reversed every other prompt); prints tokens/s medians, the
per-prompt ratio and that the tokens agree.

    python scripts/step_python_ab.py --against 2907034 --precision int4-a8 --n 5   # ~1 min, one thread
"""
import argparse
import collections
import os
import statistics
import subprocess
import sys
import time
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from specstream_core.bench.suites import suite_categories, suite_examples  # noqa: E402
from specstream_core.decoding import loop, prefill, tree, verify  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.model import defaults, masks, msa  # noqa: E402
from specstream_core.kernels.steps import direct_layers  # noqa: E402


def old_module(commit: str, path: str):
    """The module at `path` as `commit` had it, executed under its own name (it imports the live modules)."""
    src = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    name = "ab_" + path.replace("/", "_").removesuffix(".py")
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod  # dataclasses look their module up
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def slots(commit: str) -> list[tuple[object, str, object]]:
    """(owner, attribute, the commit's function) for every place the changed functions are looked up from."""
    o_tree, o_prefill, o_verify, o_masks, o_msa, o_layers = (old_module(commit, p) for p in (
        "specstream_core/decoding/tree.py", "specstream_core/decoding/prefill.py", "specstream_core/decoding/verify.py",
        "specstream_core/model/masks.py", "specstream_core/model/msa.py", "specstream_core/kernels/steps/direct_layers.py"))
    return [(tree.Tree, "visibility", o_tree.Tree.visibility), (prefill, "pad_steps", o_prefill.pad_steps),
            (loop, "pad_steps", o_prefill.pad_steps), (masks, "additive_mask", o_masks.additive_mask),
            (verify, "verify_greedy", o_verify.verify_greedy), (loop, "verify_greedy", o_verify.verify_greedy),
            (verify, "sample_token", o_verify.sample_token), (loop, "sample_token", o_verify.sample_token),
            (prefill, "sample_token", o_verify.sample_token), (msa, "forward", o_msa.forward),
            (direct_layers, "run_stack", o_layers.run_stack)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="2907034")
    p.add_argument("--precision", default="int4-a8")
    p.add_argument("--n", type=int, default=5, help="eval prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(1)
    sides = {"old": slots(args.against)}
    sides["new"] = [(owner, name, getattr(owner, name)) for owner, name, _ in sides["old"]]

    def use(side: str) -> None:
        for owner, name, fn in sides[side]:
            setattr(owner, name, fn)

    base, streams = defaults.resolve(None, None)
    engine = Engine.load(base, streams, precision=args.precision)
    cfgs = {m: engine.decode_config(mode=m, max_new_tokens=args.max_new_tokens) for m in ("ar", "ss")}
    prompts = [ex["prompt"] for c in suite_categories("corpus") for ex in suite_examples("corpus", c, args.n)]
    runs = [(m, side) for m in ("ar", "ss") for side in ("old", "new")]
    for m, side in runs:  # warm-up
        use(side)
        engine.generate(prompts[0], cfgs[m])
    speed, same, t0 = collections.defaultdict(list), collections.Counter(), time.time()
    for i, prompt in enumerate(prompts):
        tokens = {}
        for m, side in runs if i % 2 == 0 else runs[::-1]:
            use(side)
            t = time.perf_counter()
            r = engine.generate(prompt, cfgs[m])
            speed[(m, side)].append(len(r.token_ids) / (time.perf_counter() - t))
            tokens[(m, side)] = r.token_ids
        same.update(k for k in tokens if tokens[k] == tokens[("ar", "old")])
        print(f"\r{i + 1}/{len(prompts)} prompts, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    use("new")
    print(f"\n{engine.precision}, {len(prompts)} eval prompts, {args.max_new_tokens} new tokens, one thread, against "
          f"{args.against}")
    for m in ("ar", "ss"):
        ratio = statistics.median(a / b for a, b in zip(speed[(m, "new")], speed[(m, "old")]))
        print(f"{m}: {args.against} {statistics.median(speed[(m, 'old')]):.1f} tokens/s, now "
              f"{statistics.median(speed[(m, 'new')]):.1f}, per prompt {ratio:.3f}x; tokens equal to "
              f"{args.against}'s plain loop: {same[(m, 'old')]} and {same[(m, 'new')]} of {len(prompts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

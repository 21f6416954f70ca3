"""The prepared GPU check (run by scripts/gpu_check.sh): speculative streaming on CUDA, measured, not assumed.

On a random Llama the script makes (TinyLlama-1.1B's shape; `--quick`: a tiny one) with a tokenizer built
from the task corpus and fresh (untrained) streams, for each precision (nf4 where bitsandbytes imports, bf16,
fp16, fp32; `--device cpu`: fp32 and nf4):
  - speculative vs plain greedy decoding of the same prompts: how many outputs differ, where, and the plain
    pass's logit margin there (a near-tie is ~0);
  - the speedup of speculative decoding over plain decoding and over transformers' greedy `generate`, and τ
    (fresh streams on a random model: τ near 1 is expected, the trained τ needs the default model's streams);
  - the lab's race (app/race.py) on the device: its speedup and its badge;
  - the ZeroGPU path: the race in a forked worker with pickled arguments and results (app/zerogpu.py's
    stand-in), from a parent process that never touched CUDA, as ZeroGPU's main process does not.
Prints one line per measurement and writes them as JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SIZES = {  # TinyLlama-1.1B's shape, and a tiny one for the CPU
    "full": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4),
    "quick": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2),
}


def say(line: str) -> None:
    print(line, flush=True)


def make_model(directory: str, quick: bool) -> str:
    """A random Llama (seeded) with a BPE tokenizer of the task corpus, saved to `directory`."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from specstream_core.tasks import load_split
    from specstream_core.training.tokenizer_build import build_tokenizer

    texts = [e["prompt"] + e["reference"] for e in load_split("eval", n=10 if quick else 40)]
    tok = build_tokenizer(texts, vocab_size=400 if quick else 4096)
    tok.save_pretrained(directory)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), max_position_embeddings=2048, bos_token_id=0, eos_token_id=0,
                         pad_token_id=0, tie_word_embeddings=False, **SIZES["quick" if quick else "full"])
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # peaked logits, strong mixing: greedy text repeats itself, so fresh streams (each
        model.lm_head.weight.mul_(8.0)  # close to the main stream) get drafts accepted, as in tests/tiny_models.py
        for weight in model.model.layers.parameters():
            if weight.dim() == 2:
                weight.mul_(4.0)
    model.generation_config.eos_token_id = None
    model.save_pretrained(directory)
    return directory


def prompts(directory: str, n: int) -> list[str]:
    from specstream_core.tasks import load_split

    return [e["prompt"] for e in load_split("eval", n=max(1, n // 4 + 1))][:n]


def load(directory: str, precision: str, device: str):
    from specstream_core import Engine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fresh streams
        return Engine.load(directory, precision=precision, device=device, gamma=4, chat=False)


def compare(engine, texts: list[str], max_new: int) -> dict:
    """Plain vs speculative greedy outputs of each prompt, transformers' generate as the reference speed."""
    from specstream_core.bench.runner import hf_method
    from specstream_core.decoding.config import DecodeConfig
    from specstream_core.decoding.mismatch import difference_at

    hf = hf_method("hf-greedy", engine.model, max_new)
    out = {"prompts": len(texts), "differ": 0, "differences": [], "ar_s": 0.0, "ss_s": 0.0, "hf_s": 0.0,
           "tokens": 0, "passes": 0}
    for text in texts:
        ids = engine.encode(text, max_new)
        ar = engine.generate(ids, DecodeConfig(mode="ar", max_new_tokens=max_new, stop_on_eos=False))
        ss = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=max_new, stop_on_eos=False))
        _, hf_wall, _ = hf.run(ids)
        out["ar_s"] += ar.stats["wall_s"]
        out["ss_s"] += ss.stats["wall_s"]
        out["hf_s"] += hf_wall
        out["tokens"] += ss.stats["new_tokens"]
        out["passes"] += ss.stats["forward_passes"]
        if ar.token_ids != ss.token_ids:
            out["differ"] += 1
            out["differences"].append(difference_at(engine, ids, ar.token_ids, ss.token_ids))
    out["tau"] = out["tokens"] / max(1, out["passes"])
    out["speedup_vs_plain"] = out["ar_s"] / out["ss_s"] if out["ss_s"] else 0.0
    out["speedup_vs_hf"] = out["hf_s"] / out["ss_s"] if out["ss_s"] else 0.0
    return out


def race_summary(engine, text: str, max_new: int) -> dict:
    """The lab's race (app/race.py) on this engine: speedup, τ, the badge's verdict, the clocks' device."""
    from app.race import race, speedup, tau
    from specstream_core.decoding.config import DecodeConfig

    final = None
    for view in race(engine, text, DecodeConfig(max_new_tokens=max_new, stop_on_eos=False), min_interval=1e9):
        final = view
    return {"speedup": speedup(final), "tau": tau(final.ss.stats), "identical": final.ar.text == final.ss.text,
            "exact": final.exact, "precision": final.precision, "device": final.device,
            "difference": final.difference, "pid": os.getpid()}


def race_in_worker(directory: str, precision: str, device: str, text: str, max_new: int) -> dict:
    """What ZeroGPU's worker runs: plain arguments in, a plain summary out."""
    return race_summary(load(directory, precision, device), text, max_new)


def zerogpu_phase(args) -> None:
    """Run in its own process (CUDA untouched here): the race in app/zerogpu.py's forked, pickling worker."""
    from app.zerogpu import pickling_worker

    started = time.perf_counter()
    result = pickling_worker(race_in_worker)(args.model, args.precision, args.device, args.prompt, args.max_new)
    result["parent_pid"], result["seconds"] = os.getpid(), round(time.perf_counter() - started, 2)
    print(json.dumps(result))


def check_zerogpu(directory: str, precision: str, device: str, text: str, max_new: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", "zerogpu", "--model", directory, "--precision",
           precision, "--device", device, "--prompt", text, "--max-new", str(max_new)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["crossed_a_process"] = result["pid"] != result["parent_pid"]
    return result


def precisions(device: str) -> list[str]:
    try:
        import bitsandbytes  # noqa: F401
        nf4 = ["nf4"]
    except ImportError:
        say("nf4: skipped (bitsandbytes is not installed; gpu_check.sh installs it from gpu_wheels/)")
        nf4 = []
    return (nf4 + ["bf16", "fp16", "fp32"]) if device.startswith("cuda") else ["fp32"] + nf4


def describe(precision: str, m: dict) -> str:
    margins = ", ".join(f"token {d['position']}: {d['margin']:.3g}" for d in m["differences"] if d) or "none"
    return (f"{precision:5s} differ {m['differ']}/{m['prompts']} (margins: {margins}) · τ {m['tau']:.2f} · "
            f"speculative {m['speedup_vs_plain']:.2f}x plain, {m['speedup_vs_hf']:.2f}x transformers generate")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="a tiny model, few prompts and tokens (tests the script)")
    p.add_argument("--out", default="gpu_check.json")
    p.add_argument("--phase", default="all", choices=("all", "zerogpu"))
    for name in ("--model", "--precision", "--prompt"):  # the zerogpu phase's inputs
        p.add_argument(name)
    p.add_argument("--max-new", type=int, default=0)
    args = p.parse_args(argv)
    if args.phase == "zerogpu":
        zerogpu_phase(args)
        return 0
    return run_all(args)


def run_all(args) -> int:
    import torch

    n, max_new = (2, 12) if args.quick else (8, 96)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    say(f"gpu_check: torch {torch.__version__} on {name}; {'quick' if args.quick else 'full'} run")
    results: dict = {"device": name, "torch": torch.__version__, "precisions": {}}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        directory = make_model(tmp, args.quick)
        texts = prompts(directory, n)
        for precision in precisions(args.device):
            started = time.perf_counter()
            try:
                engine = load(directory, precision, args.device)
                m = compare(engine, texts, max_new)
                m["race"] = race_summary(engine, texts[0], max_new)
            except Exception as exc:  # one precision's failure is a result, not the end of the check
                say(f"{precision:5s} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                results["precisions"][precision] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            m["seconds"] = round(time.perf_counter() - started, 1)
            results["precisions"][precision] = m
            say(describe(precision, m))
            r = m["race"]
            say(f"      lab race on {r['device']}: {r['speedup'] or 0:.2f}x, τ {r['tau']:.2f}, "
                f"{'identical' if r['identical'] else 'differ'} (exact label: {r['exact']})")
            del engine
        first = next(iter(results["precisions"]), "fp32")
        z = check_zerogpu(directory, first, args.device, texts[0], max_new)
        results["zerogpu"] = z
        say(f"ZeroGPU path ({first}, forked pickling worker): " + (f"FAILED: {z['error']}" if "error" in z else
            f"{'identical' if z['identical'] else 'differ'}, {z['speedup'] or 0:.2f}x, on {z['device']}, "
            f"in another process: {z['crossed_a_process']}, {z['seconds']} s"))
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, default=str)
    say(f"gpu_check: results in {args.out}")
    failed = [k for k, v in results["precisions"].items() if "error" in v] + (["zerogpu"] if "error" in z else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

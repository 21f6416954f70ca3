"""`speed`: tokens/s of transformers, our plain loop, speculative streaming and llama.cpp, fp32, bf16 and int4,
at 1 and 2 threads, methods alternating per prompt (specstream_core/bench/speed.py).

    python -m specstream_core speed                                   # the default model, 1 and 2 threads
    python -m specstream_core speed --threads 1 --n 2 --json speed.json --markdown speed.md
    python -m specstream_core speed --methods hf-greedy,ar,ss --precisions fp32,int4-a8   # a method, apart its precision

llama.cpp joins when `llama-cpp-python` is installed (`pip install -r requirements-bench.txt`; it
builds from source, ~25 min on one core) and the base was converted from a GGUF file (the default model).
llama.cpp's own `llama-bench` joins where it is found (`--llama-bench PATH`, $SPECSTREAM_LLAMA_BENCH, or on PATH;
`scripts/build_llama_bench.sh` builds it from the same source distribution): its tg and pp rates on the same GGUF
file at each thread count, before and after the other methods, beside each loop's generation rate.

    python -m specstream_core speed --methods ar,ss,llama-bench --precisions int4-a8 --llama-bench PATH
"""

from __future__ import annotations

import json
import statistics
import warnings

from specstream_core.cli.args import write_text
from specstream_core.errors import SpecstreamError
from specstream_core.model import defaults


def add_arguments(p) -> None:
    from specstream_core.bench.speed_methods import NAMES, PRECISIONS

    p.add_argument("--base", help="base model directory or hub id (default: SmolLM2-135M-Instruct)")
    p.add_argument("--streams", help="stream directory (default: the default model's lossless streams)")
    p.add_argument("--methods", default=",".join(NAMES), help=f"comma-separated subset of {', '.join(NAMES)}, each "
                   "at every precision of --precisions where it runs (hf-greedy-kernel: int4 and int4-a8 only; "
                   "llama.cpp: its GGUF file's own)")
    p.add_argument("--precisions", default=None, help=f"comma-separated subset of {', '.join(PRECISIONS)} (default: all)")
    p.add_argument("--threads", default="1,2", help="torch (and llama.cpp) threads, comma-separated")
    p.add_argument("--n", type=int, default=2, help="eval prompts per category of the chat corpus")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--llama-bench", metavar="PATH", help="llama.cpp's llama-bench binary (default: "
                   "$SPECSTREAM_LLAMA_BENCH, else one on PATH)")
    p.add_argument("--json", metavar="FILE", help="write the rows and settings as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the table as Markdown")
    p.add_argument("--no-progress", action="store_true")


def _plan(args) -> tuple[list[str], list[int]]:
    from specstream_core.bench.speed_methods import METHODS, NAMES, OLD, PRECISIONS, select
    from specstream_core.cli import vocab

    tokens = [" ".join(t.split()) for t in args.methods.split(",") if t.strip()]
    old = [t for t in tokens if t in OLD]  # "ar int4-a8": still works, and says what it is now
    for t in old:
        vocab.note(f"--methods {t!r} is now --methods {OLD[t][0]} --precisions {OLD[t][1]} (the old spelling still works)")
    new = [t for t in tokens if t not in OLD]
    methods = vocab.names(",".join(new), "--methods", NAMES) if new or not old else []
    # without --precisions: every precision, or fp32 beside old spellings (where a bare name meant fp32)
    asked = args.precisions or ("fp32" if old else ",".join(PRECISIONS))
    names = select(methods, vocab.precisions(asked, "--precisions", PRECISIONS)) + old
    if not names:
        raise SpecstreamError(f"--methods {args.methods!r} runs at none of --precisions {asked!r}")
    wanted = set(names) | {"hf-greedy", "ar"}
    while True:  # every method's reference runs too (ss int4 needs ar int4, which needs hf-greedy int4)
        more = {METHODS[m][1] for m in wanted} - wanted
        if not more:
            break
        wanted |= more
    names = [m for m in METHODS if m in wanted]
    try:
        threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        raise SpecstreamError(f"--threads must be comma-separated integers, got {args.threads!r}") from None
    if not threads or any(t < 1 or t > 256 for t in threads):
        raise SpecstreamError(f"--threads must list counts between 1 and 256, got {args.threads!r}")
    if not 1 <= args.n <= 50 or not 1 <= args.max_new_tokens <= 1024:
        raise SpecstreamError("--n must be 1..50 and --max-new-tokens 1..1024")
    return names, threads


def run(args) -> int:
    from specstream_core.bench import llama_bench, speed
    from specstream_core.kernels.linears import int4_a8, rowinv
    from specstream_core.bench.suites import suite_categories, suite_examples
    from specstream_core.decoding.engine import Engine
    from specstream_core.model.default_model import gguf_source

    names, threads = _plan(args)
    binary = llama_bench.find(args.llama_bench)
    if args.llama_bench and binary is None:
        raise SpecstreamError(f"--llama-bench {args.llama_bench}: not found or not executable")
    if not int4_a8.available() and any(speed.METHODS[m][0] == "int4-a8" for m in names):
        print(f"skipping int4-a8: {int4_a8.unavailable_reason()}")
        names = [m for m in names if speed.METHODS[m][0] != "int4-a8"]
    base, streams = defaults.resolve(args.base, args.streams)
    precisions = sorted({speed.METHODS[m][0] for m in names} & {"fp32", "bf16", "int4", "int4-a8"}
                        | ({"int4"} if "llama.cpp" in names else set()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engines = {p: Engine.load(base, streams, precision=p) for p in precisions}
    gguf = gguf_source(base)
    if "llama.cpp" in names and not (gguf and speed.llama_cpp_available()):
        print("skipping llama.cpp: " + ("install llama-cpp-python (requirements-bench.txt)" if gguf else
                                        "the base was not converted from a GGUF file"))
    engine = engines[precisions[0]]
    prompts = {"all": [engine.encode(ex["prompt"], args.max_new_tokens) for c in suite_categories("chat")
                       for ex in suite_examples("chat", c, args.n)]}
    bench = _LlamaBench(binary if "llama-bench" in names else None, gguf,
                        int(statistics.median(len(p) for p in prompts["all"])), args.max_new_tokens)
    rows, llama = _timed(args, names, engines, threads, gguf, prompts, bench)
    report = {"base": base, "streams": streams, "threads": threads, "n_per_category": args.n,
              "max_new_tokens": args.max_new_tokens,
              "int4": getattr(engines["int4"].model.config, "specstream_int4", None) if "int4" in engines else None,
              "linears": {k: rowinv.linears_label(e.model) for k, e in engines.items()},
              "rows": rows, **({"llama_bench": list(llama.values())} if "llama-bench" in names else {})}
    from specstream_core.bench.provenance import stamp

    report = stamp(report, getattr(args, "_command", None))
    if args.json:
        write_text(args.json, json.dumps(report, indent=1) + "\n")
    return 0


class _LlamaBench:
    """llama-bench at each thread count: runs pooled per thread count (`llama_bench.row`), or why it did not run."""

    def __init__(self, binary: str | None, gguf: str | None, n_prompt: int, n_gen: int):
        self.binary, self.gguf, self.n_prompt, self.n_gen = binary, gguf, n_prompt, n_gen
        self.runs: dict[int, list] = {}
        self.errors: dict[int, str] = {}

    def measure(self, threads: int) -> None:
        from specstream_core.bench import llama_bench

        if self.binary and self.gguf:
            try:
                got = llama_bench.run(self.binary, self.gguf, self.n_prompt, self.n_gen, threads)
                self.runs.setdefault(threads, []).append(got)
            except ValueError as exc:
                self.errors[threads] = str(exc)

    def row(self, threads: int) -> dict:
        from specstream_core.bench import llama_bench

        if not self.binary:
            return llama_bench.missing(threads, llama_bench.NOT_FOUND)
        if not self.gguf:
            return llama_bench.missing(threads, "the base was not converted from a GGUF file")
        if not self.runs.get(threads):
            return llama_bench.missing(threads, self.errors.get(threads, "no run"))
        return llama_bench.row(threads, self.runs[threads], self.binary, self.gguf)


def _timed(args, names, engines, threads, gguf, prompts, bench: _LlamaBench) -> tuple[list[dict], dict[int, dict]]:
    """Every method at every thread count (llama-bench before and after the others), the table printed and
    written; (the rows as the JSON holds them, threads -> llama-bench's row where it was asked for)."""
    import torch

    from specstream_core.bench import speed
    from specstream_core.bench.runner import run_benchmark

    rows, threads_of, closeness, generation, llama, prompt = [], {}, {}, {}, {}, {}
    for t in threads:
        torch.set_num_threads(t)
        decodes: dict[str, list] = {}
        prefills: dict[str, list] = {}
        methods = speed.build(names, engines, args.max_new_tokens, t, gguf, decodes, prefills)
        kept = speed.recording(methods)
        bench.measure(t)
        got = run_benchmark(prompts, methods, baseline="hf-greedy", progress=not args.no_progress, desc=f"speed {t} thr")
        bench.measure(t)
        if "llama-bench" in names:
            llama[t] = bench.row(t)
        for r in got:
            r.precision = speed.METHODS[r.method][0]
            threads_of[len(rows)] = t
            closeness[len(rows)] = speed.shared_prefix(kept[r.method][1:], kept["ar"][1:])  # [0]: warm-up
            rate = speed.generation_rate(decodes.get(r.method, [])[1:])
            if rate:
                generation[len(rows)] = rate
            fill = speed.prompt_rate(prefills.get(r.method, [])[1:])
            if fill:
                prompt[len(rows)] = fill
            rows.append(r)
    table = speed.markdown(rows, threads_of, closeness, generation, llama, prompt)
    print(table)
    if args.markdown:
        write_text(args.markdown, table + "\n")
    out = []
    for i, r in enumerate(rows):
        tg, pp = (llama.get(threads_of[i], {}).get(k) for k in ("tg_tokens_per_s", "pp_tokens_per_s"))
        rate, fill = generation.get(i), prompt.get(i)
        out.append({**r.__dict__, "threads": threads_of[i], "same_as_fp32_until_first_difference": closeness[i],
                    "generation_tokens_per_s": round(rate, 2) if rate else None,
                    "x_llama_bench_tg": round(rate / tg, 3) if rate and tg else None,
                    "prompt_tokens_per_s": round(fill, 2) if fill else None,
                    "x_llama_bench_pp": round(fill / pp, 3) if fill and pp else None})
    return out, llama

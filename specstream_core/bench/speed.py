"""Tokens per second against the peers a CPU user would pick instead: transformers' greedy `generate`
in fp32 and in int4, our plain loop and speculative streaming in fp32, bf16 and int4, and llama.cpp on the
same GGUF file (through `llama-cpp-python`, when it is installed).

All methods decode the same chat prompts greedily, alternating per prompt in one process
(`runner.run_benchmark`), at each thread count asked for. Each row says whose output it must equal:
transformers' generate on the same weights for our plain loop ("hf-greedy bf16": transformers' generate
on the bf16 engine's own model, its bf16 weights widened to fp32 per call through torch — a reference
for the output, far too slow to be a baseline for speed; "hf-greedy int4 kernel": transformers' generate
on the int4 model with its Linears on the row-invariant kernel, as ours; "hf-greedy int4" is the peer,
torch's int4 kernel as transformers ships it), our plain loop for speculative streaming (in
bf16 exact only on the row-invariant kernel: the count shows how often it differs), our int4 loop for
llama.cpp (which rounds differently: its agreement is shown, not claimed).

Beside them, llama.cpp's own `llama-bench` binary on the same GGUF file at the same thread count (`llama_bench`):
its tg rate (one token a pass from an empty context) and pp rate (a prompt as long as the eval prompts' median),
generation only, no Python, no tokenizer, so the comparison does not rest on the binding's overhead. Against
its tg rate stands each loop's generation rate (`generation_rate`): new tokens after the first, divided by the
decode time (the wall time after the pass that gave the first token).
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np

from specstream_core.bench import llama_bench
from specstream_core.bench.runner import Method, Row, hf_method
from specstream_core.bench.speed_methods import METHODS  # noqa: F401 - re-exported



# transformers' generate with torch's Linears (the peers); "hf-greedy int4 kernel" runs the int4 model's
# own Linears on the row-invariant kernel: the reference our int4 loop must equal (same 4-bit arithmetic)
AS_IT_SHIPS = {"hf-greedy", "hf-greedy bf16", "hf-greedy int4"}


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def llama_cpp_method(gguf_path: str, threads: int, max_new: int, eos_ids: set[int],
                     decodes: list | None = None, prefills: list | None = None) -> Method:
    """llama.cpp's own forward passes on the same token ids (its tokenizer is the file's, as ours), greedy:
    the argmax of the logits it returns after each pass (the wall time includes the prompt, as ours).
    decodes: gets (new tokens after the first, seconds after the first) per run (`generation_rate`); prefills:
    (prompt tokens, seconds to the first new token) per run (`prompt_rate`)."""
    llm = _load_llama(gguf_path, threads)
    vocab = llm.n_vocab()

    def run(ids):
        t0 = time.perf_counter()
        out: list[int] = []
        llm.reset()
        llm.eval(ids)
        while True:
            tok = int(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,)).argmax())
            out.append(tok)
            if len(out) == 1:
                first = time.perf_counter()
            if tok in eos_ids or len(out) >= max_new:
                break
            llm.eval([tok])
        end = time.perf_counter()
        if decodes is not None:
            decodes.append((len(out) - 1, end - first))
        if prefills is not None:
            prefills.append((len(ids), first - t0))
        return out, end - t0, len(out)

    return Method("llama.cpp", run, reference=METHODS["llama.cpp"][1])


def _load_llama(gguf_path: str, threads: int):
    """A llama.cpp model without its extra buffer types: on this Xeon, 0.3.36's AMX matmul (one of them)
    crashes on multi-token batches (the prompt); the plain CPU path decodes the same file."""
    import llama_cpp
    import llama_cpp.llama as high_level

    default = llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    high_level.llama_cpp.llama_model_default_params = params
    try:
        return high_level.Llama(model_path=gguf_path, n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                                verbose=False)
    finally:
        high_level.llama_cpp.llama_model_default_params = default


def recording(methods: list[Method]) -> dict[str, list[list[int]]]:
    """Make each method keep its outputs (after its warm-up run): method name -> token lists in prompt order."""
    kept: dict[str, list[list[int]]] = {}
    for m in methods:
        def run(ids, inner=m.run, name=m.name):
            tokens, wall, passes = inner(ids)
            kept.setdefault(name, []).append(tokens)
            return tokens, wall, passes
        m.run = run
    return kept


def shared_prefix(outputs: list[list[int]], reference: list[list[int]]) -> float:
    """Mean share of the reference's tokens produced before the first difference (1.0: identical)."""
    shares = []
    for a, b in zip(outputs, reference):
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        shares.append(same / max(1, len(b)) if a != b else 1.0)
    return sum(shares) / max(1, len(shares))


def timed_engine_method(name: str, engine, cfg, reference: str, extra_params: int, decodes: list,
                        prefills: list | None = None) -> Method:
    """Our loop as `runner.engine_method` runs it, the first pass (the prompt, giving the first new token) timed
    apart: `decodes` gets (new tokens after the first, the passes' seconds after the first) per run, `prefills`
    (prompt tokens, the first pass's seconds)."""
    def run(ids):
        dec = engine.start(ids, cfg)
        dec.step()  # the prefill: the prompt in, the first new token out
        first = dec.stats()["wall_s"]
        result = dec.run()
        decodes.append((len(result.token_ids) - 1, result.stats["wall_s"] - first))
        if prefills is not None:
            prefills.append((len(ids), first))
        return result.token_ids, result.stats["wall_s"], result.stats["forward_passes"]

    return Method(name, run, reference, extra_params)


def generation_rate(decodes: list[tuple[int, float]]) -> float | None:
    """New tokens after the first, divided by the time they took (the decode time: the wall time after the pass
    that gave the first token), over all runs [(tokens after the first, seconds)]; None where there is none."""
    tokens, seconds = sum(n for n, _ in decodes), sum(s for _, s in decodes)
    return tokens / seconds if seconds > 0 and tokens > 0 else None


def prompt_rate(prefills: list[tuple[int, float]]) -> float | None:
    """Prompt tokens divided by the time to the first new token (the prefill pass and its pick), over all runs
    [(prompt tokens, seconds)]; None where there is none. Beside llama-bench's pp rate (one batch of the eval
    prompts' median length, no pick)."""
    return generation_rate(prefills)


def build(names: list[str], engines: dict, max_new: int, threads: int, gguf_path: str | None,
          decodes: dict[str, list] | None = None, prefills: dict[str, list] | None = None) -> list[Method]:
    """engines: precision -> Engine (with streams). Methods in `names` order; llama.cpp only with a file;
    llama-bench is not a method run here (its own process: `llama_bench`). decodes: method name -> the
    (tokens after the first, seconds) of its runs, for our loops and llama.cpp (`generation_rate`); prefills: method
    name -> (prompt tokens, seconds to the first new token) of its runs (`prompt_rate`)."""
    decodes, prefills = {} if decodes is None else decodes, {} if prefills is None else prefills
    out = []
    for name in names:
        precision, reference = METHODS[name]
        if name == "llama-bench":
            continue
        if name == "llama.cpp":
            if gguf_path and llama_cpp_available():
                out.append(llama_cpp_method(gguf_path, threads, max_new, engines["int4"].eos_ids,
                                            decodes.setdefault(name, []), prefills.setdefault(name, [])))
            continue
        engine = engines[precision]
        if name.startswith("hf-greedy"):
            out.append(hf_method(name, engine.model, max_new, reference=reference, as_it_ships=name in AS_IT_SHIPS))
        else:
            cfg = engine.decode_config(mode="ss" if name.startswith("ss") else "ar", max_new_tokens=max_new)
            extra = engine.streams.extra_parameter_count() if name.startswith("ss") else 0
            out.append(timed_engine_method(name, engine, cfg, reference, extra, decodes.setdefault(name, []),
                                           prefills.setdefault(name, [])))
    return out


def markdown(rows: list[Row], threads_of: dict[int, int], closeness: dict[int, float] | None = None,
             generation: dict[int, float] | None = None, llama: dict[int, dict] | None = None,
             prompt: dict[int, float] | None = None) -> str:
    """One table: threads, method, precision, tokens/s, × transformers fp32 (median per prompt), τ, output
    check, (closeness: row index -> share) how much of fp32 plain decoding's output it reproduces, (generation:
    row index -> tokens/s) the generation rate and its ratio to llama-bench's tg rate at the same threads
    (llama: threads -> `llama_bench.row` or `missing`), whose row follows the last row of its thread count, and
    (prompt: row index -> tokens/s) the prompt rate and its ratio to llama-bench's pp rate."""
    closeness, generation, llama, prompt = closeness or {}, generation or {}, llama or {}, prompt or {}
    lines = ["| threads | method | weights | tokens/s | × transformers fp32 | τ | output equals | "
             "same as fp32 until the first difference | generation rate | × llama-bench tg | prompt rate | "
             "× llama-bench pp |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        t = threads_of[i]
        ref = METHODS.get(r.method, ("", r.method))[1]
        same = "itself (baseline)" if ref == r.method else (
            f"{ref}: {'yes' if r.identical else f'{r.identical_count}/{r.prompts} prompts'}")
        close = f"{closeness[i]:.0%}" if i in closeness else "–"
        rate = generation.get(i)
        tg, pp, fill = llama.get(t, {}).get("tg_tokens_per_s"), llama.get(t, {}).get("pp_tokens_per_s"), prompt.get(i)
        lines.append(f"| {t} | {r.method} | {r.precision} | {r.tokens_per_s:.1f} | {r.speedup:.2f}× | "
                     f"{r.tau:.2f} | {same} | {close} | {f'{rate:.1f}' if rate else '–'} | "
                     f"{f'{rate / tg:.2f}×' if rate and tg else '–'} | {f'{fill:.1f}' if fill else '–'} | "
                     f"{f'{fill / pp:.2f}×' if fill and pp else '–'} |")
        if t in llama and (i + 1 == len(rows) or threads_of[i + 1] != t):
            lb = llama[t]
            tg_cell = f"{lb['tg_tokens_per_s']:.1f}" if "tg_tokens_per_s" in lb else "–"
            pp_cell = f"{lb['pp_tokens_per_s']:.1f}" if "pp_tokens_per_s" in lb else "–"
            lines.append(f"| {t} | llama-bench | {METHODS['llama-bench'][0]} | {tg_cell} | – | – | "
                         f"{llama_bench.label(lb)} | – | {tg_cell} | {'1.00×' if tg else '–'} | {pp_cell} | "
                         f"{'1.00×' if pp_cell != '–' else '–'} |")
    return "\n".join(lines)

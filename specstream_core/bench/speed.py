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
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np

from specstream_core.bench.runner import Method, Row, engine_method, hf_method
from specstream_core.bench.speed_methods import METHODS  # noqa: F401 - re-exported



# transformers' generate with torch's Linears (the peers); "hf-greedy int4 kernel" runs the int4 model's
# own Linears on the row-invariant kernel: the reference our int4 loop must equal (same 4-bit arithmetic)
AS_IT_SHIPS = {"hf-greedy", "hf-greedy bf16", "hf-greedy int4"}


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def llama_cpp_method(gguf_path: str, threads: int, max_new: int, eos_ids: set[int]) -> Method:
    """llama.cpp's own forward passes on the same token ids (its tokenizer is the file's, as ours), greedy:
    the argmax of the logits it returns after each pass (the wall time includes the prompt, as ours)."""
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
            if tok in eos_ids or len(out) >= max_new:
                break
            llm.eval([tok])
        return out, time.perf_counter() - t0, len(out)

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


def build(names: list[str], engines: dict, max_new: int, threads: int, gguf_path: str | None) -> list[Method]:
    """engines: precision -> Engine (with streams). Methods in `names` order; llama.cpp only with a file."""
    out = []
    for name in names:
        precision, reference = METHODS[name]
        if name == "llama.cpp":
            if gguf_path and llama_cpp_available():
                out.append(llama_cpp_method(gguf_path, threads, max_new, engines["int4"].eos_ids))
            continue
        engine = engines[precision]
        if name.startswith("hf-greedy"):
            out.append(hf_method(name, engine.model, max_new, reference=reference, as_it_ships=name in AS_IT_SHIPS))
        else:
            cfg = engine.decode_config(mode="ss" if name.startswith("ss") else "ar", max_new_tokens=max_new)
            extra = engine.streams.extra_parameter_count() if name.startswith("ss") else 0
            out.append(engine_method(name, engine, cfg, reference=reference, extra_params=extra))
    return out


def markdown(rows: list[Row], threads_of: dict[int, int], closeness: dict[int, float] | None = None) -> str:
    """One table: threads, method, precision, tokens/s, × transformers fp32 (median per prompt), τ, output
    check, and (closeness: row index -> share) how much of fp32 plain decoding's output it reproduces."""
    closeness = closeness or {}
    lines = ["| threads | method | weights | tokens/s | × transformers fp32 | τ | output equals | "
             "same as fp32 until the first difference |",
             "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        ref = METHODS.get(r.method, ("", r.method))[1]
        same = "itself (baseline)" if ref == r.method else (
            f"{ref}: {'yes' if r.identical else f'{r.identical_count}/{r.prompts} prompts'}")
        close = f"{closeness[i]:.0%}" if i in closeness else "–"
        lines.append(f"| {threads_of[i]} | {r.method} | {r.precision} | {r.tokens_per_s:.1f} | {r.speedup:.2f}× | "
                     f"{r.tau:.2f} | {same} | {close} |")
    return "\n".join(lines)

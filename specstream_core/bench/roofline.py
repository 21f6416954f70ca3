"""The roofline of one forward pass on this machine: the least time its memory traffic and its
arithmetic can take, to set next to what `pass-cost` measures.

    machine = measure_machine()                       # this core's read bandwidth and matmul peak
    limit = pass_limit(model.config, machine, rows_bottom=5, rows_top=25, birth_layer=26,
                       main_logit_rows=5, stream_logit_rows=4, context=256)
    limit.ms                                          # max(bytes / bandwidth, flops / peak)

A decoding pass reads every weight once (in the precision it is stored), reads the cached keys and
values of the prefix, and multiplies each weight by each row that passes through it. A plain pass of
a 135M-parameter model is bound by the first (its arithmetic is one row); a speculative pass adds rows
— the tree's main rows below the stream-birth layer, main and stream rows above it, and the logits
rows — which cost nothing until the arithmetic reaches the memory time. The gap between a measured
pass and its roofline is what kernels and overheads take; the gap between a speculative and a plain
roofline is what the method itself must pay.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import threading
from dataclasses import asdict, dataclass

import torch

from specstream_core.bench import clocks
from specstream_core.kernels import builder, library

BURN_SOURCE = os.path.join(library.CSRC, "bench", "burn.c")  # the roofs' loops: built apart, never shipped in the kernel


# bytes read per weight of the decoder layers in each precision (bitsandbytes nf4: 4 bits plus one fp32
# scale per 64 weights; the LM head stays in the compute precision, counted as fp32 here; int4 on the
# row-invariant kernel: 4 bits plus an fp32 scale and low end per 32 weights, and an 8-bit head, 8 bits plus
# an fp32 scale per 32 weights: kernels/linears/int4.py, kernels/heads/int8_head.py)
BYTES_PER_WEIGHT = {"fp32": 4.0, "bf16": 2.0, "nf4": 0.5625, "int8": 1.0, "int4": 0.75, "int4-a8": 0.75}
HEAD_BYTES_PER_WEIGHT = {"bf16": 2.0, "int4": 1.125, "int4-a8": 1.125}  # others: fp32


@dataclass(frozen=True)
class Machine:
    bandwidth_gbs: float  # streaming read bandwidth of one thread, GB/s
    peak_gflops: float  # arithmetic roof, GFLOP/s, in `dtype`: the larger of the two below
    dtype: str = "float32"
    matmul_gflops: float = 0.0  # what torch's large square matmul reaches
    fma_gflops: float = 0.0  # what the vector units can do at most (csrc/bench/burn.c's fma_burn), 0 without a build
    int8_gops: float = 0.0  # 8-bit multiply-adds x 2 a second (burn.c's dot8_burn), 0 without VNNI: int4-a8's roof

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PassLimit:
    bytes: float  # weights + KV cache read once
    flops: float  # 2 · rows · parameters they pass through, plus attention
    memory_ms: float
    compute_ms: float

    @property
    def ms(self) -> float:
        return max(self.memory_ms, self.compute_ms)

    @property
    def bound(self) -> str:
        return "memory" if self.memory_ms >= self.compute_ms else "compute"


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = clocks.now()
        fn()
        times.append(clocks.now() - t0)
    return statistics.median(times)


def measure_machine(dtype: torch.dtype = torch.float32, buffer_mb: int = 256, matmul: int = 1024,
                    repeats: int = 7) -> Machine:
    """Read bandwidth (a sum over a buffer far larger than the caches) and matmul peak (a square
    product of side `matmul`), each the median of `repeats`, with torch's current thread count."""
    n = buffer_mb * 2**20 // torch.tensor([], dtype=dtype).element_size()
    buf = torch.ones(n, dtype=dtype)
    seconds = _median_seconds(lambda: buf.sum(), repeats)
    bandwidth = buf.numel() * buf.element_size() / seconds / 1e9
    a = torch.randn(matmul, matmul).to(dtype)
    b = torch.randn(matmul, matmul).to(dtype)
    seconds = _median_seconds(lambda: a @ b, repeats)
    mm = 2 * matmul**3 / seconds / 1e9
    fma = fma_gflops(torch.get_num_threads(), repeats) if dtype == torch.float32 else 0.0
    int8 = int8_gops(torch.get_num_threads(), repeats) if dtype == torch.float32 else 0.0
    return Machine(round(bandwidth, 2), round(max(mm, fma), 1), str(dtype).replace("torch.", ""), round(mm, 1),
                   round(fma, 1), round(int8, 1))


def fma_gflops(threads: int = 1, repeats: int = 7, steps: int = 4_000_000) -> float:
    """float32 GFLOP/s of `threads` threads running independent vector FMAs at once (csrc/bench/burn.c's `fma_burn`;
    ctypes lets go of the GIL, so they run in parallel), or 0.0 where the kernel does not build. The roof a
    kernel can reach; a library's matmul may stay well below it (MKL takes its AVX2 path on AMD CPUs)."""
    lib = burn_library()
    return 0.0 if lib is None else _burn_rate(lib.fma_burn, 2.0 * 12 * lib.burn_lanes(), steps, threads, repeats)


def int8_gops(threads: int = 1, repeats: int = 7, steps: int = 2_000_000) -> float:
    """8-bit integer GOP/s (a multiply-add counted as 2) of `threads` threads running independent vpdpbusd
    chains (csrc/bench/burn.c's `dot8_burn`), or 0.0 without the kernel's VNNI build: the roof of int4-a8's Linears."""
    lib = burn_library()
    return 0.0 if lib is None or not lib.burn_a8() else _burn_rate(lib.dot8_burn, 2.0 * 12 * 64, steps, threads, repeats)


def burn_library():
    """The roofs' loops (csrc/bench/burn.c: `fma_burn`, `dot8_burn`), built apart from the kernel with its flags (once,
    then cached), or None where the kernel cannot be built here."""
    path, _ = builder.compiled("burn", [BURN_SOURCE], library.HEADERS)
    try:
        lib = ctypes.CDLL(path) if path is not None else None
    except OSError:
        return None
    if lib is not None:
        lib.fma_burn.restype, lib.fma_burn.argtypes = ctypes.c_float, [ctypes.c_int64]
        lib.dot8_burn.restype, lib.dot8_burn.argtypes = ctypes.c_int, [ctypes.c_int64]
        lib.burn_lanes.restype = lib.burn_a8.restype = ctypes.c_int
    return lib


def _burn_rate(burn, ops_per_step: float, steps: int, threads: int, repeats: int) -> float:
    """Operations a second of `threads` threads each running burn(steps) at once (median of `repeats`)."""
    def run():
        workers = [threading.Thread(target=burn, args=(steps,)) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    return ops_per_step * steps * threads / _median_seconds(run, repeats) / 1e9


def layer_parameters(config) -> int:
    """Weights of one decoder layer's linear maps (norms are negligible)."""
    d = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    kv = getattr(config, "num_key_value_heads", heads) * head_dim
    return d * heads * head_dim * 2 + d * kv * 2 + 3 * d * config.intermediate_size


def pass_limit(config, machine: Machine, *, rows_bottom: int, rows_top: int, birth_layer: int,
               main_logit_rows: int, stream_logit_rows: int = 0, context: int = 256,
               bytes_per_weight: float = 4.0, draft_vocab: int = 0, head_bytes_per_weight: float | None = None,
               linear_gops: float = 0.0) -> PassLimit:
    """The roofline of one pass: `rows_bottom` rows through layers [0, birth_layer), `rows_top` rows
    through the rest, logits for `main_logit_rows` rows over the vocabulary and `stream_logit_rows`
    rows over the draft vocabulary (the whole vocabulary when draft_vocab is 0). linear_gops: the roof of
    the Linears' and logits' products where it is not the fp32 one (int4-a8: `Machine.int8_gops`)."""
    n_layers = config.num_hidden_layers
    d, vocab = config.hidden_size, config.vocab_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    kv = getattr(config, "num_key_value_heads", heads) * head_dim
    per_layer = layer_parameters(config)
    head_rows = draft_vocab or vocab
    head_weights = vocab * d + (draft_vocab * d if draft_vocab and stream_logit_rows else 0)
    cache_bytes = 2 * n_layers * context * kv * 4.0  # keys and values, fp32
    rows_layers = rows_bottom * birth_layer + rows_top * (n_layers - birth_layer)
    linear = 2.0 * (rows_layers * per_layer + main_logit_rows * vocab * d + stream_logit_rows * head_rows * d)
    attention = 4.0 * rows_layers * (context + rows_top) * heads * head_dim  # scores and weighted values
    head_bytes = head_bytes_per_weight if head_bytes_per_weight is not None else bytes_per_weight
    total_bytes = n_layers * per_layer * bytes_per_weight + head_weights * head_bytes + cache_bytes
    compute_s = (linear / (linear_gops or machine.peak_gflops) + attention / machine.peak_gflops) / 1e9
    return PassLimit(total_bytes, linear + attention, total_bytes / (machine.bandwidth_gbs * 1e9) * 1e3, compute_s * 1e3)

"""Row-invariant Linears for CPU decoding: a small AVX-512 / AVX2 kernel (`csrc/`, loaded by `kernels/library.py`),
built once per machine.

Why: decoding a 135M model on a CPU is bound by reading its weights, yet MKL's fp32 GEMM charges for
every extra row of a pass (on SmolLM2's shapes, one thread: 2 rows 1.6x, 3 rows 2.0x, 5 rows 1.6x a
one-row pass). This kernel streams each weight once per call and multiplies up to six (AVX-512) or three
(AVX2) rows against it from registers, so a five-row verification costs little more than a plain pass,
and a one-row pass is itself faster than MKL's (`pass-cost` measures both).

It is also *row-invariant*: a row's result does not depend on how many rows share the call. With the
engine's row-exact attention (`compat.row_exact_attention`) a speculative pass computes its main rows
bit for bit as a plain pass would, so speculative output equals plain decoding exactly, in fp32 and
in bf16 (bf16 weights, fp32 sums).

On Intel CPUs with AMX, bf16 Linears (and the stream-row adapters beside them) run on the tile unit instead
(`amx_tiles`, `linear_tiled`): x rounded to bf16, fp32 sums, still row-invariant, and up to 32 rows cost about
what one does; SPECSTREAM_AMX=0 keeps them on the vector kernel.

The kernel is compiled with the system's C compiler into the cache directory the first time it is
needed (about a second), for AVX-512 where the CPU has it, else for AVX2 + FMA; where there is no
compiler or neither, or `SPECSTREAM_KERNEL=torch` is set, Linears run through torch as before and
`unavailable_reason()` says why. Training (gradients), CUDA and `generate` inside `torch_linears()` use torch.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from specstream_core.errors import SpecstreamError
from specstream_core.model import compat
from specstream_core.kernels import amx_tiles
from specstream_core.kernels.library import available, check, library, unavailable_reason  # noqa: F401 - re-exported

KERNELS = ("auto", "rowinv", "torch")  # auto: rowinv where it can run; torch: never
_DTYPES = (torch.float32, torch.bfloat16)  # what RowInvariantLinear runs on the kernel

_local = threading.local()  # torch_linears() switches the kernel off for one thread


def isa() -> str:
    """Which build runs here: 'avx512' (16 lanes; with VNNI, int4-a8 runs), 'avx2' (8 lanes) or '' (none)."""
    lib = library()
    return "" if lib is None else {16: "avx512", 8: "avx2"}[lib.lanes]


@contextmanager
def torch_linears():
    """Inside, this thread's Linears run through torch (transformers' own `generate` as a baseline)."""
    previous = getattr(_local, "off", False)
    _local.off = True
    try:
        yield
    finally:
        _local.off = previous


def enabled() -> bool:
    """Whether this thread's Linears may run the kernel now: it runs here, and not inside `torch_linears()`."""
    return library() is not None and not getattr(_local, "off", False)


def takes(x: torch.Tensor) -> bool:
    """Whether a quantized layer's call on x runs the kernel: CPU rows, not inside `torch_linears()`, and no
    gradient to carry (the kernel reads data pointers)."""
    return x.is_cpu and enabled() and not (torch.is_grad_enabled() and x.requires_grad)


# ---- the blocked weight layout (linear_q4, linear_q8; linear_f32b, linear_bf16b) --------------------------
OUT_BLOCK = 4  # output rows per kernel block (rowinv.h's NB)


def pad_rows(t: torch.Tensor, multiple: int = OUT_BLOCK) -> torch.Tensor:
    """t with its last row repeated up to a multiple of `multiple` rows (padding rows are computed, not kept)."""
    pad = -t.shape[0] % multiple
    return torch.cat([t, t[-1:].expand(pad, *t.shape[1:])]) if pad else t


def to_blocks(t: torch.Tensor, groups: int) -> torch.Tensor:
    """Per-row data of `groups` groups along the input ([N', groups * b] or [N', groups, b], N' a multiple of
    4) in the kernels' order: each block's 4 rows interleaved group by group, [N' / 4, groups, 4, b]."""
    return t.reshape(-1, OUT_BLOCK, groups, t[0].numel() // groups).transpose(1, 2).contiguous()


def from_blocks(t: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of `to_blocks`: the first n rows, [n, groups * b]."""
    return t.transpose(1, 2).reshape(-1, t.shape[1] * t.shape[3])[:n]


def blocked(weight: torch.Tensor) -> torch.Tensor | None:
    """An fp32 or bf16 weight [N, K] as linear_f32b / linear_bf16b read it: K in the kernel's spans of columns
    (`rowinv_span`; all of K where K is small), each span `to_blocks` of LANES columns, one span after another (one
    sequential read a call); None where K is not a multiple of LANES."""
    lib = library()
    lanes, k = lib.rowinv_lanes(), weight.shape[1]
    if k % lanes:
        return None
    w, span = pad_rows(weight.detach()), lib.rowinv_span(k)
    spans = [w[:, k0:k0 + span] for k0 in range(0, k, span)]
    return to_blocks(w, k // lanes) if span >= k else torch.cat([to_blocks(s, s.shape[1] // lanes).view(-1) for s in spans])


def _rows_and_out(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x as contiguous fp32 rows for the kernel, and an empty fp32 output [..., n] of x's leading shape."""
    rows = x if x.dtype is torch.float32 else x.float()
    if not rows.is_contiguous():
        rows = rows.contiguous()
    shape = x.shape
    y = torch.empty(shape[0], shape[1], n) if len(shape) == 3 else torch.empty(*shape[:-1], n)  # ints: fastest
    return rows, y


def linear_q4(x: torch.Tensor, q4: torch.Tensor, dm: torch.Tensor, n: int) -> torch.Tensor:
    """x W^T for 4-bit W in the kernel's layout (`kernels/linears/int4.py`: nibbles q4 [N' / 4, K / 32, 4, 16], scales and
    low ends dm [N' / 4, K / 32, 4, 2]: `to_blocks`): each weight made as the fp32 value d q + m, then summed
    as `linear` sums, so on the same weights it gives `linear`'s result bit for bit. The result has x's dtype."""
    return _linear_q(library().linear_q4, x, q4, dm, n)


def linear_q8(x: torch.Tensor, q8: torch.Tensor, d: torch.Tensor, n: int) -> torch.Tensor:
    """x W^T for 8-bit W in the kernel's layout (`kernels/heads/int8_head.py`: signed bytes q8 [N' / 4, K / 32, 4, 32],
    scales d [N' / 4, K / 32, 4, 1]: `to_blocks`): each weight made as the fp32 value d q, then summed as `linear` sums.
    The result has x's dtype."""
    return _linear_q(library().linear_q8, x, q8, d, n)


def _linear_q(fn, x: torch.Tensor, wq: torch.Tensor, ds: torch.Tensor, n: int) -> torch.Tensor:
    k = x.shape[-1]
    rows, y = _rows_and_out(x, n)
    fn(rows.data_ptr(), rows.numel() // k, k, wq.data_ptr(), ds.data_ptr(), n, y.data_ptr(), torch.get_num_threads())
    return y if x.dtype is torch.float32 else y.to(x.dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, n: int | None = None) -> torch.Tensor:
    """x W^T (+ b) through the kernel: x fp32 or bf16 [..., K], weight fp32 or bf16 [N, K], contiguous, or
    `blocked` (then n = N). Sums in fp32, the same either way; the result has x's dtype. (Called ~220 times a
    decoding pass: kept to a few microseconds of Python, no reshapes.)"""
    lib = library()
    is_blocked = n is not None
    n, k = (n, x.shape[-1]) if is_blocked else weight.shape
    fn = ((lib.linear_f32b if is_blocked else lib.linear_f32) if weight.dtype is torch.float32
          else (lib.linear_bf16b if is_blocked else lib.linear_bf16))
    return _linear_call(fn, x, weight, bias, n, k)


def linear_tiled(x: torch.Tensor, wt: torch.Tensor, bias: torch.Tensor | None, n: int) -> torch.Tensor:
    """x W^T (+ b) on AMX tiles (`amx_tiles`): W `amx_tiles.tiled`, x rounded to bf16, fp32 sums; the result
    has x's dtype."""
    return _linear_call(library().linear_bf16x, x, wt, bias, n, x.shape[-1])


def _linear_call(fn, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, n: int, k: int) -> torch.Tensor:
    """One of the kernel's Linear calls (x rows, K, W, N, y, threads) on x's rows, plus the bias, in x's dtype."""
    rows, y = _rows_and_out(x, n)
    check(fn(rows.data_ptr(), rows.numel() // k, k, w.data_ptr(), n, y.data_ptr(), torch.get_num_threads()), "Linear")
    if bias is not None:
        y += bias
    return y if x.dtype is torch.float32 else y.to(x.dtype)


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, spec: torch.Tensor, keys: torch.Tensor,
           scaling: float) -> torch.Tensor | None:
    """Row-exact attention through the kernel: query [Hq, n, D], key/value [Hkv, S, D] (fp32, CPU, last dim
    contiguous); query row i sees spec[2i] keys: the first ones (spec[2i+1] < 0) or keys[spec[2i+1]:]. Each
    (row, head) is summed in a fixed order of its own keys, so a row's result does not depend on the
    other rows of the call. Returns [n, Hq, D], or None where the kernel cannot take it (torch then)."""
    lib = library()
    f32 = torch.float32
    if (lib is None or getattr(_local, "off", False) or query.dtype is not f32 or key.dtype is not f32
            or value.dtype is not f32 or not query.is_cpu or query.requires_grad):
        return None
    if query.stride(-1) != 1:
        query = query.contiguous()
    if key.stride(-1) != 1:
        key = key.contiguous()
    if value.stride(-1) != 1:
        value = value.contiguous()
    hq, n, d = query.shape
    out = torch.empty(n, hq, d)
    failed = lib.attend_f32(query.data_ptr(), query.stride(1), query.stride(0), key.data_ptr(), key.stride(1),
                            key.stride(0), value.data_ptr(), value.stride(1), value.stride(0), n, hq, key.shape[0],
                            d, spec.data_ptr(), keys.data_ptr(), float(scaling), out.data_ptr(),
                            torch.get_num_threads())
    return None if failed else out


_RELEASE: dict[int, tuple] = {}  # id(weight) -> (a weak reference to it, how its memory goes): `release_after_copy`


def release_after_copy(weight: torch.Tensor, release) -> None:
    """Have `release(weight)` called once a `RowInvariantLinear` has made its own copy of `weight` (`blocked_weight`):
    loading registers the weights that are unread pages of their checkpoint file (`loading.CheckpointRows.release`),
    which the system then drops, to read again from the file only if the weight itself is read again."""
    _RELEASE[id(weight)] = (weakref.ref(weight), release)


class RowInvariantLinear(nn.Linear):
    """An nn.Linear (same parameters, same state dict) whose inference forward runs the kernel. It falls
    back to torch for gradients, CUDA, other dtypes, a non-contiguous weight and inside `torch_linears()`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weight, self.bias
        if self.runs_kernel(x):
            wb = self.blocked_weight()  # the kernel reads data pointers: no autograd
            if self._tiled:
                return linear_tiled(x, wb, None if b is None else b.detach(), w.shape[0])
            return linear(x, w if wb is None else wb, None if b is None else b.detach(), None if wb is None else w.shape[0])
        return F.linear(x, w.to(x.dtype), b)  # bf16 weights under fp32 activations: widened

    def runs_kernel(self, x: torch.Tensor) -> bool:
        """Whether `forward(x)` runs the kernel (fp32 or bf16 rows on either weight dtype; the result in x's dtype)."""
        w = self.weight
        return (x.is_cpu and w.dtype in _DTYPES and x.dtype in _DTYPES and not getattr(_local, "off", False)
                and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)) and w.is_contiguous())

    def blocked_weight(self) -> torch.Tensor | None:
        """The weight `tiled` for AMX (bf16, where it runs: then `_tiled`) or else `blocked` (a copy: the kernel's
        fastest read), made on first use and again whenever the weight is replaced or changed in place (its version
        counter: not through `.data` or in inference mode) or the kernel library changes."""
        w = self.weight
        key = (w.data_ptr(), None if w.is_inference() else w._version, w.dtype, tuple(w.shape), id(library()), amx_tiles.AMX)
        if getattr(self, "_blocked_key", None) != key:
            wt = amx_tiles.tiled(w, library())
            self._tiled, self._blocked, self._blocked_key = wt is not None, wt if wt is not None else blocked(w), key
            kept = _RELEASE.pop(id(w), None)
            if kept is not None and kept[0]() is w and self._blocked is not None:  # the kernel reads the copy from now on
                kept[1](w)
        return self._blocked

    def on_tiles(self) -> bool:
        """Whether this Linear runs on AMX tiles (`blocked_weight` decides, per weight)."""
        self.blocked_weight()
        return self._tiled


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm of fp32 rows through the kernel, each row alone (weight: fp32, contiguous)."""
    lib = library()
    if not x.is_contiguous():
        x = x.contiguous()
    y = torch.empty_like(x)
    d = x.shape[-1]
    lib.rmsnorm_f32(x.data_ptr(), x.numel() // d, d, weight.data_ptr(), eps, y.data_ptr())
    return y


class RowInvariantNorm:
    """Mixed into a Llama-form RMSNorm's own class (`make_row_invariant_norm`): its inference forward on fp32
    CPU rows is one kernel call instead of ~7 torch ops; anything else (gradients, other dtypes or devices,
    `torch_linears()`) runs the module's own forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (x.dtype is torch.float32 and x.is_cpu and w.dtype is torch.float32 and w.is_contiguous()
                and not getattr(_local, "off", False) and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return rmsnorm(x, w, self.variance_epsilon)
        return super().forward(x)


_NORM_CLASSES: dict[type, type] = {}


def make_row_invariant_norm(module: nn.Module) -> bool:
    """Give a Llama-form RMSNorm (compat.LLAMA_RMS_NORMS) the kernel's forward, in place (its class only)."""
    cls = type(module)
    if issubclass(cls, RowInvariantNorm) or cls.__name__ not in compat.LLAMA_RMS_NORMS:
        return False
    if cls not in _NORM_CLASSES:
        _NORM_CLASSES[cls] = type(f"RowInvariant{cls.__name__}", (RowInvariantNorm, cls), {})
    module.__class__ = _NORM_CLASSES[cls]
    return True


def make_row_invariant(module: nn.Module) -> bool:
    """Turn a plain nn.Linear into a RowInvariantLinear in place (its class only; the weights stay)."""
    if type(module) is nn.Linear:
        module.__class__ = RowInvariantLinear
        return True
    return False


def install(model: nn.Module, kernel: str = "auto", weight_dtype: torch.dtype = torch.float32, release=None) -> int:
    """Put the kernel under the decoder layers' Linears and the LM head of a CPU fp32 model. Returns how
    many Linears use it (0 where it cannot run or kernel == "torch"); records it in the config.

    weight_dtype bf16: those Linears keep their weights in bf16 (half the bytes to read) while the rest of
    the model, its activations and the kernel's sums stay fp32; a head tied to the embedding gets its own
    bf16 copy, so the embedding stays fp32. release: called with each fp32 weight a bf16 copy was made from, while it
    is still the weight loading mapped (`loading.CheckpointRows.release`: the pages the copy read are let go)."""
    if kernel not in KERNELS:
        raise SpecstreamError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)}")
    if kernel == "torch" or not available():
        if kernel == "rowinv":
            raise SpecstreamError(f"the row-invariant kernel cannot run here: {unavailable_reason()}")
        return 0
    head = compat.lm_head(model)
    if weight_dtype != torch.float32:
        tied = head.weight
        head.weight = nn.Parameter(tied.detach().to(weight_dtype), requires_grad=False)  # untied from the embedding
        if release is not None:
            release(tied)  # the embedding's pages the copy read: its lookups read their rows again
    modules = [m for layer in compat.decoder_layers(model) for m in layer.modules()] + [head]
    count = 0
    for m in modules:
        if make_row_invariant(m):
            count += 1
            if weight_dtype != torch.float32 and m.weight.dtype != weight_dtype:
                narrow = m.weight.data.to(weight_dtype)
                if release is not None:
                    release(m.weight)  # its fp32 pages, read for the copy, let go before the weight becomes the copy
                m.weight.data = narrow
    if count:
        adopt(model)
    else:
        model.config.specstream_kernel = "torch"
    return count


def adopt(model: nn.Module) -> None:
    """Record that a model's Linears run on the kernel (`install`, or int4's own Linears) and give its
    Llama-form norms the kernel's forward; its decoding steps then attend through the kernel too."""
    for norm in compat.rms_norms(model):
        make_row_invariant_norm(norm)
    model.config.specstream_kernel = "rowinv"


def draft_precision(precision: str) -> str:
    """The name a stream set records a precision's fastest draft under on this CPU: "bf16+amx" where bf16 Linears
    run on AMX tiles (`amx_tiles`: wider passes cost less there), else the precision (`decode_fields`)."""
    return precision + "+amx" if precision == "bf16" and amx_tiles.amx(library()) else precision


def kernel_for(precision: str, device: str, kernel: str) -> bool:
    """Whether a model of this precision, on this device, runs its Linears on the kernel."""
    return precision in ("fp32", "bf16", "int4", "int4-a8") and device == "cpu" and kernel != "torch" and (kernel == "rowinv" or available())


def uses_kernel(model: nn.Module) -> bool:
    return getattr(model.config, "specstream_kernel", "torch") == "rowinv"


def linears_label(model: nn.Module) -> str:
    """What a model's Linears run on, for benchmark settings: 'rowinv-avx512' or 'rowinv-avx2' (+amx: bf16 on tiles;
    +exact-8-bit-head: `int8_head.use_exact_head`), or 'torch'."""
    if not uses_kernel(model):
        return "torch"
    tiles = "+amx" if any(getattr(m, "_tiled", False) for m in model.modules()) else ""
    return f"rowinv-{isa()}{tiles}" + ("+exact-8-bit-head" if getattr(model.config, "specstream_head", None) else "")

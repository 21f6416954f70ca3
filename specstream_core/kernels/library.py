"""The row-invariant kernel's shared library: its C sources (`csrc/`) built once per machine (`builder`), loaded, and
every exported function typed from one table (`SIGNATURES`), with the structures the layer steps take and the names
of the codes its calls return (`Status`, `check`).

Where the library cannot run (no AVX-512 nor AVX2 + FMA, no compiler, a failed build) `library()` is None and
`unavailable_reason()` says why; the callers then run torch.
"""

from __future__ import annotations

import ctypes
import enum
import glob
import os
import threading

from specstream_core.errors import SpecstreamError
from specstream_core.kernels import builder

CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
SOURCES = sorted(glob.glob(os.path.join(CSRC, "*.c")))  # built together into one library
HEADERS = sorted(glob.glob(os.path.join(CSRC, "*.h")))
ABI = 19  # rowinv.h's ROWINV_ABI: the signatures and structures below


class Status(enum.IntEnum):
    """What the kernel's calls that can fail return (rowinv.h's RI_ codes)."""
    OK = 0
    NO_MEMORY = 1  # a scratch buffer could not be had
    NO_FEATURE = 2  # this build or process lacks the instructions (AVX512-VNNI, AMX tiles)
    BAD_SHAPE = 3  # a shape the call does not take
    NOT_FINITE = 4  # an input holds a NaN or an infinity


_MEANING = {Status.NO_MEMORY: "out of memory for its scratch buffers",
            Status.NO_FEATURE: "this CPU or this build of the kernel lacks the instructions it needs "
                               "(AVX512-VNNI, or AMX tiles the OS lets this process use)",
            Status.BAD_SHAPE: "a shape it does not take",
            Status.NOT_FINITE: "an input holds a NaN or an infinity"}


class KernelError(SpecstreamError):
    """A kernel call that could not run; `status` says why."""

    def __init__(self, call: str, status: int):
        try:
            self.status: Status | int = Status(status)
        except ValueError:  # a code this side does not know: said as it is
            self.status = status
        super().__init__(f"the kernel's {call} could not run: {_MEANING.get(self.status, f'code {status}')}")


def check(status: int, call: str) -> None:
    """Raise `KernelError` for a call that returned anything but Status.OK."""
    if status:
        raise KernelError(call, status)


# ---- the structures of the layer steps (rowinv.h) ------------------------------------------------------------------
_ptr, _i64, _f32, _i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int


class DraftArgs(ctypes.Structure):
    """rowinv.h's draft_args: a layer's draft Linears for its stream rows, the front's parts in order (arrays of kind,
    weight, scales), then down; the stream rows take them where there are at least min_rows."""
    _fields_ = [("kind", _ptr), ("w", _ptr), ("dm", _ptr), ("down_kind", _i64), ("down_w", _ptr), ("down_dm", _ptr),
                ("min_rows", _i64)]


class LayerArgs(ctypes.Structure):
    """rowinv.h's layer_args: what a step takes of one layer that stays the same from step to step (its norms, its
    Linears' arrays of kind, weight, scales and outputs, its row adapters, its down projection, its draft Linears, and
    its form where not Llama's: q/k norms before RoPE, norms after attention and the MLP instead of before)."""
    _fields_ = [("w1", _ptr), ("w2", _ptr), ("eps", _f32), ("n_qkv_parts", _i64), ("n_gu_parts", _i64),
                ("kind", _ptr), ("w", _ptr), ("dm", _ptr), ("n", _ptr), ("lora", _ptr), ("rank", _i64),
                ("down_kind", _i64), ("down_w", _ptr), ("down_dm", _ptr), ("down_A", _ptr), ("down_B", _ptr),
                ("draft", _ptr), ("q_norm", _ptr), ("k_norm", _ptr), ("qk_eps", _f32), ("qk_whole", _i64),
                ("post_norms", _i64), ("lora_fused", _i64)]


class StepArgs(ctypes.Structure):
    """rowinv.h's step_args: what every layer of one step shares (rows, the model's shape, RoPE tables, cache slots,
    attention keys, the first stream row, torch's vector exp for SiLU, threads, the dimensions RoPE rotates)."""
    _fields_ = [("q", _i64), ("d", _i64), ("H", _i64), ("Hkv", _i64), ("D", _i64), ("cos", _ptr), ("sin", _ptr),
                ("cap", _i64), ("start", _i64), ("spec", _ptr), ("keys", _ptr), ("scaling", _f32), ("n_main", _i64),
                ("expv", _ptr), ("threads", _i64), ("R", _i64)]


class LayerRun(ctypes.Structure):
    """rowinv.h's layer_run: consecutive layers in one call (the step, the count, the array of `LayerArgs` pointers,
    the arrays of their key and value caches)."""
    _fields_ = [("step", StepArgs), ("count", _i64), ("layers", _ptr), ("k_caches", _ptr), ("v_caches", _ptr)]


# ---- every exported function: name -> (restype, argtypes) ----------------------------------------------------------
_LINEAR = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _i32]  # x, M, K, W, N, y, threads
_LINEAR_LD = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _i64, _i32]  # ... y, ldy, threads
_GROUPED = [_ptr, _i64, _i64, _ptr, _ptr, _i64, _ptr, _i32]  # x, M, K, wq, scales, N, y, threads
_GROUPED_LD = [_ptr, _i64, _i64, _ptr, _ptr, _i64, _ptr, _i64, _i32]
_MAPPED = [_ptr, _i64, _ptr, _i64, _ptr, _i64, _i32]  # ... y, ldy, cols, split, y2, ld2, threads
SIGNATURES: dict[str, tuple] = {
    "rowinv_abi": (_i32, []), "rowinv_lanes": (_i32, []), "rowinv_span": (_i64, [_i64]),
    "linear_f32": (None, _LINEAR), "linear_bf16": (None, _LINEAR), "linear_f32b": (None, _LINEAR),
    "linear_bf16b": (None, _LINEAR), "linear_q4": (None, _GROUPED), "linear_q8": (None, _GROUPED),
    "rowinv_a8": (_i32, []), "linear_q4a8_ld": (_i32, _GROUPED_LD), "linear_q8a8_ld": (_i32, _GROUPED_LD),
    "linear_q8a8_map": (_i32, [_ptr, _i64, _i64, _ptr, _ptr, _i64] + _MAPPED),
    "rowinv_amx": (_i32, []), "linear_bf16x": (_i32, _LINEAR), "linear_bf16x_ld": (_i32, _LINEAR_LD),
    "linear_bf16x_map": (_i32, [_ptr, _i64, _i64, _ptr, _i64] + _MAPPED),
    "attend_f32": (_i32, [_ptr, _i64, _i64, _ptr, _i64, _i64, _ptr, _i64, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr,
                          _f32, _ptr, _i32]),
    "attend_tiles": (_i32, [_ptr, _i64, _i64, _ptr, _ptr, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _f32, _ptr, _i32]),
    "attend_tiles_rows": (_i32, []),
    "mask_keys": (_i64, [_ptr, _i64, _i64, _i64, _ptr, _ptr]),
    "rmsnorm_f32": (None, [_ptr, _i64, _i64, _ptr, _f32, _ptr]),
    "rope_store": (None, [_ptr, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr, _i64, _i64]),
    "silu_rows": (None, [_ptr, _i64, _i64, _i64, _ptr, _ptr]),
    "qk_norm": (None, [_ptr, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _f32, _i64]),
    "lora_rows": (_i32, [_ptr, _i64, _i64, _ptr, _ptr, _i64, _i64, _ptr, _i32]),
    "layer_front": (_i32, [ctypes.POINTER(LayerArgs), ctypes.POINTER(StepArgs), _ptr, _ptr, _ptr, _ptr, _ptr]),
    "layer_back": (_i32, [_ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _i32, _ptr, _ptr, _ptr, _ptr, _i64, _i64, _ptr,
                          _i32]),
    "layer_stack": (_i32, [ctypes.POINTER(LayerRun), _ptr, _ptr]),
    "stream_stack": (_i32, [ctypes.POINTER(LayerRun), ctypes.POINTER(LayerRun), _ptr, _ptr, _i64, _i64, _ptr, _ptr,
                            _f32, _ptr, _ptr]),
    "argmax_rows": (_i32, [_ptr, _i64, _i64, _i64, _ptr]),
    "embed_q8a8": (None, [_ptr, _i64, _i64, _ptr, _ptr, _ptr, _ptr]),
    "kernel_clock": (None, [_i32, _ptr]),
    "certified_choices": (_i32, [_ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _i64, _f32, _ptr, _ptr, _ptr]),
}


class Library(ctypes.CDLL):
    """The loaded kernel, every function of `SIGNATURES` typed; `lanes` (16: AVX-512, 8: AVX2) and `a8` (its
    AVX512-VNNI calls run: int4-a8) say what this build runs."""

    def __init__(self, path: str):
        super().__init__(path)
        for name, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(self, name)
            fn.restype, fn.argtypes = restype, argtypes
        if self.rowinv_abi() != ABI:
            raise OSError(f"{path} is the kernel's ABI {self.rowinv_abi()}, this code takes {ABI}")
        self.lanes = self.rowinv_lanes()
        self.a8 = bool(self.rowinv_a8())


_lock = threading.Lock()
_lib: Library | None = None
_why: str | None = None  # why the kernel cannot run here (None: not tried yet, "": it runs)


def _load() -> tuple[Library | None, str]:
    path, why = builder.compiled("rowinv", SOURCES, HEADERS)
    if path is None:
        return None, why
    try:
        return Library(path), ""
    except OSError as exc:
        return None, f"the kernel did not build: {exc}"


def library() -> Library | None:
    """The compiled kernel (built on first use), or None where it cannot run (see `unavailable_reason`)."""
    global _lib, _why
    if _why is None:
        with _lock:
            if _why is None:
                _lib, _why = _load()
    return _lib


def built() -> bool:
    """Whether the kernel is loaded or built for this machine already (no compile needed to load it)."""
    return bool(_lib) or builder.built("rowinv", SOURCES, HEADERS)


def available() -> bool:
    return library() is not None


def unavailable_reason() -> str:
    library()
    return _why or ""

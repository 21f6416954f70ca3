"""Backends: what runs the method's scores, attention, layer steps and stream rows on a machine (`base.Backend`).

One is chosen when an engine is made (`choose`): the first of `BACKENDS` that fits the model. The decoding loop,
`msa` and the stream rows ask it, never which instruction set, precision or device answers. A new backend (CUDA,
Triton) is one new module with a `Backend` subclass, and one line in `BACKENDS`.
"""

from __future__ import annotations

import weakref

from torch import nn

from specstream_core.backends import cpu_kernel, torch_backend
# what loading asks of the kernels before an engine exists, and this machine's answers (`load_time`)
from specstream_core.backends.load_time import a8_available, kernel_runs  # noqa: F401
from specstream_core.backends.base import Backend, argmax  # noqa: F401 - argmax: the greedy choice (verify.py)

# the backends, the first that fits a model runs it
BACKENDS: tuple[type[Backend], ...] = (
    cpu_kernel.CpuKernel,  # Linears on the row-invariant CPU kernel
    torch_backend.TorchBackend,  # torch's Linears: fits every model
)
# the stream rows' Linears (`streams.StreamRowLoRA`, the draft head): the kernel's wherever its library runs on this
# thread, on any model, each call falling back to torch's own (gradients, `rowinv.torch_linears()`, no library)
ROWS: type[Backend] = cpu_kernel.CpuKernel

_BOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> the backend its engine chose


def choose(model: nn.Module, precision: str, streams=None) -> Backend:
    """The backend that runs `model` at `precision` (with `streams`, the stream parameters attached to it, or None);
    `msa` then takes its layer steps from it (`bound`)."""
    backend = next(b for b in BACKENDS if b.fits(model, precision))(model, precision, streams)
    _BOUND[model] = backend
    return backend


def bound(model: nn.Module) -> Backend | type[Backend]:
    """The backend the last engine made on `model` chose (its layer steps: `msa`), else the modules' own (none)."""
    return _BOUND.get(model, Backend)


def prepare(model: nn.Module, precision: str) -> None:
    """A freshly loaded model made ready for decoding by the backend that will run it (`Backend.prepare`)."""
    next(b for b in BACKENDS if b.fits(model, precision)).prepare(model, precision)


# ---- what this machine's kernel can run, asked before (or without) an engine --------------------------------------
def on_kernel(model: nn.Module) -> bool:
    """Whether `model`'s Linears run on the row-invariant CPU kernel (the `cpu_kernel` backend fits it)."""
    return cpu_kernel.CpuKernel.fits(model, "")

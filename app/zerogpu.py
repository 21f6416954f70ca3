"""ZeroGPU: how the lab borrows a GPU for one race on a Hugging Face Space, and a stand-in that behaves
like it on any machine.

On ZeroGPU (`SPACES_ZERO_GPU=true`), `spaces.GPU` runs a decorated function in a worker process forked
from the app: the call's arguments go to the worker pickled through a pipe, and so does each value a
generator yields on its way back (spaces/zero/wrappers.py: `arg_queue.put(((args, kwargs), ...))`,
`res_queue.put(OkResult(res))`). So a decorated function takes and yields plain data only (strings,
numbers, lists, dicts, bytes, figures): nothing holding a lock (the engine cache, the admission gates),
no Gradio component, no request. What it needs beyond its arguments (the loaded engines) it reaches
through module globals, which the forked worker inherits; models are therefore loaded at module level,
before the first fork, and ZeroGPU moves their weights to the GPU inside the worker.

    run = gpu(duration=120)(fn)    # spaces.GPU where the package is installed, else fn itself

`SPECSTREAM_ZEROGPU_SIM=1` (or `pickling_worker(fn)`) runs fn as ZeroGPU does, without a GPU or the
package: in a forked process, arguments and results pickled across the boundary, an error in the
worker raised in the caller as a `gradio.Error` naming its class. The tests and scripts/gpu_check.py
drive the lab's race through it.
"""

from __future__ import annotations

import functools
import inspect
import logging
import multiprocessing
import os
import traceback

_END = "end"


def simulated() -> bool:
    return os.environ.get("SPECSTREAM_ZEROGPU_SIM", "").strip().lower() in ("1", "true", "yes", "on")


def on_zerogpu() -> bool:
    """True on a ZeroGPU Space (the variable the `spaces` package itself reads), or under the stand-in."""
    return simulated() or os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "t", "true")


def gpu(duration: int = 120):
    """The decorator for a function that needs the GPU: the stand-in under SPECSTREAM_ZEROGPU_SIM,
    `spaces.GPU(duration=...)` where `spaces` is installed (it returns the function unchanged off
    ZeroGPU), else nothing."""
    if simulated():
        return pickling_worker
    try:
        import spaces
    except ImportError:
        return lambda fn: fn
    return spaces.GPU(duration=duration)


def pickling_worker(task):
    """`task` run as spaces.GPU runs it: in a forked worker, arguments and results pickled."""
    if not inspect.isgeneratorfunction(task):
        @functools.wraps(task)
        def call(*args, **kwargs):
            values = list(_in_worker(task, args, kwargs, generator=False))
            return values[0]
        return call

    @functools.wraps(task)
    def stream(*args, **kwargs):
        yield from _in_worker(task, args, kwargs, generator=True)
    return stream


def _in_worker(task, args, kwargs, generator: bool):
    ctx = multiprocessing.get_context("fork")  # as spaces/zero/wrappers.py
    arg_queue, res_queue = ctx.SimpleQueue(), ctx.SimpleQueue()
    worker = ctx.Process(target=_serve, args=(task, arg_queue, res_queue, generator), daemon=True)
    worker.start()
    finished = False
    try:
        arg_queue.put((args, kwargs))  # pickles here, in the caller: a lock or a component fails now
        while True:
            kind, value = res_queue.get()
            if kind == _END:
                finished = True
                return
            if kind == "error":
                import gradio as gr

                print(value[1], flush=True)  # the worker's traceback, as ZeroGPU prints it
                raise gr.Error(f"ZeroGPU worker error: {value[0]}")
            yield value
    finally:  # a caller that stops early (a closed page) stops the worker, as ZeroGPU's stop event does
        worker.join(timeout=5 if finished else 0)
        if worker.is_alive():
            worker.kill()
            worker.join()


def _serve(task, arg_queue, res_queue, generator: bool) -> None:
    args, kwargs = arg_queue.get()
    logging.getLogger("specstream.lab").info("ZeroGPU stand-in: %s runs in worker %d (forked from %d)",
                                             getattr(task, "__name__", "task"), os.getpid(), os.getppid())
    try:
        if generator:
            for value in task(*args, **kwargs):
                res_queue.put(("ok", value))  # pickles each result on its way back
        else:
            res_queue.put(("ok", task(*args, **kwargs)))
    except Exception as exc:
        res_queue.put(("error", (type(exc).__name__, traceback.format_exc())))
    res_queue.put((_END, None))

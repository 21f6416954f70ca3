"""The lab's sweep of the files Gradio cached for it (trace downloads, uploads): every `every` seconds,
in a thread of its own, Gradio's own `delete_files_created_by_app` deletes those older than `age`.

Gradio's `Blocks(delete_cache=...)` runs the same function from a task on the server's event loop,
through its worker-thread pool. That task ends for good at its first exception (a set of cached files
can change size while it is iterated, as request threads add files under load), and it waits for a free
worker while every worker is busy. On a public server files then pile up: the load test
(tests/test_lab_load.py) saw dozens left behind. This thread survives both: an exception is logged and
the next sweep retries. Gradio's own task keeps its shutdown clean-up (delete_cache stays set)."""

from __future__ import annotations

import logging
import threading
import time
import weakref

from gradio.route_utils import delete_files_created_by_app

log = logging.getLogger("specstream.lab")


def start(demo, every: float, age: float) -> threading.Thread:
    """Sweep `demo`'s cached files every `every` seconds until `demo` is gone."""
    ref = weakref.ref(demo)

    def run() -> None:
        while True:
            time.sleep(every)
            blocks = ref()
            if blocks is None:
                return
            sweep(blocks, age)
            del blocks

    thread = threading.Thread(target=run, name="specstream-cache-sweep", daemon=True)
    thread.start()
    return thread


def sweep(blocks, age: float) -> None:
    """One pass; an error is logged, and the next pass retries."""
    try:
        delete_files_created_by_app(blocks, age)
    except Exception:
        log.exception("sweeping Gradio's file cache failed; the next sweep retries")

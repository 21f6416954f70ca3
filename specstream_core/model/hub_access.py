"""Whether a hub id can be read at all, answered in a second or two before anything asks the hub for it.

Without this, a hub id that is neither a local directory nor in the cache costs half a minute of transformers'
retries when there is no network, and then a traceback. `check(name)` returns at once for a local path or a
cached repo; otherwise it fails in one line when HF_HUB_OFFLINE is set or when the hub's endpoint cannot be
reached within `PROBE_S` (a TCP connect, its name lookup included). Torch-free; huggingface_hub imported on use.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

from specstream_core.errors import SpecstreamError

PROBE_S = 1.5  # the most a reachability probe waits
_reachable: dict[tuple[str, int], bool] = {}  # endpoint -> answer, asked once a process


def looks_like_hub_id(name: str) -> bool:
    """`owner/name` (or a bare name) that is not a path on this machine."""
    if not name or os.path.exists(name) or name.startswith((".", "/", "~")) or "\\" in name:
        return False
    parts = name.split("/")
    return len(parts) <= 2 and all(parts)


def offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return flag or bool(constants.HF_HUB_OFFLINE)


def cached(repo_id: str, filename: str = "config.json") -> bool:
    """Whether the hub cache holds this repo's `filename` (what loading reads first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except Exception:  # noqa: BLE001 - a malformed id: the loader says what is wrong with it
        return False


def endpoint() -> tuple[str, int]:
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def reachable(host: str, port: int, timeout: float = PROBE_S) -> bool:
    """A TCP connection to host:port opens within `timeout` seconds (the name lookup, which has no timeout of
    its own, runs in a daemon thread so that it cannot hold us longer)."""
    key = (host, port)
    if key not in _reachable:
        answer: list[bool] = []

        def probe():
            try:
                with socket.create_connection((host, port), timeout=timeout):
                    answer.append(True)
            except OSError:
                answer.append(False)

        thread = threading.Thread(target=probe, daemon=True)
        thread.start()
        thread.join(timeout)
        _reachable[key] = bool(answer and answer[0])
    return _reachable[key]


def check(name: str | None, what: str = "model") -> None:
    """Nothing for a local path, a cached hub repo or a reachable hub; else one clear SpecstreamError."""
    if not name or not looks_like_hub_id(name) or cached(name):
        return
    if offline():
        raise SpecstreamError(f"{what} {name!r} is not a local directory nor in the hub cache, and HF_HUB_OFFLINE is "
                              "set: give a local directory, or download it with the network on")
    host, port = endpoint()
    if not reachable(host, port):
        raise SpecstreamError(f"{what} {name!r} is not a local directory nor in the hub cache, and the hub "
                              f"({host}:{port}) cannot be reached: no network? Give a local directory")

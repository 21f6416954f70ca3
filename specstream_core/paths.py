"""Where the project keeps what it makes on a machine: converted models, compiled kernels."""

import os


def cache_root() -> str:
    """$SPECSTREAM_CACHE, else ~/.cache/specstream."""
    return os.environ.get("SPECSTREAM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "specstream")

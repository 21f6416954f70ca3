"""Reading result files (benchmarks, pass costs) with one clear error."""

from __future__ import annotations

import json
import os

from specstream_core.errors import SpecstreamError


def read_json(path: str, what: str):
    """A results file's JSON, or None when there is none yet; SpecstreamError when it is unreadable."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise SpecstreamError(f"cannot read {what} {path}: {exc}") from None

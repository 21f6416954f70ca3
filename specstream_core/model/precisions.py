"""The names of the precisions and the flags that choose one: plain data, so that the command line can build its
parser (and answer `--help`) without importing torch. `model/loading.py` resolves and loads them."""

from __future__ import annotations

import os

from specstream_core.errors import SpecstreamError

PRECISIONS = ("auto", "fp32", "bf16", "nf4", "int8", "int4", "int4-a8")
INT4 = ("int4", "int4-a8")  # the CPU's 4-bit precisions (kernels/linears/int4.py)
DEFAULT_PRECISION = "auto"
QUANTIZE_CHOICES = ("none", "nf4", "int8", "int4", "int4-a8")
DEFAULT_KERNEL = os.environ.get("SPECSTREAM_KERNEL", "auto")  # LoadConfig.kernel's default

NOT_EXACT_NOTE = ("not exact: at {precision} a speculative pass can round differently from a plain pass, so "
                  "a near-tie can flip a token (fp32 and int4 are exact; `speed` shows how often outputs differ)")


def precision_from_flags(quantize: str = "none", dtype: str = DEFAULT_PRECISION) -> str:
    if quantize not in QUANTIZE_CHOICES:
        raise SpecstreamError(f"unknown --quantize {quantize!r}; choose one of {', '.join(QUANTIZE_CHOICES)}")
    return dtype if quantize == "none" else quantize

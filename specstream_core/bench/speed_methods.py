"""The methods `speed` times (plain data: the command line lists them without importing torch)."""

from __future__ import annotations

# method -> (precision, reference method); "hf-greedy" (transformers fp32) is the baseline
METHODS = {
    "hf-greedy": ("fp32", "hf-greedy"),
    "ar": ("fp32", "hf-greedy"),
    "ss": ("fp32", "ar"),
    "hf-greedy bf16": ("bf16", "hf-greedy bf16"),
    "ar bf16": ("bf16", "hf-greedy bf16"),
    "ss bf16": ("bf16", "ar bf16"),
    "hf-greedy int4": ("int4", "hf-greedy int4"),
    "hf-greedy int4 kernel": ("int4", "hf-greedy int4 kernel"),
    "ar int4": ("int4", "hf-greedy int4 kernel"),
    "ss int4": ("int4", "ar int4"),
    "hf-greedy int4-a8 kernel": ("int4-a8", "hf-greedy int4-a8 kernel"),
    "ar int4-a8": ("int4-a8", "hf-greedy int4-a8 kernel"),
    "ss int4-a8": ("int4-a8", "ar int4-a8"),
    "llama.cpp": ("gguf Q4_1", "ar int4"),
    "llama-bench": ("gguf Q4_1", "llama-bench"),  # llama.cpp's own binary: rates, no tokens to compare
}

# the command line's names (cli/vocab.py): a method and, apart from it, the precisions it runs at
NAMES = ("hf-greedy", "hf-greedy-kernel", "ar", "ss", "llama.cpp", "llama-bench")
PRECISIONS = ("fp32", "bf16", "int4", "int4-a8")


def row(method: str, precision: str) -> str | None:
    """The row (a key of METHODS) of a method at a precision; None where `speed` has no such row
    (hf-greedy-kernel at fp32 or bf16, hf-greedy at int4-a8); llama.cpp and llama-bench are their GGUF file's own
    precision."""
    if method in ("llama.cpp", "llama-bench"):
        return method
    name = "hf-greedy" if method == "hf-greedy-kernel" else method
    key = name + ("" if precision == "fp32" else f" {precision}") + (" kernel" if method == "hf-greedy-kernel" else "")
    return key if key in METHODS else None


# the old spellings, a method and its precision in one name with spaces: "ar int4-a8" -> ("ar", "int4-a8")
OLD = {k: (k.split()[0] + ("-kernel" if k.endswith(" kernel") else ""), k.split()[1] if " " in k else "fp32")
       for k in METHODS if k not in NAMES}


def select(methods: list[str], precisions: list[str]) -> list[str]:
    """The rows of `methods` × `precisions` that exist."""
    out = []
    for name in methods:
        out += [k for k in (row(name, p) for p in precisions) if k and k not in out]
    return out

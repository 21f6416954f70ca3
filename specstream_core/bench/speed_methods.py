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
}

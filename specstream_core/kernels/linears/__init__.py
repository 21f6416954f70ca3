"""Linears on the kernel: fp32/bf16 (rowinv), 4-bit (int4) and 4-bit against 8-bit activations (int4_a8)."""

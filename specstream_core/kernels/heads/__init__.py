"""The LM head on the kernel: 8-bit groups, the draft vocabulary first (merged), certified greedy picks, argmax."""

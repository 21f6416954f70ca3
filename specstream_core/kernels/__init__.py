"""The CPU kernel layer: row-invariant Linears, heads, layer steps and AMX tiles over one C library
(csrc/), built on first use. It imports nothing of the method (model/, decoding/) but `model.compat` and `errors`."""

"""What a decoding's output equals, in one line that every result carries: the CLI's JSON, `Result.stats`, a
trace's meta and the lab's model line.

The facts behind the labels (tests: test_lossless, test_families, test_rowinv, test_int4, test_int4_a8, test_precision_defaults):
- greedy speculative decoding at an exact precision (`loading.is_exact`) gives plain decoding's tokens at that
  precision; at another one a near-tie can flip a token, so equality is measured there, not proven;
- plain decoding at fp32 gives transformers' greedy `generate` on the checkpoint loaded in fp32. bf16 on the
  row-invariant CPU kernel keeps bf16 weights and sums in fp32, so on a bf16 checkpoint it is that same computation;
- int4, int4-a8, nf4, int8, and bf16 on weights stored wider, are models of their own: the output is plain
  decoding at that precision, not transformers' on the checkpoint;
- sampling draws from the model's distribution (after temperature, top-k, top-p) at the precision: the same
  distribution as plain sampling, not the same tokens;
- on CUDA none of this is proven (row-invariance is a property of the CPU kernel): such labels say "measured".
"""

from __future__ import annotations

from specstream_core import backends
from specstream_core.model import default_model
from specstream_core.model.loading import DEFAULT_KERNEL, INT4, checkpoint_dtype, is_exact, resolve_precision

NOT_PROVEN = "measured, not proven: "


def label(precision: str, device: str = "cpu", *, kernel: bool = False, checkpoint: str | None = None,
          bundled: bool = False, adapted: bool = False, speculative: bool = True, greedy: bool = True) -> str:
    """What the output of a decoding equals.

    precision: the resolved precision; device: "cpu" or "cuda[:N]"; kernel: the Linears run on the row-invariant
    CPU kernel; checkpoint: the checkpoint's own dtype ("float32", "bfloat16", ...; `loading.checkpoint_dtype`);
    bundled: the bundled default model (a GGUF-converted base); adapted: a shared-mode LoRA is merged into the
    weights; speculative: speculative (ss) rather than plain (ar) decoding; greedy: temperature 0."""
    widened = precision == "fp32" or (precision == "bf16" and kernel and checkpoint == "bfloat16")
    if not greedy:
        core = f"the model's sampling distribution at {precision}"
    elif widened:
        core = "transformers greedy generate at fp32" + (" on the checkpoint's bf16 weights" if precision == "bf16"
                                                          else "")
    else:
        core = f"plain decoding at {precision}"
    if adapted:
        core += ", with the shared set's LoRA merged into the base"
    if bundled and precision in INT4:
        core += " (the bundled model's fastest measured precision)"
    if not speculative and not (greedy and widened):  # plain decoding at a precision is that, by definition
        return core
    if device.startswith("cuda"):
        return NOT_PROVEN + core
    if speculative and not is_exact(precision, device, "rowinv" if kernel else "torch"):
        return NOT_PROVEN + core + " (a near-tie can flip a token)"
    return core


def facts(engine) -> dict:
    """The keyword arguments of `label` that an engine knows (its load records the checkpoint: `loading.load_model`)."""
    checkpoint = getattr(engine.model.config, "specstream_checkpoint", None) or {}
    streams = engine.streams
    return {"device": engine.device.type, "kernel": backends.on_kernel(engine.model),
            "checkpoint": checkpoint.get("dtype"), "bundled": bool(checkpoint.get("bundled")),
            "adapted": streams is not None and streams.cfg.mode == "shared"}


def for_engine(engine, cfg) -> str:
    """`label` for a decoding of `cfg` (a DecodeConfig) on `engine`."""
    return label(engine.precision, speculative=cfg.mode == "ss", greedy=cfg.sampling.greedy, **facts(engine))


def for_base(base: str, precision: str = "auto", device: str = "cpu", stream_mode: str = "lossless") -> str:
    """`label` for greedy speculative decoding of a base before it is loaded (the lab's model line): `precision`
    resolved as loading resolves it."""
    resolved = resolve_precision(precision, device, DEFAULT_KERNEL, base)
    return label(resolved, device, kernel=backends.kernel_runs(resolved, device, DEFAULT_KERNEL),
                 checkpoint=checkpoint_dtype(base), bundled=bool(default_model.gguf_source(base)),
                 adapted=stream_mode == "shared")


def faster_options(engine) -> list[tuple[str, str]]:
    """(flag, what the output would equal) for each precision faster than the engine's that its device runs:
    bf16 weights and 4-bit weights on the row-invariant CPU kernel (int4-a8 where its build has AVX512-VNNI)."""
    if not backends.on_kernel(engine.model) or engine.precision in INT4:
        return []
    known = {**facts(engine), "kernel": True}
    options = [("--precision", "bf16")] if engine.precision == "fp32" else []
    options.append(("--precision", "int4-a8" if backends.a8_available() else "int4"))
    return [(f"{flag} {p}", label(p, **known)) for flag, p in options]


def auto_hint(engine) -> str | None:
    """One line for a decoding whose precision `auto` chose as the checkpoint's own (any base but the bundled model):
    what it equals, and the faster precisions with what each would equal instead; None where none is faster."""
    if facts(engine)["bundled"]:
        return None
    faster = faster_options(engine)
    if not faster:
        return None
    options = "; ".join(f"{flag} ({equals})" for flag, equals in faster)
    return (f"note: auto ran {engine.precision}, this checkpoint's own precision, so greedy output equals "
            f"{label(engine.precision, **facts(engine))}. Faster, one flag away: {options}")

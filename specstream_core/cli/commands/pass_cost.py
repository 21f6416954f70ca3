"""`pass-cost`: what a plain pass, a draft-verification pass and a Speculative Streaming pass cost on this
machine, and the τ each needs to break even or reach 2× (see specstream_core/pass_cost.py).

    python -m specstream_core pass-cost                       # the default model and its lossless streams
    python -m specstream_core pass-cost --precisions fp32,int4 --streams assets/smollm2/streams-lossless,assets/smollm2/streams-shared
    python -m specstream_core pass-cost --base MODEL --gamma 4 --n-stream-layers 4   # any model, fresh streams

No trained drafter is needed: a pass costs the same whatever the streams have learned.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import warnings

from specstream_core.cli.args import write_text
from specstream_core.model.precisions import PRECISIONS
from specstream_core.model import defaults
from specstream_core.errors import SpecstreamError
from specstream_core.model.stream_config import check_gamma


def add_arguments(p) -> None:
    p.add_argument("--base", help="base model directory or hub id (default: SmolLM2-135M-Instruct)")
    p.add_argument("--random-shape", metavar="NAME", help="instead of --base: a random model at a real checkpoint's "
                   "shape (qwen3-0.6b, gemma-3-1b, phi-4-mini: bench/real_shapes.py), fresh streams; int4, int4-a8, fp32 "
                   "or bf16")
    p.add_argument("--streams", default="", help="stream directory, or several separated by commas (default: the "
                   "default model's lossless streams; with --base: fresh streams)")
    p.add_argument("--gamma", type=int, default=4, help="streams of fresh (untrained) stream parameters")
    p.add_argument("--n-stream-layers", type=int, default=None, help="multi-stream layers of fresh streams")
    p.add_argument("--precisions", default="fp32", help=f"comma-separated subset of {', '.join(PRECISIONS)}")
    p.add_argument("--stream-weights", default="auto", help="comma-separated: what the multi-stream layers' stream rows "
                   "are computed with, each measured in turn (auto, same, int4-a8: kernels/draft_weights.py)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="time passes and the roofline's loops by "
                   "wall time, or by this process's CPU time (on a machine other processes share: the time spent "
                   "preempted left out; one thread)")
    p.add_argument("--context", type=int, default=256, help="tokens already in the KV cache")
    p.add_argument("--verify-rows", default="2,3,5,9", help="chain lengths of the draft-verification passes")
    p.add_argument("--drafts", default="recommended", help="draft passes, NODESxSTREAMS separated by commas (4x1: 4 "
                   "nodes carrying 1 stream row each), 'recommended' (the stream set's draft at each precision: 2 nodes "
                   "up to its node budget) or 'none'")
    p.add_argument("--repeats", type=int, default=30, help="timed rounds (median)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", metavar="FILE", help="write every run (passes and settings) as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    p.add_argument("--plots", metavar="DIR", help="write the figure (pass-cost.svg and pass-cost.html) into DIR")


def _plan(args) -> tuple[tuple[int, ...], list[str], list[str | None]]:
    from specstream_core.kernels import draft_weights

    from specstream_core.cli import vocab

    try:
        verify_rows = tuple(int(x) for x in args.verify_rows.split(",") if x.strip())
    except ValueError:
        raise SpecstreamError(f"--verify-rows must be comma-separated integers, got {args.verify_rows!r}") from None
    precisions = vocab.precisions(args.precisions, valid=PRECISIONS)
    check_gamma(args.gamma, "--gamma", most=16)  # a cost model: wider than any stream set
    if not 1 <= args.repeats <= 10000:
        raise SpecstreamError(f"--repeats must be between 1 and 10000, got {args.repeats}")
    if args.context < 1:
        raise SpecstreamError(f"--context must be at least 1 token, got {args.context}")
    if args.random_shape and (args.base or args.streams):
        raise SpecstreamError("--random-shape makes its own model and fresh streams: leave out --base and --streams")
    stream_dirs = [x.strip() for x in args.streams.split(",") if x.strip()] or [None]
    args.stream_weights = [x.strip() for x in args.stream_weights.split(",") if x.strip()] or ["auto"]
    bad = [x for x in args.stream_weights if x not in draft_weights.KINDS]
    if bad:
        raise SpecstreamError(f"--stream-weights must list some of {', '.join(draft_weights.KINDS)}, got {bad[0]!r}")
    for d in stream_dirs:
        if d is not None and not os.path.isfile(os.path.join(d, "streams_config.json")):
            raise SpecstreamError(f"{d} is not a stream directory (no streams_config.json)")
    return verify_rows, precisions, stream_dirs


def _drafts(spec: str, engine) -> tuple[tuple[int, int], ...]:
    """--drafts as (nodes, streams) pairs for this engine."""
    from specstream_core.bench.pass_cost import recommended_drafts

    spec = spec.strip().lower()
    if spec == "recommended":
        return recommended_drafts(engine)
    if spec in ("", "none"):
        return ()
    try:
        return tuple((int(n), int(g)) for n, g in (x.strip().split("x") for x in spec.split(",") if x.strip()))
    except ValueError:
        raise SpecstreamError(f"--drafts must be 'recommended', 'none' or NODESxSTREAMS,... (e.g. 4x1,5x1), got {spec!r}") from None


def _settings(args, engine, base: str, streams: str, machine, stream_weights: str) -> dict:
    from specstream_core.kernels import draft_weights

    import torch

    from specstream_core.kernels.linears import rowinv

    return {"model": base, "streams": streams, "precision": engine.precision, "device": str(engine.device),
            "linears": rowinv.linears_label(engine.model), "layers": _layers_label(engine),
            "stream_weights": stream_weights,
            "stream_min_rows": draft_weights.MIN_ROWS,
            "threads": torch.get_num_threads(), "clock": args.clock, "context": args.context, "repeats": args.repeats,
            "gamma": engine.streams.cfg.gamma, "n_stream_layers": engine.streams.cfg.n_stream_layers,
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "torch": torch.__version__, "machine": machine.to_dict()}


def run(args) -> int:
    import torch

    from specstream_core.bench.plots import pass_cost_figure, svg_bars
    from specstream_core.bench.pass_cost import figure_series, markdown, measure, to_json

    verify_rows, precisions, stream_dirs = _plan(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    from specstream_core.bench import clocks
    from specstream_core.bench.roofline import measure_machine

    if args.clock == "cpu" and torch.get_num_threads() != 1:
        raise SpecstreamError("--clock cpu times one thread: use it with --threads 1")
    clocks.use(args.clock)
    machine = measure_machine()  # once, with the threads the passes use
    print(f"this machine: {machine.bandwidth_gbs:.1f} GB/s read, {machine.peak_gflops:.0f} GFLOP/s at most "
          f"(vector FMAs {machine.fma_gflops:.0f}, torch's matmul {machine.matmul_gflops:.0f}"
          + (f"; 8-bit dot products {machine.int8_gops:.0f} GOP/s" if machine.int8_gops else "") + "; "
          f"{torch.get_num_threads()} thread(s))", flush=True)
    runs = []
    for streams_arg in stream_dirs:
        base, streams = (f"random {args.random_shape}", None) if args.random_shape else defaults.resolve(args.base,
                                                                                                         streams_arg)
        for precision in precisions:
            engine = _engine(args, base, streams, precision)
            name = os.path.basename(streams.rstrip("/")) if streams else f"fresh streams (γ {args.gamma})"
            measured = set()
            for asked in args.stream_weights:
                try:
                    kind = engine.set_stream_weights(asked)
                except SpecstreamError as exc:
                    print(f"skipping {precision} with --stream-weights {asked}: {exc}", flush=True)
                    continue
                if kind in measured:  # "auto" is one of the others
                    continue
                measured.add(kind)
                label = f"{precision} · {name}" + (" · 4-bit stream rows" if kind == "int4-a8" else "")
                print(f"measuring {label} ...", flush=True)
                costs = measure(engine, context=args.context, verify_rows=verify_rows, repeats=args.repeats,
                                progress=not args.no_progress, machine=machine, drafts=_drafts(args.drafts, engine))
                runs.append(to_json(label, costs, _settings(args, engine, base, streams or name, machine, kind)))
            del engine
    tables = markdown(runs)

    print(tables)
    if args.json:
        from specstream_core.bench.provenance import stamp

        write_text(args.json, json.dumps(stamp({"runs": runs}, getattr(args, "_command", None)), indent=1) + "\n")
    if args.markdown:
        write_text(args.markdown, tables)
    if args.plots:
        labels, series = figure_series(runs)
        title = "Cost of one forward pass ÷ a plain pass"
        write_text(os.path.join(args.plots, "pass-cost.svg"), svg_bars(title, labels, series, "× plain pass"))
        pass_cost_figure(runs).write_html(os.path.join(args.plots, "pass-cost.html"), include_plotlyjs="cdn",
                                          full_html=True)
    return 0


def _layers_label(engine) -> str:
    """What runs the decoder layers: the kernel's whole-layer steps, or the library's modules and why."""
    covered, why = engine.backend.layer_path()
    return "whole-layer kernel steps" if covered else f"modules: {why}"


def _engine(args, base: str, streams: str | None, precision: str):
    """The engine a run measures: the base model at `precision` (fresh streams where none are given), or a random model
    at a real shape (`--random-shape`)."""
    from specstream_core.bench import real_shapes
    from specstream_core.decoding.engine import Engine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fresh streams cost the same as trained ones: no warning here
        if args.random_shape:
            return real_shapes.random_engine(args.random_shape, precision, args.gamma, args.n_stream_layers)
        return Engine.load(base, streams_dir=streams, precision=precision, device=args.device, gamma=args.gamma,
                           n_stream_layers=args.n_stream_layers)

"""`train-curve`: τ against training time, from the evaluation records of stream training runs (`train --eval-every`),
a curve per run in one result file and one figure."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="a training run's output folder (its checkpoint while it runs, else train_log.json); "
                   "several runs give a curve each")
    p.add_argument("--labels", nargs="+", default=[], metavar="LABEL",
                   help="a name per run, in the runs' order (default: each folder's name)")
    p.add_argument("--json", help="write the curves here (a result file `report` shows)")
    p.add_argument("--plot", help="write the figure here (SVG)")
    p.add_argument("--title", default="", help="what the runs compare, in a few words")


def run(args) -> int:
    import os

    from specstream_core.bench import train_curve
    from specstream_core.cli.args import check_output_file, write_text
    from specstream_core.errors import SpecstreamError

    for path, flag in ((args.json, "--json"), (args.plot, "--plot")):
        if path:
            check_output_file(path, flag)
    labels = args.labels or [os.path.basename(os.path.normpath(r)) for r in args.runs]
    if len(labels) != len(args.runs):
        raise SpecstreamError(f"--labels names {len(labels)} runs, but {len(args.runs)} are given")
    data = train_curve.curves([(label, train_curve.read_run(r)) for label, r in zip(labels, args.runs)],
                              args._command, args.title)
    for c in data["curves"]:
        for p in c["points"]:
            top1 = ", ".join(f"{a:.3f}" for a in p["stream_top1"])
            print(f"{c['label']}: step {p['step']:>5}  {p['minutes']:7.1f} min  τ estimate {p['tau_estimate']:.3f}  "
                  f"top-1 per stream {top1}")
    if args.json:
        import json

        write_text(args.json, json.dumps(data, indent=1) + "\n")
    if args.plot:
        write_text(args.plot, train_curve.svg(data))
    return 0

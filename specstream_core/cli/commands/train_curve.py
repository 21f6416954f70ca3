"""`train-curve`: τ against training time, from the evaluation records of a stream training run (`train --eval-every`)."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("run", help="the training run's output folder (its checkpoint while it runs, else train_log.json)")
    p.add_argument("--json", help="write the curve here (a result file `report` shows)")
    p.add_argument("--plot", help="write the figure here (SVG)")
    p.add_argument("--title", default="", help="what the run was, in a few words")


def run(args) -> int:
    from specstream_core.bench import train_curve
    from specstream_core.cli.args import check_output_file, write_text

    for path, flag in ((args.json, "--json"), (args.plot, "--plot")):
        if path:
            check_output_file(path, flag)
    data = train_curve.curve(train_curve.read_run(args.run), args._command, args.title)
    for p in data["points"]:
        top1 = ", ".join(f"{a:.3f}" for a in p["stream_top1"])
        print(f"step {p['step']:>5}  {p['minutes']:7.1f} min  τ estimate {p['tau_estimate']:.3f}  top-1 per stream {top1}")
    if args.json:
        import json

        write_text(args.json, json.dumps(data, indent=1) + "\n")
    if args.plot:
        write_text(args.plot, train_curve.svg(data))
    return 0

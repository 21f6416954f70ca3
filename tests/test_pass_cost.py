"""`pass-cost`: every pass kind runs on a real (tiny) model, rows match the tree shapes, the cached
prefix is left as it was, and bad settings get one clear message."""

import json

import pytest

from specstream_core.cli import main
from specstream_core.decoding.engine import Engine
from specstream_core.errors import SpecstreamError
from specstream_core.bench.plots import pass_cost_figure
from specstream_core.bench.pass_cost import markdown, measure, to_json
from tiny_models import save_tiny_model_dir


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def engine(tiny_dir):
    with pytest.warns(UserWarning, match="fresh"):
        return Engine.load(tiny_dir, gamma=3, n_stream_layers=1)


def test_measure_kinds_rows_and_ratios(engine):
    costs = measure(engine, context=12, verify_rows=(2, 4), repeats=2, progress=False)
    assert [c.label for c in costs] == ["plain", "verify 2", "verify 4", "ss γ=1", "ss γ=2", "ss γ=3"]
    by = {c.label: c for c in costs}
    assert by["plain"].ratio == 1.0 and (by["plain"].rows_bottom, by["plain"].rows_top) == (1, 1)
    assert (by["verify 4"].rows_bottom, by["verify 4"].rows_top) == (4, 4)
    for g in (1, 2, 3):  # g+1 chain nodes, each carrying streams 1..g in the multi-stream layers
        c = by[f"ss γ={g}"]
        assert (c.nodes, c.rows_bottom, c.rows_top) == (g + 1, g + 1, (g + 1) * (1 + g))
        assert c.tau_for_2x == pytest.approx(2 * c.ratio, abs=0.011) and c.max_tau == g + 1
    assert all(c.median_ms > 0 for c in costs)
    run = to_json("fp32 · fresh", costs, {"context": 12, "device": "cpu", "threads": 1, "repeats": 2})
    table = markdown([run])
    assert table.split("Where the time goes")[0].count("\n| ") == len(costs) + 1 and "| ss γ=3 | 4 | 4 / 16 |" in table
    fig = pass_cost_figure([run, to_json("again", costs[:2], run["settings"])])
    assert [t.name for t in fig.data] == ["fp32 · fresh", "again"]
    assert list(fig.data[1].y) == [1.0, by["verify 2"].ratio] + [None] * 4  # missing kinds stay empty


def test_measure_rejects_bad_settings(engine):
    with pytest.raises(SpecstreamError, match="context length"):
        measure(engine, context=64, repeats=1, progress=False)
    with pytest.raises(SpecstreamError, match="verify rows"):
        measure(engine, context=8, verify_rows=(1,), repeats=1, progress=False)
    with pytest.raises(SpecstreamError, match="repeats"):
        measure(engine, context=8, repeats=0, progress=False)


def test_cli_writes_json_and_reports_errors(tiny_dir, tmp_path, capsys):
    out = tmp_path / "pc.json"
    rc = main(["pass-cost", "--base", tiny_dir, "--gamma", "2", "--n-stream-layers", "1", "--context", "8",
               "--repeats", "1", "--verify-rows", "3", "--no-progress", "--json", str(out), "--plots", str(tmp_path)])
    assert rc == 0
    (run,) = json.loads(out.read_text())["runs"]
    # and the passes of the streams' recommended draft (fresh streams: a 2-deep chain, 2 streams a node)
    assert [p["label"] for p in run["passes"]] == ["plain", "verify 3", "ss γ=1", "ss γ=2", "draft 2×2", "draft 3×2"]
    assert run["settings"]["gamma"] == 2 and run["settings"]["context"] == 8 and run["label"].startswith("fp32")
    from specstream_core.kernels.linears import rowinv

    linears = "rowinv-" + rowinv.isa() if rowinv.available() else "torch"  # which Linears were timed
    assert run["settings"]["linears"] == linears
    printed = capsys.readouterr().out
    assert f"Linears on {linears}" in printed
    assert "| plain | 1 | 1 / 1 |" in printed and "GB/s read" in printed and "Roofline: this machine read" in printed
    machine = run["settings"]["machine"]
    assert machine["bandwidth_gbs"] > 0 and machine["peak_gflops"] > 0
    by = {p["label"]: p for p in run["passes"]}
    assert by["plain"]["roofline_ratio"] == 1.0 and by["plain"]["roofline_ms"] > 0
    assert by["ss γ=2"]["roofline_ms"] >= by["verify 3"]["roofline_ms"] > 0  # same nodes, more rows
    assert (tmp_path / "pass-cost.svg").read_text().startswith("<svg") and (tmp_path / "pass-cost.html").is_file()
    for argv, message in ((["--verify-rows", "two"], "--verify-rows must be comma-separated integers"),
                          (["--precisions", "fp8"], "--precisions: unknown name 'fp8'"),
                          (["--streams", str(tmp_path)], "is not a stream directory")):
        assert main(["pass-cost", "--base", tiny_dir, "--no-progress", *argv]) == 2
        assert message in capsys.readouterr().err


def test_rooflines_follow_rows_and_precision(engine):
    from specstream_core.bench.pass_cost import with_rooflines
    from specstream_core.bench.roofline import Machine

    costs = measure(engine, context=12, verify_rows=(4,), repeats=1, progress=False)
    slow_core = Machine(bandwidth_gbs=1000.0, peak_gflops=0.01)  # compute-bound: rows show
    with_rooflines(costs, engine, slow_core, 12)
    by = {c.label: c for c in costs}
    assert by["plain"].bound == "compute" and by["plain"].roofline_ratio == 1.0
    assert by["ss γ=3"].roofline_ratio > by["verify 4"].roofline_ratio > 1.0
    table = markdown([to_json("x", costs, {"context": 12, "device": "cpu", "threads": 1, "repeats": 1})])
    assert "roofline ms (bound)" in table and "(compute)" in table


def test_where_the_time_goes_on_the_kernel(engine, tiny_dir):
    """On the kernel's engines each pass is split into its Linears, its attention and the rest; the parts
    are real time inside the pass (so they add up to no more than it) and grow with the rows."""
    from specstream_core.kernels.linears import rowinv

    if not rowinv.uses_kernel(engine.model):
        pytest.skip(f"kernel unavailable: {rowinv.unavailable_reason()}")
    costs = measure(engine, context=12, verify_rows=(4,), repeats=3, progress=False)
    for c in costs:
        assert c.linears_ms > 0 and c.attention_ms >= 0 and c.rest_ms >= 0  # attention inside a layer front counts as Linears
        assert c.linears_ms + c.attention_ms + c.rest_ms < 20 * c.median_ms  # one pass's time, not a sum
    table = markdown([to_json("x", costs, {"context": 12, "device": "cpu", "threads": 1, "repeats": 3})])
    assert "Where the time goes" in table and "| ss γ=3 |" in table.split("Where the time goes")[1]
    torch_engine = Engine.load(tiny_dir, gamma=3, n_stream_layers=1, kernel="torch")
    plain = measure(torch_engine, context=12, verify_rows=(4,), repeats=1, progress=False)
    assert all(c.linears_ms != c.linears_ms for c in plain)  # not measured: NaN, and no table
    assert "Where the time goes" not in markdown([to_json("t", plain, {"context": 12, "device": "cpu",
                                                                       "threads": 1, "repeats": 1})])


def test_draft_passes_and_the_parts_below(engine):
    """A draft's passes (n nodes, s stream rows each) have its rows and roofline; on the kernel, the breakdown below
    Linears / attention / rest splits the head, the main-row and the multi-stream layers (the kernel's clock) and
    Python, each real time inside the pass."""
    from specstream_core.bench.pass_cost import recommended_drafts, with_rooflines
    from specstream_core.bench.pass_parts import BELOW
    from specstream_core.bench.roofline import Machine
    from specstream_core.kernels.linears import rowinv

    assert recommended_drafts(engine) == ((2, 3), (3, 3), (4, 3))  # fresh γ 3: a 3-deep chain, no lookup
    with pytest.raises(SpecstreamError, match="drafts need"):
        measure(engine, context=12, verify_rows=(2,), repeats=1, progress=False, drafts=((3, 4),))
    costs = measure(engine, context=12, verify_rows=(2,), repeats=2, progress=False, drafts=((3, 1), (2, 2)))
    by = {c.label: c for c in costs}
    assert (by["draft 3×1"].nodes, by["draft 3×1"].rows_bottom, by["draft 3×1"].rows_top) == (3, 3, 6)
    assert (by["draft 2×2"].rows_bottom, by["draft 2×2"].rows_top) == (2, 6)
    with_rooflines(costs, engine, Machine(bandwidth_gbs=1000.0, peak_gflops=0.01), 12)  # compute-bound: rows show
    assert by["draft 3×1"].roofline_ms > by["verify 2"].roofline_ms
    if not rowinv.uses_kernel(engine.model):
        pytest.skip(f"kernel unavailable: {rowinv.unavailable_reason()}")
    for c in costs:
        assert set(c.below) == set(BELOW) and all(v >= 0 for v in c.below.values())
        assert sum(c.below.values()) < 20 * c.median_ms  # one pass's time, not a sum over rounds
        assert c.below["main_linears"] > 0  # the layer steps' Linears, by the kernel's clock
    assert all(v == 0 for k, v in by["plain"].below.items() if k.startswith("stream_"))  # no stream rows, no such layer
    table = markdown([to_json("x", costs, {"context": 12, "device": "cpu", "threads": 1, "repeats": 2})])
    assert "Below that" in table and "| draft 2×2 |" in table.split("Below that")[1]

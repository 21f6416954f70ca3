"""Benchmark figures and the lab's Benchmarks panel, from a results file (no model involved)."""

import json
import xml.dom.minidom
from dataclasses import asdict

import pytest

from specstream_core.bench.runner import Row
from specstream_core.bench.plots import (ablation_figure, ablation_series, load_results, speedup_figure, tau_figure,
                                         write_plots)
from specstream_core.errors import SpecstreamError


def _row(category, method, speedup, tau, precision="fp32", **kw):
    return asdict(Row(category, method, tau=tau, call_reduction=tau, speedup=speedup, speedup_vs_ar=speedup,
                      identical=True, identical_count=2, prompts=2, tokens=64, extra_params=10, tokens_per_s=1.0,
                      precision=precision, speedup_per_tau=speedup / tau, **kw))


@pytest.fixture()
def results():
    rows = [_row(c, m, s, t, p) for p in ("fp32", "nf4") for c in ("sql", "math")
            for m, s, t in (("ar", 1.0, 1.0), ("hf-greedy", 1.0, 1.0), ("ss-lossless", 1.4, 2.0), ("medusa", 1.2, 1.5))]
    abl = [_row(c, f"ss γ={g}", 1 + g / 10, 1 + g / 4, ablation="gamma", value=str(g)) for c in ("sql", "math")
           for g in (1, 2, 3)]
    return {"rows": rows, "ablations": abl, "settings": {"baseline": "hf-greedy", "categories": ["sql", "math"], "n": 2}}


def test_figures_from_results(results, tmp_path):
    fig = speedup_figure(results, "nf4")
    assert [t.name for t in fig.data] == ["ar", "hf-greedy", "ss-lossless", "medusa"]
    assert list(fig.data[2].y) == [1.4, 1.4] and "nf4" in fig.layout.title.text
    assert list(tau_figure(results, "fp32").data[3].y) == [1.5, 1.5]
    pts = ablation_series(results, "gamma")
    assert [p["value"] for p in pts] == ["1", "2", "3"] and abs(pts[1]["tau"] - 1.5) < 1e-9
    assert len(ablation_figure(results, "gamma").data) == 2
    with pytest.raises(SpecstreamError):
        ablation_figure(results, "prune")
    written = write_plots(results, str(tmp_path))
    svgs = [p for p in written if p.endswith(".svg")]
    assert {"speedup-fp32.svg", "tau-nf4.svg", "bound.svg", "ablation-gamma.svg"} <= {p.split("/")[-1] for p in svgs}
    for p in svgs:
        xml.dom.minidom.parse(p)  # well-formed


def test_results_file_errors(tmp_path):
    assert load_results(str(tmp_path / "none.json")) is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecstreamError, match="cannot read"):
        load_results(str(bad))
    bad.write_text(json.dumps({"x": 1}))
    with pytest.raises(SpecstreamError, match="not a benchmark result"):
        load_results(str(bad))


def test_lab_panel(results, tmp_path, monkeypatch):
    from app import bench_view
    from app.ui import build_demo

    monkeypatch.setenv("SPECSTREAM_BENCH_JSON", str(tmp_path / "missing.json"))
    data, text = bench_view.latest()
    assert data is None and "No benchmark results yet" in text and "specstream_core bench " in text
    assert "--json docs/bench/peers-int4-a8.json" in text
    assert bench_view.figures(None) == []
    path = tmp_path / "latest.json"
    path.write_text(json.dumps(results))
    monkeypatch.setenv("SPECSTREAM_BENCH_JSON", str(path))
    data, text = bench_view.latest()
    assert "| ss-lossless | fp32 | 1.40× | 2.00 | 0.70 | 4/4 | 10 |" in text
    figs = bench_view.figures(data, "nf4")
    assert len(figs) == 4 and "nf4" in figs[0].layout.title.text
    demo = build_demo({})
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"bench-panel", "bench-summary", "bench-precision", "bench-reload", "bench-plot-0", "bench-pass-cost",
            "bench-draft-tau"} <= ids


def test_lab_pass_cost_panel(tmp_path, monkeypatch):
    from app import bench_view

    monkeypatch.setenv("SPECSTREAM_PASS_COST_JSON", str(tmp_path / "missing.json"))
    fig, text = bench_view.pass_cost()
    assert fig is None and "No pass-cost measurement yet" in text and "pass-cost" in text
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"runs": [{"label": "x"}]}))
    monkeypatch.setenv("SPECSTREAM_PASS_COST_JSON", str(bad))
    fig, text = bench_view.pass_cost()
    assert fig is None and "is not a pass-cost result" in text
    passes = [{"label": "plain", "kind": "plain", "nodes": 1, "ratio": 1.0},
              {"label": "verify 5", "kind": "verify", "nodes": 5, "ratio": 1.4},
              {"label": "ss γ=1", "kind": "ss", "nodes": 2, "ratio": 1.5},
              {"label": "ss γ=4", "kind": "ss", "nodes": 5, "ratio": 2.0}]
    good = tmp_path / "pc.json"
    good.write_text(json.dumps({"runs": [{"label": "fp32 · streams", "settings": {}, "passes": passes}]}))
    monkeypatch.setenv("SPECSTREAM_PASS_COST_JSON", str(good))
    fig, text = bench_view.pass_cost()
    assert "| fp32 · streams | 2.00× | 4.00 | 1.40× |" in text  # the deepest ss pass, τ for 2× = 2 × its cost
    assert list(fig.data[0].x) == ["plain", "verify 5", "ss γ=1", "ss γ=4"] and list(fig.data[0].y) == [1.0, 1.4, 1.5, 2.0]


def test_lab_draft_tau_panel(tmp_path, monkeypatch):
    """The Benchmarks panel's draft τ figure: the bundled run, a clear line for a bad file, the command when none."""
    from app import bench_view

    fig, text = bench_view.draft_tau()  # the bundled docs/bench/draft-tau.json
    data = json.load(open(bench_view.DRAFT_TAU_PATH))
    best = max(data["drafts"], key=lambda d: data["mean_tau"][d])
    assert f"`{best}`" in text and f"{data['mean_tau'][best]:.2f}" in text and "draft-tau" in text
    mean = fig.data[-1]
    assert list(mean.y) == [data["mean_tau"][d] for d in mean.customdata]
    assert sorted(mean.customdata) == sorted(data["drafts"]) and list(mean.x) == sorted(mean.x)
    monkeypatch.setenv("SPECSTREAM_DRAFT_TAU_JSON", str(tmp_path / "missing.json"))
    fig, text = bench_view.draft_tau()
    assert fig is None and "No draft τ measurement yet" in text and "draft-tau" in text
    bad = tmp_path / "bad.json"
    for payload in ({"drafts": ["a"], "tau": {}, "mean_tau": {}, "nodes_per_step": {}}, [1, 2], {"drafts": []}):
        bad.write_text(json.dumps(payload))
        monkeypatch.setenv("SPECSTREAM_DRAFT_TAU_JSON", str(bad))
        fig, text = bench_view.draft_tau()
        assert fig is None and "is not a draft-tau result" in text, payload
    bad.write_text("{not json")
    fig, text = bench_view.draft_tau()
    assert fig is None and "Cannot show draft τ" in text
    good = tmp_path / "tau.json"
    good.write_text(json.dumps({"drafts": ["b8", "b3"], "tau": {"b8": {"x": 2.5, "y": 1.9}, "b3": {"x": 1.8, "y": 1.6}},
                                "mean_tau": {"b8": 2.2, "b3": 1.7}, "nodes_per_step": {"b8": 7.7, "b3": 3.0},
                                "stream_top1": {"1": 0.4}}))
    monkeypatch.setenv("SPECSTREAM_DRAFT_TAU_JSON", str(good))
    fig, text = bench_view.draft_tau()
    assert "2.20 with `b8` at 7.70 nodes" in text and "40 %" in text
    assert list(fig.data[-1].x) == [3.0, 7.7] and list(fig.data[-1].y) == [1.7, 2.2]  # sorted by nodes a step
    assert [t.name for t in fig.data[:2]] == ["x", "y"] and list(fig.data[0].y) == [1.8, 2.5]

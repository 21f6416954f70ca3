"""The benchmark harness: rows per category and method, alternation, identical flags."""

from specstream_core import DecodeConfig, Engine
from specstream_core.bench.runner import engine_method, hf_method, markdown_table, run_benchmark, summarize
from specstream_core.decoding.drafters import PromptLookupDrafter
from helpers import perturbed_streams
from tiny_models import prompts, tiny_model


def test_benchmark_rows():
    model = tiny_model("llama", seed=3)
    model.generation_config.eos_token_id = 2
    streams = perturbed_streams(model)
    engine = Engine(model, None, streams)
    engine.eos_ids = {2}
    ss = DecodeConfig(mode="ss", max_new_tokens=12)
    methods = [engine_method("ar", engine, DecodeConfig(mode="ar", max_new_tokens=12)),
               hf_method("hf-greedy", model, 12),
               engine_method("pld", engine, ss, lambda: PromptLookupDrafter()),
               engine_method("ss-lossless", engine, ss, extra_params=streams.extra_parameter_count())]
    data = {"a": prompts(3, seed=1), "b": prompts(2, seed=2)}
    rows = run_benchmark(data, methods, baseline="hf-greedy", progress=False)
    assert [(r.category, r.method) for r in rows] == [(c, m.name) for c in data for m in methods]
    for r in rows:
        assert r.identical, r  # every method reproduces plain greedy output
        assert r.speedup > 0 and r.prompts == len(data[r.category])
    ar_row = next(r for r in rows if r.method == "ar")
    assert abs(ar_row.tau - 1.0) < 1e-9 and abs(ar_row.call_reduction - 1.0) < 1e-9
    assert "ss-lossless" in markdown_table(rows, "hf-greedy")
    assert summarize(rows)["ss-lossless"]["identical"]
    streams.detach()


def test_bench_command_quick_on_a_tiny_model(tmp_path):
    """The CLI end to end on a tiny model saved to disk: every method (draft model, Medusa heads, streams),
    ablations, JSON rows with the required keys, Markdown and figures."""
    import json

    from specstream_core.cli import main
    from specstream_core.model.medusa_heads import MedusaHeads
    from helpers import make_lab_model

    base = make_lab_model(str(tmp_path / "base"))
    model = tiny_model("llama", seed=9, vocab=len(__import__("transformers").AutoTokenizer.from_pretrained(base)),
                       layers=1, max_position_embeddings=1024, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model.save_pretrained(tmp_path / "draft")
    MedusaHeads.fresh(model, 4).save(str(tmp_path / "medusa"))
    out = tmp_path / "out"
    rc = main(["bench", "--base", base, "--streams", f"{base}/streams", "--draft", str(tmp_path / "draft"),
               "--medusa", str(tmp_path / "medusa"), "--quick", "--n", "1", "--max-new-tokens", "8",
               "--categories", "sql,math", "--ablations", "gamma,topk,prune", "--ablation-n", "1", "--threads", "1",
               "--json", str(out / "b.json"), "--markdown", str(out / "b.md"), "--plots", str(out),
               "--doc", str(tmp_path / "BENCH.md")])
    assert rc == 0
    data = json.loads((out / "b.json").read_text())
    methods = {r["method"] for r in data["rows"]}
    assert {"ar", "hf-greedy", "hf-pld", "hf-assisted", "pld", "medusa", "ss-lossless"} <= methods
    for r in data["rows"]:
        assert {"category", "method", "speedup", "tau", "call_reduction", "identical", "extra_params",
                "precision"} <= set(r)
        if r["method"] in ("ar", "pld", "medusa", "ss-lossless", "hf-pld"):
            assert r["identical"], r
        assert 0.0 <= r["task_score"] <= 1.0  # each method's answers scored by the chat corpus's scorers
    assert data["settings"]["suite"] == "chat" and data["settings"]["chat"]
    assert {r["ablation"] for r in data["ablations"]} == {"gamma", "topk", "prune"}
    assert next(r for r in data["rows"] if r["method"] == "medusa")["extra_params"] == 4 * (64 * 64 + 64)
    assert "medusa" in (out / "b.md").read_text()
    assert (out / "speedup-fp32.svg").is_file() and (out / "ablation-gamma.html").is_file()
    doc = (tmp_path / "BENCH.md").read_text()
    assert "<!-- bench:begin -->" in doc and "Where speculative streaming is not ahead" in doc
    assert "](out/speedup-fp32.svg)" in doc and "### Ablations" in doc


def test_beside_bf16_weights_transformers_runs_in_fp32_as_it_ships(tmp_path):
    """bench's transformers methods are the baseline: beside the kernel's bf16 or int4 weights they run on
    the fp32 model (widening bf16 weights on every call would halve their speed and flatter ours; torch's
    int4 kernel rounds activations to bf16)."""
    import pytest
    import torch

    from specstream_core.cli.commands.bench import _hf_model
    from specstream_core.kernels.linears import rowinv
    from tiny_models import save_tiny_model_dir

    if not rowinv.available():
        pytest.skip(rowinv.unavailable_reason())
    base = save_tiny_model_dir(tmp_path / "tiny")
    bf16 = Engine.load(base, precision="bf16", fresh_streams=False)
    fp32 = Engine.load(base, precision="fp32", fresh_streams=False)
    assert _hf_model(fp32, {}, base, "cpu") is None  # transformers on the engine's own model
    assert _hf_model(bf16, {"fp32": fp32}, base, "cpu") is fp32.model
    loaded = _hf_model(bf16, {}, base, "cpu")
    assert loaded.model.layers[0].mlp.down_proj.weight.dtype == torch.float32
    int4 = Engine.load(base, precision="int4", fresh_streams=False)  # torch's int4 kernel would be another model
    assert _hf_model(int4, {"fp32": fp32}, base, "cpu") is fp32.model

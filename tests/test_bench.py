"""The benchmark harness: rows per category and method, alternation, identical flags."""

from specstream_core import DecodeConfig, Engine
from specstream_core.bench import engine_method, hf_method, markdown_table, run_benchmark, summarize
from specstream_core.drafters import PromptLookupDrafter
from test_lossless import perturbed_streams
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

"""The lab without a browser: figure functions (trace in, figure out) on traces the real engine records
on a tiny model saved to disk, the race (interleaved AR vs SS), replay from a trace, and bad input."""

import copy
import re
import json
from dataclasses import replace

import pytest

from specstream_core import DecodeConfig, SpecstreamError
from specstream_core.decoding.trace import load_trace
from helpers import LAB_PROMPT as PROMPT, lab_models_env


def test_the_race_times_speculative_decoding_without_attention_capture(engine_and_lock, monkeypatch):
    """Capturing attention hooks the layers (their slow path): the timed speculative run goes without it, and
    an untimed rerun of the same decoding fills in the maps, step for step."""
    from app.race import race

    engine, lock = engine_and_lock
    layers = tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))
    starts, start = [], engine.start
    monkeypatch.setattr(engine, "start", lambda prompt, cfg: starts.append(cfg) or start(prompt, cfg))
    final = list(race(engine, PROMPT, DecodeConfig(max_new_tokens=12, tree_topk=(2, 1)), lock, min_interval=0.0,
                      attention_layers=layers))[-1]
    assert [(c.mode, tuple(c.attention_layers)) for c in starts] == [("ar", ()), ("ss", ()), ("ss", layers)]
    steps = final.trace["steps"]
    assert all(step["attention"] for step in steps[1:])
    assert len(final.ss.pieces) == len(final.trace["output"]["token_ids"])


@pytest.fixture(scope="module")
def pruned_trace(engine_and_lock):
    engine, _ = engine_and_lock
    layers = (engine.streams.cfg.num_layers - 1,)
    cfg = DecodeConfig(max_new_tokens=24, tree_topk=(4, 3, 2), prune_threshold=0.2, trace=True,
                       attention_layers=layers, attention_heads=(0, 2))
    return engine.generate(PROMPT, cfg).trace


# ---- the race ---------------------------------------------------------------------------------
def test_race_interleaves_and_outputs_match(race_view, engine_and_lock):
    from app.race import outputs_equal, speedup
    from app.render import render_badge, render_speedup

    engine, _ = engine_and_lock
    final = race_view[-1]
    assert final.finished and not any(v.finished for v in race_view[:-1])
    assert len(race_view) > 3  # streamed: a view per pair of passes (min_interval=0)
    # interleaved: while streaming, neither side ever got more than one pass ahead
    for v in race_view[:-1]:
        if not v.ss.done and not v.ar.done:
            assert abs(v.ar.stats["forward_passes"] - v.ss.stats["forward_passes"]) <= 1
    assert final.ar.text and final.ar.text == final.ss.text
    ref = engine.generate(PROMPT, DecodeConfig(mode="ar", max_new_tokens=40))
    assert final.ar.text == ref.text  # pieces concatenate to exactly the tokenizer's text
    assert outputs_equal(final) and 'data-equal="true"' in render_badge(final)
    assert speedup(final) > 0 and "×" in render_speedup(final)
    assert final.ss.stats["forward_passes"] < final.ar.stats["forward_passes"]  # fresh streams do get accepted
    # tinting: every piece is tagged with the pass that produced it; a pass's last token is its bonus
    steps = [p.step for p in final.ss.pieces]
    assert steps == sorted(steps) and any(p.drafts > 0 for p in final.ss.pieces)


def test_rendered_text_is_escaped_and_tinted(race_view):
    from app.race import Piece, SideView
    from app.render import render_text

    html_out = render_text(race_view[-1].ss, True)
    assert html_out.count('class="tok') == len(race_view[-1].ss.pieces) and "data-step" in html_out
    evil = SideView([Piece("<script>alert(1)</script>", 1, True, 2)])
    assert "<script>" not in render_text(evil, True) and "<script>" not in render_text(evil, False)


def test_sampling_badge_explains_difference():
    from app.race import Piece, RaceView, SideView
    from app.render import render_badge

    view = RaceView(SideView([Piece("a", 0)], {"wall_s": 1, "new_tokens": 1}, True),
                    SideView([Piece("b", 0)], {"wall_s": 1, "new_tokens": 1}, True), sampling=True, finished=True)
    assert "expected in sampling mode" in render_badge(view)
    view.sampling, view.exact = False, True  # greedy at an exact precision (tests/test_devices.py: the others)
    assert "should not happen" in render_badge(view)


def test_race_trace_carries_baseline_and_round_trips(trace, race_view, tmp_path):
    from app.race import view_from_trace

    assert trace["meta"]["baseline"]["output"]["text"] == race_view[-1].ar.text
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    loaded = load_trace(str(path))
    replay = view_from_trace(loaded)
    assert replay.replay and replay.finished
    assert replay.ss.text == race_view[-1].ss.text and replay.ar.text == race_view[-1].ar.text
    assert [p.step for p in replay.ss.pieces] == [p.step for p in race_view[-1].ss.pieces]


# ---- figures ------------------------------------------------------------------------------------
def test_tree_figure_marks_statuses_and_bonus(trace):
    from app.figures import tree_figure
    from app.explain import most_telling_step

    index = most_telling_step(trace)
    step = trace["steps"][index]
    assert len(step["accepted"]) >= 2
    fig = tree_figure(trace, index)
    names = {t.name for t in fig.data if t.name}
    assert {"accepted", "bonus token"} <= names
    accepted_trace = next(t for t in fig.data if t.name == "accepted")
    assert len(accepted_trace.x) == len(step["accepted"])
    assert list(accepted_trace.x) == sorted(step["nodes"][a]["depth"] for a in step["accepted"])
    marker_points = sum(len(t.x) for t in fig.data if t.mode == "markers+text")
    assert marker_points == len(step["nodes"]) + 1  # every node plus the bonus star
    hover = " ".join(h for t in fig.data if t.hovertext is not None for h in t.hovertext)
    assert "p = " in hover or len(step["nodes"]) == 1
    json.loads(fig.to_json())  # serialisable for the browser


def test_tree_figure_shows_pruned_nodes(pruned_trace):
    from app.figures import tree_figure

    index = next((i for i, s in enumerate(pruned_trace["steps"]) if any(n["pruned"] for n in s["nodes"])), None)
    assert index is not None, "threshold 0.2 should prune something on random streams"
    fig = tree_figure(pruned_trace, index)
    pruned = next(t for t in fig.data if t.name == "pruned")
    assert len(pruned.x) == sum(n["pruned"] for n in pruned_trace["steps"][index]["nodes"])


def test_tree_layout_centres_parents():
    from app.figures import tree_layout

    ys = tree_layout([-1, 0, 0, 1, 1, 2])
    assert ys[3] == 0 and ys[4] == 1 and ys[1] == 0.5 and ys[5] == 2 and ys[2] == 2 and ys[0] == 1.25


def test_acceptance_figure_numbers(trace):
    from app.figures import acceptance_figure, acceptance_stats

    st = acceptance_stats(trace)
    assert st["passes"] == len(trace["steps"]) == trace["stats"]["forward_passes"]
    assert st["tokens"] == trace["stats"]["new_tokens"]
    assert st["tau"][-1] == pytest.approx(trace["stats"]["mean_accepted"])
    assert len(st["depth_rate"]) == 3 and all(0 <= r <= 1 for r in st["depth_rate"])
    assert st["depth_rate"] == sorted(st["depth_rate"], reverse=True)  # depth j needs depth j-1
    assert st["depth_rate"] == pytest.approx(trace["stats"]["depth_acceptance"])
    fig = acceptance_figure(trace)
    assert len(fig.data) == 6 and sum(fig.data[0].y) == len(trace["steps"]) - 1
    json.loads(fig.to_json())


def test_time_chart_leaves_the_prefill_out(trace, engine_and_lock):
    """Pass 0 of a speculative run is the prefill (the whole prompt in one pass): drawn with the rest it
    squashes their scale, so the time chart starts at pass 1 and names pass 0's time in its title."""
    from app.figures import TIME_COLOURS, acceptance_figure, acceptance_stats

    fig = acceptance_figure(trace)
    bars = [t for t in fig.data if t.name in TIME_COLOURS]
    assert len(bars) == 3 and all(list(t.x) == list(range(1, len(trace["steps"]))) for t in bars)
    prefill = sum(acceptance_stats(trace)["times"][k][0] for k in TIME_COLOURS)
    titles = [a.text for a in fig.layout.annotations]
    assert any(f"pass 0, the prefill ({prefill:.1f} ms), left out" in t for t in titles), titles
    engine, _ = engine_and_lock  # a plain trace has no prefill apart: every pass is drawn
    plain = engine.generate(PROMPT, DecodeConfig(mode="ar", max_new_tokens=6, trace=True)).trace
    bars = [t for t in acceptance_figure(plain).data if t.name in TIME_COLOURS]
    assert all(list(t.x) == list(range(len(plain["steps"]))) for t in bars)


def test_stream_mode_is_offered_only_when_there_is_a_choice(lab_dir, tmp_path):
    """One stream mode: the radio is hidden (nothing to choose) and its help names only that mode."""
    from app.models import parse_specs
    from app.render import mode_help
    from app.ui import build_demo
    from helpers import component

    assert "shared" not in mode_help(["lossless"]) and "lossless" in mode_help(["lossless"])
    assert "shared" in mode_help(["lossless", "shared"])
    radio = component(build_demo(parse_specs(lab_models_env(lab_dir))), "mode")
    assert radio.visible is False and radio.choices == [("lossless", "lossless")]
    assert "shared" not in (radio.info or "")


def test_a_custom_prompt_clears_the_preset(lab_dir):
    from app.models import parse_specs
    from app.ui import build_demo
    from helpers import component, handler

    demo = build_demo(parse_specs(lab_models_env(lab_dir)))
    on_prompt, preset = handler(demo, "on_prompt"), component(demo, "preset")
    label, text = next(iter(demo_presets().items()))
    assert on_prompt(text + " and more")[preset]["value"] is None
    assert on_prompt(text)[preset]["value"] == label  # typed back to the preset's text: named again


def demo_presets() -> dict:
    from app.presets import presets

    return presets()


def test_attention_figure_rows_are_streams(trace):
    from app.figures import attention_choices, attention_figure, attention_matrix

    index = 3
    layers, heads = attention_choices(trace, index)
    assert layers == ["2", "3"] and heads[0] == "mean" and len(heads) == 5
    z, columns, context_len = attention_matrix(trace, index, "3", "mean")
    assert len(z) == 3 and len(z[0]) == len(columns) == context_len + 3
    for row in z:  # softmax rows over the visible keys (the kept columns are a subset)
        assert 0 < sum(row) <= 1.0001
    for j, row in enumerate(z):  # stream j never sees sibling streams after it
        assert all(w == 0 for w in row[context_len + j + 1:])
    z0, _, _ = attention_matrix(trace, index, "2", "0")
    assert z0 == trace["steps"][index]["attention"]["layers"]["2"][0]
    fig = attention_figure(trace, index, "2", "1")
    assert fig.data[0].type == "heatmap" and list(fig.data[0].y) == ["s1", "s2", "s3"]


def test_attention_figure_selected_heads(pruned_trace):
    from app.figures import attention_choices, attention_figure

    layers, heads = attention_choices(pruned_trace, 2)
    assert layers == ["3"] and heads == ["mean", "0", "2"]
    assert attention_figure(pruned_trace, 2, "3", "2").data[0].z is not None
    with pytest.raises(SpecstreamError, match="head 1 was not recorded"):
        attention_figure(pruned_trace, 2, "3", "1")
    with pytest.raises(SpecstreamError, match="layer 2 was not recorded"):
        attention_figure(pruned_trace, 2, "2", "mean")


def test_mask_follows_msa_rules(trace):
    from app.figures import mask_figure, step_mask

    index = 2
    step = trace["steps"][index]
    mask, rows, columns = step_mask(trace, index)
    n = len(step["nodes"])
    gamma = trace["meta"]["gamma"]
    assert len(rows) == n * (1 + gamma) and len(columns) == len(rows) + 1
    assert all(r[0] == 1 for r in mask)  # prefix visible to all
    for i, node in enumerate(step["nodes"]):
        assert all(mask[i][1 + n + k] == 0 for k in range(n * gamma))  # main rows never see streams
        assert mask[i][1 + i] == 1
        if node["parent"] >= 0:
            assert mask[i][1 + node["parent"]] == 1
        assert sum(mask[i][1:1 + n]) == node["depth"] + 1  # itself + ancestors
    for c in range(n):
        for j in range(gamma):
            r = n + c * gamma + j
            assert mask[r][1:1 + n] == mask[c][1:1 + n]  # a stream sees what its carrier sees
            siblings = mask[r][1 + n + c * gamma: 1 + n + (c + 1) * gamma]
            assert siblings == [1] * (j + 1) + [0] * (gamma - j - 1)
            assert sum(mask[r][1 + n:]) == j + 1  # no other carrier's streams
    fig = mask_figure(trace, index, max_nodes=None)
    assert fig.data[0].type == "heatmap" and len(fig.data[0].z) == len(rows)
    small, small_rows, _ = step_mask(trace, index, max_nodes=4)  # a legible corner: still a valid tree
    assert len(small_rows) == 4 * (1 + gamma) and all(small[i][1:5] == mask[i][1:5] for i in range(4))
    assert "first 4 of" in mask_figure(trace, index, max_nodes=4).layout.title.text


def test_mask_skips_pruned_nodes(pruned_trace):
    from app.figures import step_mask

    for i, step in enumerate(pruned_trace["steps"]):
        survivors = sum(not n["pruned"] for n in step["nodes"])
        mask, rows, _ = step_mask(pruned_trace, i)
        assert len(rows) == survivors * (1 + pruned_trace["meta"]["gamma"]) or (i == 0 and len(rows) == 1 + 3)


def test_plain_trace_figures(engine_and_lock):
    from app.figures import acceptance_figure, attention_figure, mask_figure, tree_figure
    from app.explain import explain_step
    from app.race import view_from_trace

    engine, _ = engine_and_lock
    tr = engine.generate(PROMPT, DecodeConfig(mode="ar", max_new_tokens=6, trace=True)).trace
    assert len(tree_figure(tr, 2).data) >= 2
    assert acceptance_figure(tr).data
    assert "plain decoding" in attention_figure(tr, 1).layout.annotations[0].text
    assert len(mask_figure(tr, 1).data[0].z) == 1
    assert "plain autoregressive" in explain_step(tr, 1)
    view = view_from_trace(tr)
    assert view.ar.text and not view.ss.pieces


def test_explain_uses_the_real_step(trace):
    from app.explain import explain_step, most_telling_step

    index = most_telling_step(trace)
    text = explain_step(trace, index)
    step = trace["steps"][index]
    assert f"Pass {index}" in text and f"{len(step['accepted'])} token(s)" in text
    assert "bonus" in text and f"γ = {trace['meta']['gamma']}" in text
    assert "prefill" in explain_step(trace, 0)


# ---- malformed input ----------------------------------------------------------------------------
@pytest.mark.parametrize("mutate,needle", [
    (lambda t: t.update(schema="nope"), "schema"),
    (lambda t: t.update(version=99), "version 99"),
    (lambda t: t.update(steps="x"), "steps"),
    (lambda t: t["steps"][1]["nodes"][1].update(parent=5), "invalid parent"),
    (lambda t: t["steps"][1].update(accepted=[999]), "out of range"),
    (lambda t: t["steps"][1].pop("time_ms"), "time_ms"),
])
def test_figures_reject_malformed_traces(trace, mutate, needle):
    from app.figures import acceptance_figure, mask_figure, tree_figure

    bad = copy.deepcopy(trace)
    mutate(bad)
    for fn in (lambda: tree_figure(bad, 1), lambda: acceptance_figure(bad), lambda: mask_figure(bad, 1)):
        with pytest.raises(SpecstreamError, match=needle):
            fn()


def test_figures_reject_bad_indices_and_empty(trace):
    from app.figures import attention_figure, tree_figure

    with pytest.raises(SpecstreamError, match="out of range"):
        tree_figure(trace, len(trace["steps"]))
    with pytest.raises(SpecstreamError, match="integer"):
        tree_figure(trace, "2")
    with pytest.raises(SpecstreamError, match="not a valid specstream trace"):
        tree_figure(None, 0)
    empty = copy.deepcopy(trace)
    empty["steps"] = []
    with pytest.raises(SpecstreamError, match="no steps"):
        tree_figure(empty, 0)
    broken = copy.deepcopy(trace)
    broken["steps"][2]["attention"]["columns"] = ["x"]
    with pytest.raises(SpecstreamError, match="column labels"):
        attention_figure(broken, 2)
    no_att = copy.deepcopy(trace)
    no_att["steps"][2]["attention"] = None
    assert "no stream attention" in attention_figure(no_att, 2).layout.annotations[0].text


def test_upload_errors_are_clear(tmp_path, trace):
    from specstream_core.decoding.trace import MAX_TRACE_BYTES

    cases = {"garbage.json": b"{not json", "list.json": b"[1, 2]",
             "v2.json": json.dumps({**trace, "version": 2}).encode()}
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
    with pytest.raises(SpecstreamError, match="invalid JSON"):
        load_trace(str(tmp_path / "garbage.json"))
    with pytest.raises(SpecstreamError, match="schema"):
        load_trace(str(tmp_path / "list.json"))
    with pytest.raises(SpecstreamError, match="version 2"):
        load_trace(str(tmp_path / "v2.json"))
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_TRACE_BYTES + 1)
    with pytest.raises(SpecstreamError, match="limit"):
        load_trace(str(big))


# ---- models and settings -------------------------------------------------------------------------
def test_model_allow_list(lab_dir, tmp_path):
    from app.models import available_specs, parse_specs

    specs = parse_specs(lab_models_env(lab_dir))
    assert specs["tiny"].modes == ["lossless"] and specs["tiny"].streams["lossless"].endswith("streams")
    cfg_file = tmp_path / "models.json"
    cfg_file.write_text(lab_models_env(lab_dir))
    assert parse_specs(str(cfg_file)).keys() == {"tiny"}
    assert parse_specs(json.dumps({"x": {"base": "org/model"}}))["x"].modes == ["lossless"]
    for bad, needle in (("{oops", "not valid JSON"), ("/no/such/file.json", "neither JSON")):
        with pytest.raises(SpecstreamError, match=needle):
            parse_specs(bad)
    assert "tiny" in available_specs({"SPECSTREAM_MODELS": lab_models_env(lab_dir)})
    assert "x" not in available_specs({"SPECSTREAM_MODELS": "{oops"})  # logged, not fatal


def test_the_bundled_model_comes_with_an_fp32_twin(monkeypatch):
    """The default model at its default precision first, then the same model and streams in fp32 (where
    the method pays on a CPU), then the allow-list."""
    from app import models

    bundled = models.ModelSpec("Bundled", "/base", {"lossless": "/streams"})
    monkeypatch.setattr(models, "bundled_spec", lambda: bundled)
    specs = models.available_specs({"SPECSTREAM_MODELS": json.dumps({"x": {"base": "org/model"}})})
    assert list(specs) == ["Bundled", "Bundled · fp32", "x"]
    twin = specs["Bundled · fp32"]
    assert (twin.base, twin.streams, twin.precision) == ("/base", {"lossless": "/streams"}, "fp32")
    assert specs["Bundled"].precision == bundled.precision


@pytest.mark.parametrize("entry,needle", [
    ({"streams": "/a"}, "needs a 'base'"),
    ({"base": "b", "streams": {"fast": "/a"}}, "streams must be"),
    ({"base": "b", "gamma": "four"}, "gamma must be an integer"),
    ({"base": "b", "streams": "/no/such/streams"}, "not found"),
])
def test_one_bad_allow_list_entry_drops_only_itself(lab_dir, caplog, entry, needle):
    """A non-numeric gamma used to stop the app at start (ValueError), a missing streams folder used to
    drop the whole allow-list; now only the bad entry goes, with a logged warning."""
    from app.models import available_specs

    good = json.loads(lab_models_env(lab_dir))
    with caplog.at_level("WARNING", logger="specstream.lab"):
        specs = available_specs({"SPECSTREAM_MODELS": json.dumps({**good, "bad": entry})})
    assert "tiny" in specs and "bad" not in specs
    assert any(needle in r.getMessage() and "'bad'" in r.getMessage() for r in caplog.records), caplog.text


def test_engine_cache_refuses_unknown_models(lab_dir):
    from app.models import EngineCache, parse_specs

    cache = EngineCache(parse_specs(lab_models_env(lab_dir)))
    with pytest.raises(SpecstreamError, match="unknown model"):
        cache.get("/etc/passwd", "lossless")
    with pytest.raises(SpecstreamError, match="no shared streams"):
        cache.get("tiny", "shared")


def test_settings_validation():
    from app.limits import MAX_PROMPT_CHARS, check_prompt, lab_decode_config as build_config

    cfg = build_config("3, 2,1", 0.1, 32, 2, 0.0, 7, 16)
    assert cfg.tree_topk == (3, 2, 1) and cfg.seed == 7 and cfg.trace and cfg.lookup == 2
    for args, needle in (((("4,x"), 0, 8, 0, 0, 0, 8), "topk"), (("4", 0, 8, 0, 0, 0, 0), "max new tokens"),
                         (("4", 1.5, 8, 0, 0, 0, 8), "prune threshold"), (("4", 0, 8, 0, -1, 0, 8), "temperature"),
                         (("4", 0, 8, float("nan"), 0, 0, 8), "prompt-lookup"), (("4", 0, 8, 2.5, 0, 0, 8), "prompt-lookup"),
                         (("4", 0, 8, 1e9, 0, 0, 8), "prompt-lookup"), (("4", 0, 8, "x", 0, 0, 8), "prompt-lookup")):
        with pytest.raises(SpecstreamError, match=needle):
            build_config(*args)
    with pytest.raises(SpecstreamError, match="empty"):
        check_prompt("  ")
    with pytest.raises(SpecstreamError, match="limit"):
        check_prompt("a" * (MAX_PROMPT_CHARS + 1))


def test_presets_come_from_the_chat_corpus_eval_split():
    from app.presets import presets, slug
    from specstream_core.tasks.corpus import CATEGORIES, load_corpus

    p = presets()
    cats = [label.split(" · ")[0] for label in p]
    assert cats == list(CATEGORIES)  # one per category, in order
    eval_prompts = {r["prompt"] for r in load_corpus("eval")}
    assert all(text in eval_prompts and not text.startswith("### Task:") for text in p.values())
    assert len({slug(label) for label in p}) == len(p)  # each preset has its own trace file name


def test_demo_builds_with_stable_ids(lab_dir):
    from app.models import parse_specs
    from app.ui import build_demo

    demo = build_demo(parse_specs(lab_models_env(lab_dir)))
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"prompt", "run", "ar-output", "ss-output", "speedup", "equal-badge", "tree-plot", "accept-plot",
            "attn-plot", "trace-download", "trace-upload", "result", "settings"} <= ids
    build_demo({})  # no model at all: replay-only lab still builds


def test_sampling_race_runs_and_explains(engine_and_lock):
    from app.figures import acceptance_figure, tree_figure
    from app.race import race
    from app.render import render_badge

    engine, lock = engine_and_lock
    cfg = DecodeConfig(max_new_tokens=16, temperature=0.9, top_k=20, seed=3, tree_topk=(2, 2), prune_threshold=0.05)
    final = list(race(engine, PROMPT, cfg, lock, attention_layers=(3,)))[-1]
    assert final.sampling and final.ss.text and final.ar.text
    badge = render_badge(final)
    # the badge must tell the truth about these two texts (it used to be accepted either way)
    if final.ar.text == final.ss.text:
        assert 'data-equal="true"' in badge and "sampling, yet the same text" in badge
    else:
        assert 'data-equal="false"' in badge and "expected in sampling mode" in badge
    # sampling is seeded: the same settings give the same texts again, and the badge the same verdict
    again = list(race(engine, PROMPT, cfg, lock, attention_layers=(3,)))[-1]
    assert (again.ar.text, again.ss.text) == (final.ar.text, final.ss.text) and render_badge(again) == badge
    # and the baseline really sampled: with another seed the plain run's text changes
    other = engine.generate(PROMPT, replace(cfg, mode="ar", seed=4, trace=False))
    assert other.text != final.ar.text
    assert acceptance_figure(final.trace).data and tree_figure(final.trace, len(final.trace["steps"]) - 1).data


def test_pass_buttons_step_a_replayed_trace_within_its_passes(trace, replay_demo):
    """The presenter view's ← and → (the previous / next pass buttons) on a trace with no model loaded: one pass
    each way, never past the first or the last."""
    from specstream_core.decoding.trace import validate
    from helpers import component, handler

    blob, last = validate(trace).pack(), len(trace["steps"]) - 1
    on_prev, on_next = handler(replay_demo, "on_prev"), handler(replay_demo, "on_next")
    step, tree = component(replay_demo, "step-slider"), component(replay_demo, "tree-plot")
    moved = on_next(blob, 1, None, None)
    assert moved[step]["value"] == 2 and "pass 2<" in moved[tree].layout.title.text
    assert on_prev(blob, 1, None, None)[step]["value"] == 0
    assert on_prev(blob, 0, None, None)[step]["value"] == 0
    assert on_next(blob, last, None, None)[step]["value"] == last
    assert on_next(None, 1, None, None) == {}


def test_the_selected_pass_is_marked_on_the_tau_chart(trace):
    """acceptance_figure(trace, selected): a vertical line and a marker at that pass on τ; none by default."""
    from app.figures import acceptance_figure, acceptance_stats

    tau = acceptance_stats(trace)["tau"]
    plain = acceptance_figure(trace)
    assert not [t for t in plain.data if t.name == "selected pass"] and not plain.layout.shapes[1:]
    fig = acceptance_figure(trace, selected=2)
    marks = [t for t in fig.data if t.name == "selected pass"]
    assert len(marks) == 1 and list(marks[0].x) == [2] and marks[0].y[0] == pytest.approx(tau[2])
    assert marks[0].xaxis == "x3"  # the τ chart (row 2, column 1)
    lines = [s for s in fig.layout.shapes if s.x0 == s.x1 == 2]
    assert len(lines) == 1 and lines[0].xref == "x3"
    for outside in (-1, len(trace["steps"])):  # nothing to mark
        assert len(acceptance_figure(trace, selected=outside).data) == len(plain.data)
    json.loads(fig.to_json())


def test_the_selected_pass_is_outlined_in_the_text(race_view):
    """render_text(..., selected=i): exactly the tokens of pass i carry `sel-pass`; the others stay as they are."""
    from app.render import render_text

    ss = race_view[-1].ss
    chosen = ss.pieces[len(ss.pieces) // 2].step
    plain, marked = render_text(ss, True), render_text(ss, True, selected=chosen)
    assert "sel-pass" not in plain
    spans = re.findall(r'<span class="([^"]*)"[^>]*data-step="(\d+)"', marked)
    assert len(spans) == len(ss.pieces)
    assert [int(step) for cls, step in spans if "sel-pass" in cls.split()] == \
        [p.step for p in ss.pieces if p.step == chosen] != []
    assert marked.replace(" sel-pass", "") == plain
    assert "sel-pass" not in render_text(ss, False, selected=chosen)


def test_pass_selection_updates_the_text_and_the_tau_chart(trace, replay_demo):
    """The slider and the previous / next buttons re-render the speculative text and the acceptance chart with
    the selected pass marked."""
    from specstream_core.decoding.trace import validate
    from helpers import component, handler

    blob = validate(trace).pack()
    ss_out, accept = component(replay_demo, "ss-output"), component(replay_demo, "accept-plot")
    for out, index in ((handler(replay_demo, "on_step")(blob, 3, None, None), 3),
                       (handler(replay_demo, "on_next")(blob, 1, None, None), 2),
                       (handler(replay_demo, "on_prev")(blob, 1, None, None), 0)):
        assert set(re.findall(r'class="tok[^"]*sel-pass"[^>]*data-step="(\d+)"', out[ss_out])) == {str(index)}
        assert [list(t.x) for t in out[accept].data if t.name == "selected pass"] == [[index]]

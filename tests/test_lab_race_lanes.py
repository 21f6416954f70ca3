"""The lab's multi-lane race on the tiny lab model: every lane (plain decoding; speculative streaming at the fastest
and at the teaching draft; prompt lookup; Medusa heads; assisted generation with a layer draft) decodes the same
tokens as plain decoding, the lanes take turns pass by pass, a lane without its assets is left out with its reason,
the teaching draft has stream attention on every pass, the tree and τ views arrive while the race runs, and a
race's lanes count against its address's budget."""

import functools
import json
import os

import pytest
import torch

from helpers import LAB_PROMPT as PROMPT, handler
from specstream_core import DecodeConfig

ALL = ["fast", "teaching", "lookup", "medusa", "assisted"]


@pytest.fixture(scope="module")
def lane_dir(lab_dir):
    """The tiny lab model with Medusa heads (random, so their drafts vary) and a one-layer layer draft."""
    from transformers import AutoModelForCausalLM

    from specstream_core.model import layer_draft
    from specstream_core.model.medusa_heads import MedusaHeads

    model = AutoModelForCausalLM.from_pretrained(lab_dir)
    heads = MedusaHeads.fresh(model, 3)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    heads.save(os.path.join(lab_dir, "medusa"))
    layer_draft.save_config(os.path.join(lab_dir, "draft"), 1, 4, list(range(model.config.vocab_size)))
    return lab_dir


def _specs(lane_dir, extras=True) -> dict:
    from app.models import parse_specs

    entry = {"base": lane_dir, "streams": os.path.join(lane_dir, "streams"), "precision": "fp32"}
    if extras:
        entry.update(medusa=os.path.join(lane_dir, "medusa"), draft=os.path.join(lane_dir, "draft"))
    return parse_specs(json.dumps({"tiny": entry}))


@pytest.fixture(scope="module")
def lanes_engine(lane_dir):
    from app.models import EngineCache

    return EngineCache(_specs(lane_dir)).get("tiny", "lossless")


def _layers(engine) -> tuple[int, ...]:
    return tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))


@pytest.fixture(scope="module")
def five_lanes(lanes_engine):
    from app.race import race

    engine, lock = lanes_engine
    return list(race(engine, PROMPT, DecodeConfig(max_new_tokens=40, tree_topk=(2, 1)), lock, min_interval=0.0,
                     attention_layers=_layers(engine), lanes=ALL))


def test_every_lane_decodes_plain_decodings_tokens(five_lanes):
    from app.lane_render import render_lane_badge, render_lane_table
    from app.race import view_from_trace

    final = five_lanes[-1]
    assert list(final.lanes) == ["plain", *ALL] and not final.skipped
    plain = final.ar.token_ids
    assert len(plain) == 40
    for key, lane in final.lanes.items():
        assert lane.token_ids == plain and lane.identical, key
        assert lane.stats["forward_passes"] > 0 and lane.stats["tokens_per_s"] > 0, key
    assert final.lanes["fast"].stats["forward_passes"] < len(plain)  # the drafts were accepted somewhere
    assert "transformers greedy generate at fp32" in final.plain_equals
    table, badge = render_lane_table(final), render_lane_badge(final)
    assert all(f'data-lane="{k}"' in table for k in final.lanes) and table.count("✔ identical") == 5
    assert 'data-equal="true"' in badge and "all 5 lanes identical" in badge and final.plain_equals in badge
    # every speculative lane's trace is complete and carries the whole table: a replay shows every lane
    assert set(final.traces) == set(ALL)
    again = view_from_trace(final.traces["medusa"])
    assert list(again.lanes) == ["plain", *ALL] and again.shown == "medusa"
    assert all(v.identical for v in again.lanes.values() if v is not again.ar)
    assert "all 5 lanes identical" in render_lane_badge(again)


def test_lanes_take_turns_pass_by_pass(lanes_engine, monkeypatch):
    """One pass of every running lane per round, the order rotating every round."""
    from app import race as race_mod

    engine, lock = lanes_engine
    order, step = [], race_mod.Side.step

    def logged(side, lock):
        order.append(side.decoding)
        step(side, lock)

    monkeypatch.setattr(race_mod.Side, "step", logged)
    final = list(race_mod.race(engine, PROMPT, DecodeConfig(max_new_tokens=12), lock, min_interval=0.0,
                               lanes=["fast", "lookup", "medusa"]))[-1]
    n = len(final.lanes)
    rounds = [order[i:i + n] for i in range(0, n * 3, n)]  # every lane runs at least 3 passes here
    assert all(len(set(map(id, r))) == n for r in rounds)
    assert rounds[1] == rounds[0][1:] + rounds[0][:1] and rounds[2] == rounds[1][1:] + rounds[1][:1]


def test_a_lane_without_its_assets_is_left_out_with_its_reason(lane_dir):
    from app.handlers import lane_picker
    from app.lanes import unavailable
    from app.models import EngineCache
    from app.race import race

    spec = _specs(lane_dir, extras=False)["tiny"]
    reasons = unavailable(spec)
    assert set(reasons) == {"medusa", "assisted"} and "Medusa" in reasons["medusa"]
    choices, value, note = lane_picker(spec, "lossless", ["fast", "medusa"])
    assert [k for _, k in choices] == ["fast", "teaching", "lookup"] and value == ["fast"]
    assert "no layer draft" in note and "teaching draft" in note and "4,3,2,1" not in note  # γ = 3: 3,2,1
    engine, lock = EngineCache({"tiny": spec}).get("tiny", "lossless")
    final = list(race(engine, PROMPT, DecodeConfig(max_new_tokens=8), lock, lanes=["medusa", "lookup"]))[-1]
    assert list(final.lanes) == ["plain", "lookup"] and set(final.skipped) == {"medusa"}
    assert final.shown == "lookup" and final.lanes["lookup"].identical


def test_the_teaching_draft_shows_every_stream_and_its_attention_on_every_pass(five_lanes, lanes_engine):
    from app.figures import attention_choices, attention_figure

    engine, _ = lanes_engine
    trace = five_lanes[-1].traces["teaching"]
    gamma = engine.streams.cfg.gamma
    assert trace["meta"]["topk"] == list(range(gamma, 0, -1)) and trace["meta"]["lookup"] == 0
    steps = trace["steps"]
    assert len(steps) > 3
    for i, step in enumerate(steps):
        layers, heads = attention_choices(trace, i)
        assert layers == [str(li) for li in _layers(engine)] and "mean" in heads, i
        assert "no stream attention" not in attention_figure(trace, i).to_json(), i
        if i:  # every stream proposes in every pass: nodes at every depth
            assert {n["depth"] for n in step["nodes"]} == set(range(gamma + 1)), i
    fast = five_lanes[-1].traces["fast"]  # the fastest draft's lane keeps its maps too
    assert all(s["attention"] and s["attention"]["layers"] for s in fast["steps"])


def test_the_assistant_drafter_equals_plain_decoding_and_adapts_its_chain(lanes_engine):
    from app.lanes import assets_of
    from specstream_core.decoding.drafters.assistant import AssistantDrafter

    engine, _ = lanes_engine
    draft = assets_of(engine).get("assisted", engine)
    plain = engine.generate(PROMPT, DecodeConfig(mode="ar", max_new_tokens=30)).token_ids
    drafter = AssistantDrafter(draft, num_tokens=3)
    lengths = []
    propose = drafter.propose
    drafter.propose = lambda root, history: (lengths.append(drafter.num_tokens), propose(root, history))[1]
    result = engine.generate(PROMPT, DecodeConfig(mode="ss", max_new_tokens=30), drafter)
    assert result.token_ids == plain
    assert len(set(lengths)) > 1  # the heuristic schedule moved the chain's length


def test_the_tree_and_tau_views_update_while_the_race_runs(lanes_engine, monkeypatch, tmp_path):
    from types import SimpleNamespace

    from app import handlers, limits
    from app.race import race

    engine, lock = lanes_engine
    monkeypatch.setattr(handlers, "race", functools.partial(race, min_interval=0.0))
    monkeypatch.setattr(limits, "LIVE_VIEWS_S", 0.0)
    cache = SimpleNamespace(get=lambda name, mode: (engine, lock))
    views = list(handlers.race_views(cache, "tiny", "lossless", PROMPT, "2,1", 0.0, 16, 0, 0.0, 0, 24, str(tmp_path),
                                     ["fast", "teaching"]))
    live = [v for v in views[1:-1] if "tree_plot" in v]
    assert len(live) >= 3 and all("accept_plot" in v for v in live)
    assert live[0]["tree_plot"].to_json() != live[-1]["tree_plot"].to_json()
    assert [v["step"]["value"] for v in live] == sorted(v["step"]["value"] for v in live)  # the latest pass
    final = views[-1]
    assert set(final["lane_traces"]) == {"fast", "teaching"}
    assert [k for _, k in final["view_lane"]["choices"]] == ["fast", "teaching"] and final["view_lane"]["value"] == "fast"


def test_a_race_counts_its_lanes_against_its_address(lane_dir):
    from app.admission import Admission, Busy
    from app import limits
    from specstream_core.errors import SpecstreamError

    gate = Admission(per_session=1, per_ip=3, stale_after=60, lanes_per_ip=6)
    a, b, c = ({"session": s, "ip": "1.2.3.4"} for s in "abc")
    with gate.enter(a, weight=2), gate.enter(b, weight=2):  # two two-lane races: 4 of 6 lanes
        with pytest.raises(Busy, match="lanes"):
            with gate.enter(c, weight=6):
                pass
        with gate.enter(c, weight=2):
            pass
    with gate.enter(a, weight=6):
        with pytest.raises(Busy):
            with gate.enter(b, weight=2):
                pass
    assert limits.check_lanes(None, 64) == ["plain", "fast"]
    assert limits.check_lanes(["medusa", "plain", "fast"], 64) == ["plain", "fast", "medusa"]
    with pytest.raises(SpecstreamError, match="budget"):
        limits.check_lanes(ALL, limits.LAB_MAX_NEW_TOKENS)
    for bad in (["warp"], "fast", [], ["plain"]):
        with pytest.raises(SpecstreamError):
            limits.check_lanes(bad, 8)


def test_the_page_races_the_chosen_lanes_and_switches_the_pass_views(lane_dir):
    from app.ui import build_demo
    from helpers import component

    demo = build_demo(_specs(lane_dir))
    picker = component(demo, "lanes")
    assert [k for _, k in picker.choices] == ALL and picker.value == ["fast"]
    outs = list(handler(demo, "on_run")("tiny", "lossless", PROMPT, "2,1", 0.0, 16, 0, 0.0, 0, 16, None,
                                        ["teaching", "lookup"]))
    final = {getattr(k, "elem_id", None): v for k, v in outs[-1].items()}
    assert 'data-equal="true"' in final["equal-badge"] and "all 2 lanes identical" in final["equal-badge"]
    assert 'data-lane="lookup"' in final["lane-outputs"]  # the lane the views do not follow, tinted by pass
    assert final["ss-heading"].endswith("teaching draft")
    switched = handler(demo, "on_view_lane")(_state(outs[-1]), "lookup", None, None)
    switched = {getattr(k, "elem_id", None): v for k, v in switched.items()}
    assert switched["ss-heading"].endswith("Prompt lookup") and "tree-plot" in switched
    assert "sel-pass" in switched["ss-output"] and "sel-pass" in switched["ar-output"]  # both texts mark the pass
    run = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "on_run")
    assert {id(k) for k in outs[-1]} == {id(b) for b in run.outputs}  # the final view sets every output


def _state(out: dict):
    """The lane_traces State's value among a handler's outputs."""
    import gradio as gr

    return next(v for k, v in out.items() if isinstance(k, gr.State) and isinstance(v, dict))


def test_a_recorded_lane_table_never_reaches_the_page_as_html(five_lanes):
    """A trace's lane names and stats are data: unknown lanes are dropped, the shown lane falls back to a known one."""
    import copy

    from app.handlers import lane_choice, race_html
    from app.race import view_from_trace

    trace = copy.deepcopy(five_lanes[-1].traces["lookup"])
    trace["meta"]["lab"]["lane"] = "<img src=x onerror=alert(1)>"
    trace["meta"]["lab"]["lanes"].append({"lane": "<b>x</b>", "stats": {"new_tokens": 1}, "identical": True})
    view = view_from_trace(trace)
    assert view.shown == "fast" and "<b>x</b>" not in view.lanes
    out = {**race_html(view), **lane_choice(view)}
    assert not any("<img" in str(v) or "<b>x" in str(v) for v in out.values()), out


def test_the_teaching_lane_keeps_its_maps_when_capture_rounds_differently(lanes_engine, capture_rounds_differently):
    """As tests/test_lab_attention.py for the fastest draft: a capturing pass that computes other numbers than the
    fast path (here: the captured layers' attention output perturbed) changes no draft of the rerun that captures
    apart, so every pass of the teaching lane still gets its maps."""
    from app.race import race

    engine, lock = lanes_engine
    final = list(race(engine, PROMPT, DecodeConfig(max_new_tokens=30), lock, min_interval=0.0,
                      attention_layers=_layers(engine), lanes=["teaching"]))[-1]
    steps = final.traces["teaching"]["steps"]
    assert final.shown == "teaching" and len(steps) > 3
    assert all(s["attention"] and s["attention"]["layers"] for s in steps)

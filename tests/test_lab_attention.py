"""Stream attention maps on every pass of a race: the maps come from an untimed rerun that captures each pass's
attention in a pass of its own (`Decoding.capture_apart`), so capturing changes no draft and every step of the
rerun matches the race's."""

from dataclasses import replace

import pytest
import torch

from specstream_core import DecodeConfig
from helpers import LAB_PROMPT as PROMPT, lab_models_env


def _layers(engine) -> tuple[int, ...]:
    return tuple(range(engine.streams.cfg.birth_layer, engine.streams.cfg.num_layers))


def _lab_default_config(lab_dir, max_new: int = 40) -> DecodeConfig:
    """The settings the lab's page opens with for the tiny model (its recommended draft, greedy)."""
    from app import limits
    from app.models import parse_specs, recommended_for

    spec = parse_specs(lab_models_env(lab_dir))["tiny"]
    rec = recommended_for(spec, "lossless")
    return limits.lab_decode_config(",".join(map(str, rec["topk"])), rec["prune_threshold"], rec["node_budget"],
                                    rec["lookup"], 0.0, 0, max_new)


def _trees(trace) -> list:
    return [([n["token"] for n in s["nodes"]], s["accepted"], s["emitted"]) for s in trace["steps"]]


def test_every_pass_of_a_race_at_the_lab_defaults_has_a_map(engine_and_lock, lab_dir):
    from app.figures import attention_choices, attention_figure
    from app.race import race

    engine, lock = engine_and_lock
    final = list(race(engine, PROMPT, _lab_default_config(lab_dir), lock, min_interval=0.0,
                      attention_layers=_layers(engine)))[-1]
    steps = final.trace["steps"]
    assert len(steps) > 3
    for i in range(len(steps)):
        layers, heads = attention_choices(final.trace, i)
        assert layers == [str(li) for li in _layers(engine)] and "mean" in heads, i
        assert "no stream attention" not in attention_figure(final.trace, i).to_json(), i


def test_capturing_apart_changes_no_draft(engine_and_lock, capture_rounds_differently):
    """Where a capturing pass rounds differently, capturing in the pass changes the drafts (the old rerun then
    matched the race on few passes); captured apart, the decoding is the one without capture, pass for pass,
    and every pass has its maps."""
    engine, _ = engine_and_lock
    base = DecodeConfig(mode="ss", max_new_tokens=40, tree_topk=(3, 2, 1), trace=True)
    plain = engine.generate(PROMPT, base).trace
    capturing = replace(base, attention_layers=_layers(engine))
    inside = engine.generate(PROMPT, capturing).trace
    assert _trees(inside) != _trees(plain)  # the perturbation does reach the drafts
    apart = engine.start(PROMPT, capturing)
    apart.capture_apart = True
    apart = apart.run().trace
    assert _trees(apart) == _trees(plain)
    assert apart["output"]["token_ids"] == plain["output"]["token_ids"]
    assert all(s["attention"] and s["attention"]["layers"] for s in apart["steps"])


def test_the_race_grafts_maps_on_every_pass_when_capture_rounds_differently(engine_and_lock,
                                                                            capture_rounds_differently):
    from app.race import race

    engine, lock = engine_and_lock
    final = list(race(engine, PROMPT, DecodeConfig(max_new_tokens=40, tree_topk=(3, 2, 1)), lock, min_interval=0.0,
                      attention_layers=_layers(engine)))[-1]
    assert all(s["attention"] and s["attention"]["layers"] for s in final.trace["steps"])


def test_maps_apart_equal_maps_in_the_pass(engine_and_lock):
    """Without a perturbation the two ways of capturing see the same passes: the same maps (up to rounding)."""
    engine, _ = engine_and_lock
    cfg = DecodeConfig(mode="ss", max_new_tokens=16, tree_topk=(2, 1), trace=True, attention_layers=_layers(engine))
    inside = engine.generate(PROMPT, cfg).trace
    dec = engine.start(PROMPT, cfg)
    dec.capture_apart = True
    apart = dec.run().trace
    assert _trees(inside) == _trees(apart)
    for a, b in zip(inside["steps"], apart["steps"]):
        assert a["attention"]["columns"] == b["attention"]["columns"]
        for li, maps in a["attention"]["layers"].items():
            assert torch.allclose(torch.tensor(maps), torch.tensor(b["attention"]["layers"][li]), atol=2e-4)


@pytest.fixture(scope="module")
def default_model_engine():
    """The default model at its default precision with its stream set, as the lab opens it (skipped where the
    default model is not converted here)."""
    from app.models import EngineCache, bundled_spec

    with pytest.MonkeyPatch.context() as mp:  # resolve as the lab does, without the tests' opt-out
        mp.delenv("SPECSTREAM_DEFAULT_BASE", raising=False)
        spec = bundled_spec()
        if spec is None:
            pytest.skip("the default model is not available here")
        return EngineCache({spec.name: spec}).get(spec.name, "lossless"), spec


def test_every_pass_on_the_default_model_has_a_map_at_the_lab_defaults_and_the_teaching_draft(default_model_engine):
    """The race's fastest lane (the lab's opening settings) and its teaching lane (the streams' own tree): a stream
    attention map on every pass of each, on the model a visitor meets."""
    from app import limits
    from app.figures import attention_figure
    from app.models import recommended_for
    from app.race import race

    (engine, lock), spec = default_model_engine
    rec = recommended_for(spec, "lossless")
    cfg = limits.lab_decode_config(",".join(map(str, rec["topk"])), rec["prune_threshold"], rec["node_budget"],
                                   rec["lookup"], 0.0, 0, 32)
    final = list(race(engine, PROMPT, cfg, lock, min_interval=0.0, attention_layers=_layers(engine),
                      lanes=["fast", "teaching"]))[-1]
    assert set(final.traces) == {"fast", "teaching"}
    for lane, trace in final.traces.items():
        steps = trace["steps"]
        assert len(steps) > 3, lane
        for i in range(len(steps)):
            assert "no stream attention" not in attention_figure(trace, i).to_json(), (lane, i)
    teaching = final.traces["teaching"]["steps"]
    assert max(len(s["nodes"]) for s in teaching) > max(len(s["nodes"]) for s in final.traces["fast"]["steps"])

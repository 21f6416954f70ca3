"""Replaying a draft over an answer already decoded (`bench/draft_replay.py`) counts the passes decoding with it
takes: the draft τ `draft-tau` reports is the τ decoding would reach."""

import pytest

from specstream_core import DecodeConfig, Engine
from specstream_core.bench.draft_replay import accepted, replay, stream_rows
from specstream_core.decoding.drafters.ngram_store import NgramStore
from specstream_core.decoding.loop import default_drafter
from specstream_core.decoding.tree import chain, graft_chain
from helpers import NEW, perturbed_streams
from tiny_models import hf_greedy, prompts, tiny_model


def test_acceptance_follows_the_longest_matching_path():
    tree = graft_chain(chain(9, [1, 2]), [1, 3, 4], budget=8)  # 9 -> 1 -> {2, 3 -> 4}
    assert accepted(tree, [1, 3, 4, 7]) == 3
    assert accepted(tree, [1, 2, 5]) == 2
    assert accepted(tree, [5, 1]) == 0
    assert accepted(tree, []) == 0


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_replayed_passes_equal_decoding(family):
    model = tiny_model(family, seed=3)
    streams = perturbed_streams(model, seed=9)
    try:
        store = NgramStore.build([hf_greedy(model, ids, NEW) for ids in prompts(16, seed=11)], model.config.vocab_size)
        engine = Engine(model, None, streams, ngrams=store)
        base = dict(mode="ss", max_new_tokens=NEW, stop_on_eos=False)
        drafts = [DecodeConfig(**base, tree_topk=(1,), lookup=3, node_budget=4, ngrams=True),
                  DecodeConfig(**base, tree_topk=(1,), lookup=2, node_budget=3),
                  DecodeConfig(**base, tree_topk=(2, 1), node_budget=5),
                  DecodeConfig(**base, tree_topk=(1, 1, 1, 1), node_budget=5)]
        plain = DecodeConfig(mode="ar", max_new_tokens=NEW, stop_on_eos=False)
        total = [0, 0]
        for ids in prompts(8, seed=7):
            answer = engine.generate(ids, plain).token_ids
            rows = stream_rows(engine, ids, answer)
            for cfg in drafts:
                passes, nodes = replay(engine, default_drafter(engine, cfg), ids, answer, rows)
                real = engine.generate(ids, cfg)
                assert real.token_ids == answer
                assert passes == real.stats["forward_passes"], (family, ids, cfg)
                assert nodes >= passes - 1  # every step drafts at least its root
                total[0], total[1] = total[0] + passes, total[1] + len(answer)
        assert total[0] < total[1]  # drafts were accepted: fewer passes than tokens
    finally:
        streams.detach()


def test_the_draft_tau_command_replays_drafts_and_checks_them(tmp_path, capsys):
    import json

    from specstream_core import cli
    from tiny_models import save_tiny_model_dir

    base = save_tiny_model_dir(tmp_path / "base")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "abc abc ab", "category": "text"}, {"prompt": "w1 w2 w1", "category": "text"},
        {"prompt": [1, 5, 6, 7, 5, 6], "category": "ids"}]) + "\n")
    out = tmp_path / "tau.json"
    rc = cli.main(["draft-tau", "--base", base, "--dtype", "fp32", "--prompts", str(prompts), "--max-new-tokens", "12",
                   "--drafts", "streams,b3l2,default/k1", "--check", "3", "--json", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    result = json.loads(out.read_text())
    assert result["prompts"] == 3 and set(result["tau"]["b3l2"]) == {"text", "ids"}
    assert result["checked"] == {d: [3, 3] for d in ("streams", "b3l2", "default/k1")}
    assert all(1.0 <= t <= 12 for d in result["tau"].values() for t in d.values())
    assert "| b3l2 |" in printed and "top-1 accuracy by depth" in printed


@pytest.mark.parametrize("args, message", [
    (["--drafts", "b3"], "draft 'b3'"),
    (["--drafts", "streams/k0"], "top-k"),
    (["--n", "0"], "--n"),
    (["--check", "-1"], "--check"),
])
def test_the_draft_tau_command_rejects_bad_settings_in_one_line(tmp_path, capsys, args, message):
    from specstream_core import cli
    from tiny_models import save_tiny_model_dir

    base = save_tiny_model_dir(tmp_path / "base")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "abc"}\n')
    rc = cli.main(["draft-tau", "--base", base, "--prompts", str(prompts), "--no-progress", *args])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and message in errors[0], errors


def test_a_bad_prompts_file_gets_one_clear_line(tmp_path, capsys):
    from specstream_core import cli
    from tiny_models import save_tiny_model_dir

    base = save_tiny_model_dir(tmp_path / "base")
    bad = tmp_path / "prompts.jsonl"
    for payload, message in (('{"prompt": ""}\n', ":1: expected a non-empty"), ("not json\n", ":1: not valid JSON"),
                             ("", "no prompts")):
        bad.write_text(payload)
        rc = cli.main(["draft-tau", "--base", base, "--prompts", str(bad), "--no-progress"])
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert rc == 2 and len(errors) == 1 and message in errors[0], errors

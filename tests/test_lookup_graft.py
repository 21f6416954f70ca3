"""Prompt lookup grafted onto the streams' tree (`StreamLookupDrafter`): the trie merge, the n-gram
match, and decoding that stays equal to transformers' generate while copied tokens get accepted."""

import pytest

from specstream_core import DecodeConfig, Engine
from specstream_core.decoding.drafters import StreamLookupDrafter
from specstream_core.decoding.drafters.prompt_lookup import prompt_lookup
from specstream_core.decoding.tree import chain, from_stream_topk, graft_chain
from specstream_core.errors import SpecstreamError
from helpers import NEW, N_PROMPTS, perturbed_streams
from tiny_models import hf_greedy, prompts, tiny_model


def test_graft_shares_the_nodes_it_agrees_with_and_keeps_the_budget():
    tree = from_stream_topk(5, [[7, 8], [9]], [[0.6, 0.3], [0.5]], budget=64)  # 5 -> {7 -> 9, 8 -> 9}
    grafted = graft_chain(tree, [7, 9, 4, 2], budget=64)
    assert grafted.tokens[: len(tree)] == tree.tokens and grafted.parents[: len(tree)] == tree.parents
    new = list(range(len(tree), len(grafted)))
    assert [grafted.tokens[i] for i in new] == [4, 2]  # 7 and 9 were already there, on the same path
    assert grafted.path_to(new[-1]) == [0, 1, 3, new[0], new[1]]
    assert [grafted.depths[i] for i in new] == [3, 4]
    assert all(p < i for i, p in enumerate(grafted.parents))  # parents first: a valid pass order
    # a copy that disagrees at once branches from the root; the budget stops it
    other = graft_chain(tree, [1, 2, 3], budget=len(tree) + 2)
    assert len(other) == len(tree) + 2 and other.parents[len(tree)] == 0 and other.depths[-1] == 2
    assert graft_chain(tree, [1, 2], budget=len(tree)).tokens == tree.tokens
    assert graft_chain(chain(5, []), [], budget=4).tokens == [5]


def test_a_streams_tree_larger_than_the_budget_leaves_room_for_the_copy():
    """With top-k 2,2 (7 nodes) in a 5-node budget the streams' tree alone would fill it (the copy got no node);
    now the copy keeps its 3 nodes and the streams get the rest, best path first. A tree that fits the budget is
    built as before."""
    top = ([[7, 8], [9, 6]], [[0.6, 0.3], [0.5, 0.4]])
    history = [1, 2, 3, 4, 5, 6, 1, 2]  # with the root 3: "1 2 3" was followed by "4 5 6"
    drafter = StreamLookupDrafter(topk=(2, 2), budget=5, lookup=3)
    drafter._top = top
    tree = drafter.propose(3, history)
    assert tree.tokens == [3, 7, 4, 5, 6] and tree.parents == [-1, 0, 0, 2, 3] and tree.copied == {2, 3, 4}
    roomy = StreamLookupDrafter(topk=(2, 2), budget=10, lookup=3)
    roomy._top = top
    tree = roomy.propose(3, history)
    assert tree.tokens[:7] == from_stream_topk(3, *top, budget=10).tokens and tree.tokens[7:] == [4, 5, 6]


def test_prompt_lookup_takes_the_latest_longest_match_and_honours_the_shortest_n_gram():
    seq = [1, 2, 3, 9, 1, 2, 4, 8, 1, 2]
    assert prompt_lookup(seq, max_ngram=3, num_tokens=2) == [4, 8]  # "1 2" last seen before "4 8"
    assert prompt_lookup([1, 2, 3, 4, 5, 2], max_ngram=3, num_tokens=3) == [3, 4, 5]
    assert prompt_lookup([1, 2, 3, 4, 5, 2], max_ngram=3, num_tokens=3, min_ngram=2) == []
    assert prompt_lookup([6], max_ngram=3, num_tokens=3) == []


def test_lookup_settings_are_checked():
    for bad in (-1, 33, 1.5, True):
        with pytest.raises(SpecstreamError, match="lookup"):
            DecodeConfig(lookup=bad)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_grafted_lookup_equals_transformers_generate_and_its_copies_are_accepted(family):
    model = tiny_model(family, seed=3)
    streams = perturbed_streams(model, seed=9)
    try:
        engine = Engine(model, None, streams)
        deep_hits, plain_passes, lookup_passes = 0, 0, 0
        for ids in prompts(N_PROMPTS, seed=7):
            ids = ids + ids  # a repeated prompt: prompt lookup finds what to copy
            ref = hf_greedy(model, ids, NEW)
            plain = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(1,)))
            cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(1,), lookup=4, node_budget=4)
            got = engine.generate(ids, cfg)
            assert got.token_ids == ref and plain.token_ids == ref, f"{family}: prompt {ids}"
            deep_hits += sum(got.stats["depth_acceptance"][1:])  # depth >= 2 with a one-stream tree: copied
            plain_passes += plain.stats["forward_passes"]
            lookup_passes += got.stats["forward_passes"]
            dec = engine.start(ids, cfg)
            assert isinstance(dec.row.drafter, StreamLookupDrafter)
        assert deep_hits > 0 and lookup_passes < plain_passes, (deep_hits, lookup_passes, plain_passes)
    finally:
        streams.detach()


def test_copied_nodes_survive_the_trace_schema_and_show_in_the_lab():
    from app.explain import explain_step
    from app.figures import tree_figure
    from specstream_core.decoding.trace import validate

    model = tiny_model("llama", seed=3)
    streams = perturbed_streams(model, seed=9)
    try:
        engine = Engine(model, None, streams)
        ids = prompts(4, seed=7)[1] * 3
        cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(1,), lookup=3, trace=True)
        trace = validate(engine.generate(ids, cfg).trace)
    finally:
        streams.detach()
    assert trace["meta"]["lookup"] == 3
    steps = [s["index"] for s in trace["steps"] if any(n.get("copied") for n in s["nodes"])]
    assert steps, "no pass grafted a copy"
    step = trace["steps"][steps[0]]
    assert not step["nodes"][0].get("copied") and all(n["depth"] >= 1 for n in step["nodes"] if n.get("copied"))
    fig = tree_figure(trace, steps[0])
    hovers = [h for d in fig.data for h in (d.hovertext or ())]
    assert any("copied from the context" in h for h in hovers)
    assert "prompt lookup →" in explain_step(trace, steps[0])
    with pytest.raises(SpecstreamError, match="copied"):
        bad = dict(trace)
        bad["steps"] = [dict(s) for s in trace["steps"]]
        bad["steps"][steps[0]] = {**step, "nodes": [{**n, "copied": "yes"} for n in step["nodes"]]}
        validate(bad)

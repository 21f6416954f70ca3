"""N-gram blocking and repetition penalty per tree node equal transformers' generate, token for token."""

from types import SimpleNamespace

import pytest
import torch

from specstream_core import DecodeConfig, Engine, SpecstreamError, StreamParams
from specstream_core.decoding import processors
from specstream_core.decoding.drafters import Drafter
from specstream_core.decoding.tree import Tree, from_stream_topk
from tiny_models import hf_greedy, prompts, tiny_model

NEW = 24
N_PROMPTS = 4
SETTINGS = [dict(no_repeat_ngram_size=2), dict(no_repeat_ngram_size=3), dict(repetition_penalty=1.5),
            dict(no_repeat_ngram_size=2, repetition_penalty=1.3)]


def perturbed_streams(model, seed=1):
    streams = StreamParams.fresh(model, gamma=4, n_stream_layers=2, adapter_rank=4, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in streams.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return streams


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def setup(request):
    # a small vocabulary makes greedy loop quickly, so blocking and the penalty change the output
    model = tiny_model(request.param, seed=3, vocab=32)
    ids = prompts(N_PROMPTS, vocab=32, seed=7, max_len=12)
    plain = [hf_greedy(model, p, NEW) for p in ids]
    return model, ids, plain


def kw_name(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("kw", SETTINGS, ids=kw_name)
def test_ss_and_ar_equal_transformers_generate(setup, kw):
    model, ids, plain = setup
    streams = perturbed_streams(model)
    try:
        engine = Engine(model, None, streams)
        changed = 0
        for prompt, base in zip(ids, plain):
            ref = hf_greedy(model, prompt, NEW, **kw)
            changed += ref != base
            for mode in ("ar", "ss"):
                out = engine.generate(prompt, DecodeConfig(mode=mode, max_new_tokens=NEW, stop_on_eos=False, **kw))
                assert out.token_ids == ref, f"{mode} {kw} prompt {prompt}"
        assert changed >= N_PROMPTS // 2, f"{kw} changed only {changed} outputs: the test would prove little"
    finally:
        streams.detach()


class TruthAmongDecoys(Drafter):
    """Branching trees whose true continuation (with blocking) sits second among its siblings; the
    decoys include what *unprocessed* greedy would choose there, so a node must see its own path."""

    def __init__(self, prompt, ref, plain_next):
        self.prompt, self.ref, self.plain_next = prompt, ref, plain_next

    def propose(self, root, history):
        done = len(history) + 1 - len(self.prompt)
        truth = self.ref[done:done + 3]
        levels = []
        for j, t in enumerate(truth):
            decoy = self.plain_next(history + [root] + truth[:j])
            levels.append([decoy if decoy != t else (t + 1) % 32, t, (t + 2) % 32])
        return from_stream_topk(root, levels, [[0.4, 0.3, 0.3]] * len(levels), budget=64)


@pytest.mark.parametrize("kw", SETTINGS[:3], ids=kw_name)
def test_blocking_inside_accepted_tree_paths(kw):
    model = tiny_model("mistral", seed=3, vocab=32)
    engine = Engine(model, None, None)

    def plain_next(context):
        with torch.no_grad():
            return int(model(torch.tensor([context])).logits[0, -1].argmax())

    for prompt in prompts(3, vocab=32, seed=12, max_len=10):
        ref = hf_greedy(model, prompt, NEW, **kw)
        out = engine.generate(prompt, DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, **kw),
                              drafter=TruthAmongDecoys(prompt, ref, plain_next))
        assert out.token_ids == ref
        assert out.stats["mean_accepted"] >= 3.0  # whole paths accepted: deep nodes were processed right


def test_sampling_sees_processed_logits():
    """A banned token is never drawn, whatever the seed (ss and ar)."""
    model = tiny_model("llama", seed=3, vocab=32, logit_scale=1.0)
    engine = Engine(model, None, perturbed_streams(model))
    prompt = [5, 6, 7, 8]
    for mode in ("ar", "ss"):
        for seed in range(5):
            cfg = DecodeConfig(mode=mode, max_new_tokens=16, temperature=1.0, seed=seed, stop_on_eos=False,
                               no_repeat_ngram_size=2)
            seq = prompt + engine.generate(prompt, cfg).token_ids
            grams = list(zip(seq, seq[1:]))
            assert len(grams) == len(set(grams)), (mode, seed, seq)


def hf_process(context, row, n=0, penalty=1.0):
    from transformers.generation.logits_process import (NoRepeatNGramLogitsProcessor,
                                                        RepetitionPenaltyLogitsProcessor)

    ids, scores = torch.tensor([context]), row[None].clone()
    if penalty != 1.0:
        scores = RepetitionPenaltyLogitsProcessor(penalty)(ids, scores)
    if n:
        scores = NoRepeatNGramLogitsProcessor(n)(ids, scores)
    return scores[0]


def test_each_node_sees_its_own_root_to_node_suffix():
    context = [5, 6, 9]  # tokens before the root
    #      0:7 ── 1:5                 node 1 sees 5 6 9 7 5   -> bigram (5, 6) bans 6
    #         └── 2:8 ── 3:3 ── 4:8   node 4 sees 5 6 9 7 8 3 8 -> bigram (8, 3) on its own path bans 3
    #                                 node 2 sees 5 6 9 7 8     -> ends in 8 too, but bans nothing
    tree = Tree(tokens=[7, 5, 8, 3, 8], parents=[-1, 0, 0, 2, 3], depths=[0, 1, 1, 2, 3], probs=[1.0] * 5)
    vocab = 12
    logits = torch.linspace(-2.0, 3.0, len(tree) * vocab).reshape(len(tree), vocab)
    out = processors.apply(SimpleNamespace(no_repeat_ngram_size=2, repetition_penalty=1.0), logits, context, tree)
    banned = [set(torch.isinf(row).nonzero().flatten().tolist()) for row in out]
    assert banned == [set(), {6}, set(), set(), {3}]
    for i in range(len(tree)):  # and every row equals transformers' processor on that node's full context
        path = context + [tree.tokens[k] for k in tree.path_to(i)]
        assert torch.equal(out[i], hf_process(path, logits[i], n=2))

    penalized = processors.apply(SimpleNamespace(no_repeat_ngram_size=0, repetition_penalty=2.0), logits, context, tree)
    assert penalized[2, 8] != logits[2, 8] and penalized[1, 8] == logits[1, 8]  # 8 is on node 2's path only
    assert penalized[1, 5] != logits[1, 5] and penalized[3, 5] != logits[3, 5]  # 5 is in the shared context


@pytest.mark.parametrize("n,penalty", [(1, 1.0), (2, 1.0), (3, 1.4), (4, 0.7), (0, 1.2)])
def test_random_trees_match_transformers_per_node(n, penalty):
    g = torch.Generator().manual_seed(n)
    vocab = 10
    cfg = SimpleNamespace(no_repeat_ngram_size=n, repetition_penalty=penalty)
    for trial in range(40):
        context = torch.randint(0, vocab, (int(torch.randint(0, 12, (1,), generator=g)),), generator=g).tolist()
        levels = [torch.randint(0, vocab, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g).tolist()
                  for _ in range(int(torch.randint(0, 5, (1,), generator=g)))]
        tree = from_stream_topk(int(torch.randint(0, vocab, (1,), generator=g)), levels,
                                [[0.5] * len(level) for level in levels], budget=int(torch.randint(1, 40, (1,), generator=g)))
        logits = torch.randn(len(tree), vocab, generator=g)
        out = processors.apply(cfg, logits, context, tree)
        for i in range(len(tree)):
            path = context + [tree.tokens[k] for k in tree.path_to(i)]
            assert torch.equal(out[i], hf_process(path, logits[i], n, penalty)), (context, tree, i)
        if context:  # one row after a plain context (the ar loop)
            assert torch.equal(processors.apply(cfg, logits[0], context), hf_process(context, logits[0], n, penalty))


def test_off_is_a_no_op():
    logits = torch.randn(3, 10)
    tree = Tree([1, 2, 3], [-1, 0, 0], [0, 1, 1], [1.0] * 3)
    assert processors.apply(DecodeConfig(), logits, [1, 2, 3], tree) is logits


@pytest.mark.parametrize("kw,needle", [
    (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
    (dict(no_repeat_ngram_size=2.5), "no_repeat_ngram_size"),
    (dict(repetition_penalty=0.0), "repetition_penalty"),
    (dict(repetition_penalty=-1.0), "repetition_penalty"),
    (dict(repetition_penalty=float("nan")), "repetition_penalty"),
])
def test_bad_settings(kw, needle):
    with pytest.raises(SpecstreamError, match=needle):
        DecodeConfig(**kw)


def test_cli_flags_reach_the_config():
    import argparse

    from specstream_core.cli.commands import generate

    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    args = parser.parse_args(["--prompt", "x", "--no-repeat-ngram-size", "3", "--repetition-penalty", "1.2"])
    cfg = generate.build_config(args)
    assert (cfg.no_repeat_ngram_size, cfg.repetition_penalty) == (3, 1.2)
    with pytest.raises(SpecstreamError, match="repetition_penalty"):
        generate.build_config(parser.parse_args(["--prompt", "x", "--repetition-penalty", "0"]))

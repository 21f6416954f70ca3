"""Medusa-style heads: verified by our tree verifier, greedy output equals plain decoding; training
lowers their loss; save/load round trip."""

import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.decoding.drafters.medusa import MedusaDrafter
from specstream_core.model.medusa_heads import MedusaHeads
from specstream_core.training.medusa import MedusaTrainConfig, evaluate_heads, train_heads
from specstream_core.training.data import pack_examples as pack
from tiny_models import hf_greedy, prompts, tiny_model

NEW = 20


def perturbed_heads(model, seed=1):
    heads = MedusaHeads.fresh(model, 4)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return heads


def test_medusa_is_lossless():
    model = tiny_model("llama", seed=3)
    engine = Engine(model, None, None)
    cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False)
    for heads in (MedusaHeads.fresh(model, 4), perturbed_heads(model)):
        for topk in ((1, 1, 1, 1), (3, 2, 2, 1)):
            for ids in prompts(6, seed=11):
                drafter = MedusaDrafter(heads, engine.logits, topk, budget=32)
                out = engine.generate(ids, cfg, drafter)
                assert out.token_ids == hf_greedy(model, ids, NEW)
                assert out.stats["forward_passes"] <= NEW


def test_medusa_heads_in_batches():
    """Each row's Medusa drafter sees its own accepted node's hidden state, from the prefill on (so it
    drafts in a batch, too), and every row equals transformers."""
    model = tiny_model("llama", seed=3)
    engine = Engine(model, None, None)
    heads = perturbed_heads(model)
    sizes: dict[int, list[int]] = {}

    class Spy(MedusaDrafter):
        def __init__(self, row):
            super().__init__(heads, engine.logits, (2, 2, 1, 1), budget=32)
            self.row = row

        def propose(self, root, history):
            tree = super().propose(root, history)
            sizes.setdefault(self.row, []).append(len(tree))
            return tree

    ps = prompts(4, seed=11)
    cfg = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False)
    results = engine.generate_batch(ps, cfg, drafter_factory=Spy)
    for row, (ids, got) in enumerate(zip(ps, results)):
        assert got.token_ids == hf_greedy(model, ids, NEW)
        assert sizes[row] and all(n > 1 for n in sizes[row])  # a real tree every step
    solo = [engine.generate(ids, cfg, Spy(9)).token_ids for ids in ps]
    assert solo == [r.token_ids for r in results]


def test_training_and_round_trip(tmp_path):
    model = tiny_model("llama", seed=4)
    # a repetitive "answer" the heads can learn: the base's greedy continuation of each prompt
    pairs = [(p, hf_greedy(model, p, 24)) for p in prompts(24, seed=5)]
    data = pack(pairs, 64)
    before = evaluate_heads(model, MedusaHeads.fresh(model, 4), *data)
    summary = train_heads(model, MedusaTrainConfig(steps=30, batch_size=4, seq_len=64, lr=1e-2, warmup=2), data,
                          str(tmp_path), eval_data=data, progress=False, use_accelerate=False, log=lambda *_: None)
    assert summary["history"][-1]["loss"] < summary["history"][0]["loss"]
    assert summary["eval"]["topk=1,1,1,1"]["tau_estimate"] > before["tau_estimate"]
    heads = MedusaHeads.load(str(tmp_path), model)
    assert heads.extra_parameter_count() == 4 * (64 * 64 + 64)
    engine = Engine(model, None, None)
    ids = prompts(1, seed=5)[0]
    out = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False),
                          MedusaDrafter(heads, engine.logits))
    assert out.token_ids == hf_greedy(model, ids, NEW)

"""The LM head laid out with the draft vocabulary first (`kernels/heads/merged_head.py`): one read of the head scores a pass's
main rows over the vocabulary and its stream rows over the draft vocabulary, each value as the head's own call and the
draft head give it, and decoding through it is plain decoding, with the same drafts. bf16 on AMX tiles and int4-a8's
8-bit head, where this CPU runs them."""

import pytest
import torch

from specstream_core.decoding.config import DecodeConfig
from specstream_core.decoding.engine import Engine
from specstream_core.model import compat
from specstream_core.kernels.linears import int4, int4_a8, rowinv
from specstream_core.kernels import amx_tiles
from specstream_core.kernels.heads.merged_head import MergedHead
from specstream_core.model.streams import StreamParams
from tests.tiny_models import prompts, tiny_model

HEADS = [pytest.param("bf16", marks=pytest.mark.skipif(not rowinv.available() or not amx_tiles.amx(rowinv.library()),
                                                       reason="no AMX tiles here")),
         pytest.param("int4-a8", marks=pytest.mark.skipif(not int4_a8.available(), reason="no AVX512-VNNI kernel here"))]


def _model(precision: str, vocab: int = 256):
    """Near-ties everywhere (unscaled logits): a last-bit difference between two paths flips tokens."""
    model = tiny_model("llama", seed=5, logit_scale=1.0, hidden=128, layers=4, num_attention_heads=4,
                       num_key_value_heads=2, vocab=vocab)
    if precision == "bf16":
        rowinv.install(model, "rowinv", torch.bfloat16)
    else:
        int4.quantize_model(model, kernel=True, a8=True)
    return model


@pytest.mark.parametrize("precision", HEADS)
def test_one_read_scores_main_and_stream_rows_as_the_head_and_the_draft_head_apart(precision):
    model = _model(precision)
    head = compat.lm_head(model)
    ids = torch.randperm(256, generator=torch.Generator().manual_seed(1))[:64]  # not in order
    merged = MergedHead.of(head, ids)
    assert merged is not None
    streams = StreamParams.fresh(model, gamma=2, n_stream_layers=2, draft_vocab=ids.tolist())
    g = torch.Generator().manual_seed(2)
    with torch.inference_mode():
        for m, s in ((1, 0), (1, 1), (5, 20), (3, 40), (33, 7)):  # on tiles 27 and 47 rows: two row tiles, past 32
            main, rows = torch.randn(m, 128, generator=g), torch.randn(s, 128, generator=g)
            logits, drafts = merged.scores(main, rows if s else None)
            assert torch.equal(logits, head(main)), (m, s)  # the head's own call
            assert (drafts is None) == (s == 0)
            if s:  # the draft head, cut from the same weights
                assert torch.equal(drafts, streams.draft_scores(head, rows)[0].float())
        logits, drafts = merged.scores(torch.randn(2, 3, 128, generator=g), torch.randn(2, 3, 2, 128, generator=g))
        assert logits.shape == (2, 3, 256) and drafts.shape == (2, 3, 2, 64)
    assert MergedHead.of(head, ids[:40]) is None  # not whole blocks of 32
    assert MergedHead.of(head, torch.arange(256)) is None and MergedHead.of(head, None) is None
    fp32 = tiny_model("llama", seed=5, hidden=128, vocab=256)
    rowinv.install(fp32, "rowinv")
    assert MergedHead.of(compat.lm_head(fp32), ids) is None  # the fp32 head's read is its own: not merged


@pytest.mark.parametrize("precision", HEADS)
def test_decoding_through_the_merged_head_is_plain_decoding_with_the_same_drafts(precision, monkeypatch):
    model = _model(precision)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=32, seed=1,
                                 draft_vocab=torch.randperm(256, generator=torch.Generator().manual_seed(3))[:96].tolist())
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in streams.trainable_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    engine = Engine(model, None, streams, precision=precision)
    assert engine.backend.merged_head() is not None
    items = prompts(6, vocab=256, seed=6, max_len=60)
    runs = {}
    for topk in ((1, 1, 1), (2, 2, 1)):
        ss = DecodeConfig(mode="ss", max_new_tokens=32, stop_on_eos=False, tree_topk=topk)
        runs[topk] = [engine.generate(ids, ss) for ids in items]
    plain = [engine.generate(ids, DecodeConfig(mode="ar", max_new_tokens=32, stop_on_eos=False)).token_ids
             for ids in items]
    batch = engine.generate_batch(items, DecodeConfig(mode="ss", max_new_tokens=32, stop_on_eos=False, tree_topk=(1, 1, 1)))
    assert all(r.token_ids == p for r, p in zip(runs[(1, 1, 1)], plain))
    assert all(r.token_ids == p for r, p in zip(runs[(2, 2, 1)], plain))
    assert all(r.token_ids == p for r, p in zip(batch, plain))
    assert any(r.stats["mean_accepted"] > 1 for r in runs[(1, 1, 1)])
    monkeypatch.setattr(engine.backend, "merged_head", lambda: None)  # the head and the draft head apart
    for topk, results in runs.items():
        ss = DecodeConfig(mode="ss", max_new_tokens=32, stop_on_eos=False, tree_topk=topk)
        apart = [engine.generate(ids, ss) for ids in items]
        assert [r.token_ids for r in apart] == [r.token_ids for r in results]
        assert [r.stats["mean_accepted"] for r in apart] == [r.stats["mean_accepted"] for r in results], "same drafts"

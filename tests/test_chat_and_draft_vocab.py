"""Chat prompts (the tokenizer's template, --raw to opt out) and the streams' draft vocabulary."""

import json

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.decoding.drafters.base import StreamDrafter
from specstream_core.errors import SpecstreamError
from specstream_core.model.chat import encode_prompt
from specstream_core.kernels.linears import rowinv
from specstream_core.kernels import amx_tiles
from specstream_core.training.data import IGNORE
from specstream_core.training.config import TrainConfig
from specstream_core.training.features import FeatureCache
from specstream_core.training.objectives import frequent_tokens, to_draft_ids
from specstream_core.training.streams import train
from tiny_models import hf_greedy, prompts, save_tiny_model_dir, tiny_model

TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }} {{ m['content'] }}</s>{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant {% endif %}")


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    from transformers import AutoTokenizer

    path = save_tiny_model_dir(tmp_path_factory.mktemp("chat"))
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(path)
    return path


def test_prompts_are_wrapped_unless_raw(chat_dir):
    engine = Engine.load(chat_dir, fresh_streams=False)
    wrapped = engine.encode("ab")
    assert wrapped == encode_prompt(engine.tokenizer, "ab", True)
    assert wrapped != engine.tokenizer("ab")["input_ids"]
    assert engine.decode_text(wrapped).replace(" ", "").endswith("assistant")  # the answer starts here
    engine.chat = False
    assert engine.encode("ab") == engine.tokenizer("ab", add_special_tokens=True)["input_ids"]


def test_cli_raw_flag(chat_dir, capsys):
    from specstream_core import cli

    runs = {}
    for flag in ([], ["--raw"]):
        assert cli.main(["generate", "--base", chat_dir, "--prompt", "ab", "--mode", "ar", "--max-new-tokens", "3",
                         "--json", *flag]) == 0
        runs[bool(flag)] = json.loads(capsys.readouterr().out)
    engine = Engine.load(chat_dir, fresh_streams=False)
    for raw, out in runs.items():
        engine.chat = not raw
        expect = engine.generate("ab", DecodeConfig(mode="ar", max_new_tokens=3, stop_on_eos=True)).token_ids
        assert out["token_ids"] == expect


def test_draft_vocab_keeps_output_exact_and_only_drafts_inside_it():
    model = tiny_model("llama", seed=3)
    vocab = list(range(0, 128, 3))
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, seed=2, draft_vocab=vocab)
    with torch.no_grad():
        streams.embeddings.normal_(0, 1.0)
    engine = Engine(model, None, streams)
    logits = engine.draft_logits(torch.randn(3, 64))
    assert logits.shape == (3, 128)
    allowed = torch.zeros(128, dtype=torch.bool)
    allowed[vocab] = True
    assert torch.isinf(logits[:, ~allowed]).all() and torch.isfinite(logits[:, allowed]).all()
    # the drafters rank the draft vocabulary's own scores: the same tokens and probabilities as over the vocabulary
    h = torch.randn(3, 64)
    scores, ids = engine.draft_scores(h)
    assert scores.shape == (3, len(vocab)) and ids.tolist() == vocab
    by_sub, by_full = StreamDrafter((3, 2, 1), 64), StreamDrafter((3, 2, 1), 64)
    by_sub._observe_logits(scores, ids)
    by_full._observe_logits(engine.draft_logits(h))
    assert by_sub._top[0] == by_full._top[0]
    assert torch.allclose(torch.tensor(sum(by_sub._top[1], [])), torch.tensor(sum(by_full._top[1], [])))
    for ids in prompts(6, seed=4):
        ref = hf_greedy(model, ids, 16)
        out = engine.generate(ids, DecodeConfig(mode="ss", max_new_tokens=16, stop_on_eos=False, tree_topk=(2, 2, 1)))
        assert out.token_ids == ref
    streams.detach()


def test_draft_vocab_survives_save_and_load(tmp_path):
    model = tiny_model("llama", seed=3)
    streams = StreamParams.fresh(model, gamma=2, n_stream_layers=2, draft_vocab=[5, 7, 9])
    streams.save(tmp_path)
    streams.detach()
    loaded = StreamParams.load(str(tmp_path), model)
    assert loaded.draft_vocab.tolist() == [5, 7, 9] and loaded.cfg.draft_vocab_size == 3
    loaded.detach()


def test_draft_targets_and_frequent_tokens():
    vocab = torch.tensor([2, 5, 9])
    targets = torch.tensor([[5, 9, 4, IGNORE]])
    assert to_draft_ids(vocab, targets, 16).tolist() == [[1, 2, IGNORE, IGNORE]]
    pairs = [([1], [5, 5, 5, 9, 9, 3]), ([12], [3, 7])]
    assert frequent_tokens(pairs, 2) == [3, 5]  # 5 x3, then 3 and 9 tie at 2 (lower id first)
    assert frequent_tokens(pairs, 2, always=(7,)) == [5, 7]
    # fewer distinct answer tokens than asked: prompt tokens next, then the lowest ids
    assert frequent_tokens(pairs, 6, vocab_size=16) == [1, 3, 5, 7, 9, 12]
    assert frequent_tokens(pairs, 8, vocab_size=16) == [0, 1, 2, 3, 5, 7, 9, 12]


def test_feature_cache_matches_the_full_forward():
    from specstream_core.model import masks, msa

    model = tiny_model("llama", seed=3)
    streams = StreamParams.fresh(model, gamma=2, n_stream_layers=2)
    ids = torch.randint(3, 128, (3, 16))
    ids[2] = ids[0]  # rows are the dataset's sequences 4, 8 and 4 again
    cache = FeatureCache(model, streams.cfg.birth_layer, 1e9)
    cached = cache.get(ids, [4, 8, 4])
    assert cache.misses == 2 and cache.hits == 1
    pos = torch.arange(16)[None]
    for row, x in zip(cached, ids):
        out = msa.forward(model, x[None], pos, masks.causal_visibility(16, 1, x.device), streams=streams, carriers=pos)
        torch.testing.assert_close(row, out.birth[0], rtol=0, atol=1e-5)
    streams.detach()


def test_training_with_draft_vocab_and_feature_cache(tmp_path):
    model = tiny_model("llama", seed=3)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (16, 32), generator=g)
    weight = torch.ones_like(ids, dtype=torch.bool)
    weight[:, :4] = False
    vocab = list(range(3, 40))
    cfg = TrainConfig(mode="lossless", gamma=2, n_stream_layers=2, adapter_rank=4, steps=12, batch_size=4,
                      seq_len=32, lr=1e-2, warmup=2, draft_vocab_size=len(vocab), checkpoint_every=0)
    summary = train(model, cfg, (ids, weight), str(tmp_path / "out"), eval_data=(ids[:4], weight[:4]),
                    progress=False, log=lambda *_: None, draft_vocab=vocab)
    losses = [h["loss"] for h in summary["history"]]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    loaded = StreamParams.load(str(tmp_path / "out"), tiny_model("llama", seed=3))
    assert loaded.draft_vocab.tolist() == vocab


def test_cli_uses_the_stream_sets_recommended_tree(tmp_path, capsys):
    from specstream_core import cli

    base = save_tiny_model_dir(tmp_path / "base")
    model = tiny_model("llama", seed=3, max_position_embeddings=64)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2)
    streams.save(tmp_path / "streams", extra={"decode": {"topk": [2, 1], "node_budget": 5, "lookup": 2}})
    for flags, topk, budget, lookup in (([], [2, 1], 5, 2), (["--topk", "3,2,1"], [3, 2, 1], 5, 2),
                                        (["--node-budget", "9", "--lookup", "0"], [2, 1], 9, 0)):
        trace = tmp_path / "t.json"
        assert cli.main(["generate", "--base", base, "--streams", str(tmp_path / "streams"), "--prompt", "ab",
                         "--max-new-tokens", "4", "--trace", str(trace), *flags]) == 0
        meta = json.loads(trace.read_text())["meta"]
        assert (meta["topk"], meta["node_budget"], meta["lookup"]) == (topk, budget, lookup)
    fresh = Engine(tiny_model("llama", seed=3), None, StreamParams.fresh(tiny_model("llama", seed=3), gamma=3))
    assert fresh.decode_config().tree_topk == (1, 1, 1)  # no recommendation: a chain, the cheapest tree on a CPU


def test_api_decodes_with_the_stream_sets_recommended_draft_unless_told(tmp_path):
    """DecodeConfig(mode="ss") leaves the draft to the stream set: engine.generate/start/generate_batch use its
    recorded (fastest measured) tree, budget and lookup; a setting the caller gives wins."""
    model = tiny_model("llama", seed=3, max_position_embeddings=64)
    StreamParams.fresh(model, gamma=3, n_stream_layers=2).save(
        tmp_path / "streams", extra={"decode": {"topk": [2, 1], "node_budget": 5, "lookup": 2}})
    engine = Engine(model, None, StreamParams.load(str(tmp_path / "streams"), model))
    ids = [5, 6, 7, 5, 6]
    for cfg, want in ((DecodeConfig(mode="ss", max_new_tokens=3), ((2, 1), 0.0, 5, 2)),
                      (DecodeConfig(mode="ss", max_new_tokens=3, tree_topk=(3, 2, 1), lookup=0), ((3, 2, 1), 0.0, 5, 0))):
        for dec in (engine.start(ids, cfg), engine.start_batch([ids, ids[:3]], cfg)):
            assert (dec.cfg.tree_topk, dec.cfg.prune_threshold, dec.cfg.node_budget, dec.cfg.lookup) == want
        assert engine.generate(ids, cfg).token_ids == engine.generate(ids, engine.settle(cfg)).token_ids
    assert DecodeConfig().tree_topk is None and engine.decode_config().node_budget == 5
    with pytest.raises(SpecstreamError, match="node budget"):
        DecodeConfig(node_budget=0)


def test_lab_defaults_to_the_stream_sets_recommended_tree(tmp_path):
    from app.models import ModelSpec, recommended_for

    model = tiny_model("llama", seed=3)
    StreamParams.fresh(model, gamma=3, n_stream_layers=2).save(tmp_path / "rec", extra={"decode": {"topk": [2, 1],
                                                                                                   "node_budget": 7,
                                                                                                   "lookup": 3}})
    StreamParams.fresh(model, gamma=3, n_stream_layers=2).save(tmp_path / "plain")
    spec = ModelSpec("m", "base", {"lossless": str(tmp_path / "rec"), "shared": str(tmp_path / "plain")})
    assert recommended_for(spec, "lossless") == {"topk": [2, 1], "prune_threshold": 0.0, "node_budget": 7, "lookup": 3}
    assert recommended_for(spec, "shared")["topk"] == [1, 1, 1]


def test_a_precision_can_record_its_own_fastest_draft(tmp_path):
    """The fastest draft depends on what a wider pass costs, so a stream set may record a precision's own
    settings; the engine, bench's helper and the lab's sliders take them at that precision."""
    from app.models import ModelSpec, recommended_for
    from specstream_core.decoding.config import decode_fields

    record = {"topk": [1], "node_budget": 4, "lookup": 3, "ngrams": True,
              "precisions": {"fp32": {"node_budget": 3, "lookup": 2}, "int4": "not a dict: ignored"}}
    assert decode_fields(record) == {"tree_topk": (1,), "node_budget": 4, "lookup": 3, "ngrams": True}
    assert decode_fields(record, "fp32") == {"tree_topk": (1,), "node_budget": 3, "lookup": 2, "ngrams": True}
    assert decode_fields(record, "int4") == decode_fields(record, "bf16") == decode_fields(record)
    # a host variant (bf16 on AMX tiles) takes its own record where there is one, else its precision's
    record["precisions"]["bf16+amx"] = {"node_budget": 8, "lookup": 7}
    assert decode_fields(record, "bf16+amx")["node_budget"] == 8 and decode_fields(record, "bf16")["node_budget"] == 4
    assert decode_fields(record, "fp32+amx")["node_budget"] == 3
    assert rowinv.draft_precision("fp32") == "fp32"
    assert rowinv.draft_precision("bf16") == ("bf16+amx" if rowinv.available() and amx_tiles.amx(rowinv.library())
                                              else "bf16")
    del record["precisions"]["bf16+amx"]
    model = tiny_model("llama", seed=3, max_position_embeddings=64)
    StreamParams.fresh(model, gamma=3, n_stream_layers=2).save(tmp_path / "streams", extra={"decode": record})
    streams = StreamParams.load(str(tmp_path / "streams"), model)
    cfg = Engine(model, None, streams).decode_config(mode="ss")  # an fp32 engine, without an n-gram store
    assert (cfg.node_budget, cfg.lookup, cfg.ngrams) == (3, 2, False)
    spec = ModelSpec("m", "base", {"lossless": str(tmp_path / "streams")}, "fp32")
    assert recommended_for(spec, "lossless")["node_budget"] == 3
    assert recommended_for(ModelSpec("m", "base", {"lossless": str(tmp_path / "streams")}, "bf16"),
                           "lossless")["node_budget"] == 4
    streams.detach()
    # bf16 on AMX tiles (where this CPU has them) takes the record's "bf16+amx" draft, elsewhere bf16's
    record["precisions"]["bf16+amx"] = {"node_budget": 8, "lookup": 7}
    bf16 = tiny_model("llama", seed=3, max_position_embeddings=64)
    rowinv.install(bf16, "auto", torch.bfloat16)
    StreamParams.fresh(bf16, gamma=3, n_stream_layers=2).save(tmp_path / "amx", extra={"decode": record})
    streams = StreamParams.load(str(tmp_path / "amx"), bf16)
    tiles = rowinv.draft_precision("bf16") == "bf16+amx" and rowinv.uses_kernel(bf16)
    assert Engine(bf16, None, streams, precision="bf16").decode_config(mode="ss").node_budget == (8 if tiles else 4)
    streams.detach()


def test_one_example_per_row_keeps_each_answer_after_its_own_prompt():
    from specstream_core.training.data import one_per_row

    ids, weight = one_per_row([([5, 6], [7, 8]), ([9], []), ([1, 2, 3], [4, 5, 6, 7])], 6, pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 0, 0], [1, 2, 3, 4, 5, 6]]  # no answer: dropped; too long: cut
    assert weight.tolist() == [[False, False, True, True, False, False], [False, False, False, True, True, True]]


def test_distill_then_train_on_a_chat_corpus_file(chat_dir, tmp_path, capsys):
    """The default model's recipe on a tiny chat model: corpus records -> distilled answers (chat-wrapped
    prompts) -> lossless streams on the answered prompts only, one example a row, a draft vocabulary."""
    from specstream_core import cli
    from specstream_core.training.distill import read_cache

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "category": "c", "prompt": "ab" * (i % 3 + 1),
                                        "reference": None}) + "\n" for i in range(12)))
    cache = tmp_path / "answers.jsonl"
    assert cli.main(["distill", "--base", chat_dir, "--data", str(data), "--max-examples", "8", "--out", str(cache),
                     "--max-new-tokens", "6", "--batch-size", "4", "--threads", "1"]) == 0
    assert 1 <= len(read_cache(str(cache))) <= 8  # 3 distinct prompts among the first 8
    out = tmp_path / "streams"
    assert cli.main(["train", "--base", chat_dir, "--out", str(out), "--data", str(data), "--eval-data", str(data),
                     "--distill", "--distilled-only", "--distill-cache", str(cache), "--distill-max-new-tokens", "6",
                     "--draft-vocab", "16", "--gamma", "2", "--n-stream-layers", "2", "--adapter-rank", "2",
                     "--steps", "2", "--batch-size", "2", "--seq-len", "64", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "training prompts have a distilled answer" in printed and "draft vocabulary: 16 tokens" in printed
    cfg = json.loads((out / "streams_config.json").read_text())
    assert cfg["draft_vocab_size"] == 16 and cfg["trained_steps"] == 2


def test_chat_corpus_is_the_default_training_data(chat_dir):
    from transformers import AutoTokenizer

    from specstream_core.cli.args import load_examples
    from specstream_core.tasks.corpus import CATEGORIES, load_corpus

    tok = AutoTokenizer.from_pretrained(chat_dir)
    pairs = load_examples("chat", tok, 2, "train")
    records = load_corpus("train", n=2)
    assert len(pairs) == 2 * len(CATEGORIES) == len(records)
    assert pairs[0][0] == encode_prompt(tok, records[0]["prompt"], True)  # chat-wrapped
    assert {r["prompt"] for r in load_corpus("eval", n=1)}.isdisjoint(r["prompt"] for r in records)

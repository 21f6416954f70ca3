"""An engine's image (`decoding.engine_image`): after a full start of an int4 / int4-a8 engine whose layers all run as the
kernel's whole-layer steps, a later start builds the engine from the image and the kernel cache alone (no transformers
modeling module, no module of transformers in the model), and keeps it only where the full engine's probe comes out
bit for bit; it then decodes every prompt as the full engine does. A changed file, a tampered probe or another
request gives no engine (the caller starts in full)."""

import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file, save_file

from specstream_core import DecodeConfig, Engine
from specstream_core.kernels.linears import int4_a8, rowinv
from specstream_core.backends.image_model import ImageCausalLM
from specstream_core.decoding import engine_image as image
from specstream_core.model import compat
from helpers import saved_base_and_streams
from tiny_models import prompts

pytestmark = pytest.mark.skipif(not rowinv.available(), reason="images hold the row-invariant kernel's steps")
PRECISIONS = ["int4"] + (["int4-a8"] if int4_a8.available() else [])
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama saved as a user's --base, and a stream set with a draft vocabulary."""
    return saved_base_and_streams(tmp_path_factory.mktemp("image"))


@pytest.fixture
def packs(tmp_path, monkeypatch):
    """A kernel cache folder of the test's own (layouts and images)."""
    monkeypatch.setenv("SPECSTREAM_PACK_DIR", str(tmp_path / "packed"))
    monkeypatch.delenv("SPECSTREAM_PACK_CACHE", raising=False)
    monkeypatch.delenv("SPECSTREAM_IMAGE", raising=False)
    return tmp_path / "packed"


def _request(saved, precision: str, **changes) -> dict:
    return {"base": saved[0], "streams": saved[1], "precision": precision, "device": "cpu", "gamma": 4,
            "n_stream_layers": None, "chat": True, "stream_weights": "auto", **changes}


def _full(saved, precision: str) -> Engine:
    return Engine.load(saved[0], streams_dir=saved[1], precision=precision)


def _outputs(engine: Engine) -> list[list[int]]:
    cfgs = [engine.decode_config(mode="ss", max_new_tokens=10, stop_on_eos=False),
            DecodeConfig(mode="ss", max_new_tokens=10, stop_on_eos=False, tree_topk=(2, 2, 1)),
            DecodeConfig(mode="ar", max_new_tokens=10, stop_on_eos=False),
            DecodeConfig(mode="ss", max_new_tokens=10, stop_on_eos=False, temperature=0.8, seed=3)]
    ids = prompts(3, seed=7, max_len=20)
    return [engine.generate(p, cfg).token_ids for cfg in cfgs for p in [*ids, "abc ab"]]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_an_image_starts_the_engine_without_the_modeling_modules_and_decodes_the_same(saved, packs, precision):
    full = _full(saved, precision)
    request = _request(saved, precision)
    assert image.load(request) is None  # none written yet
    assert image.write(full, request) is not None
    started = image.load(request)
    assert isinstance(started.model, ImageCausalLM)
    assert not [m for m in started.model.modules() if type(m).__module__.startswith("transformers")]
    assert compat.layer_path(started.model)["path"] == "kernel"
    assert started.precision == full.precision and started.exact and started.eos_ids == full.eos_ids
    assert _outputs(started) == _outputs(full)
    assert image.load(_request(saved, precision, stream_weights="same" if full.stream_weights != "same" else "int4-a8")) \
        is None  # another request: another image


def test_a_changed_file_or_a_tampered_probe_is_not_trusted(saved, packs):
    precision = PRECISIONS[-1]
    request = _request(saved, precision)
    folder = image.write(_full(saved, precision), request)
    tensors = load_file(os.path.join(folder, "image.safetensors"))
    tensors["probe.1"] = tensors["probe.1"].clone()
    tensors["probe.1"].view(-1)[0] += 1e-3
    save_file(tensors, os.path.join(folder, "image.safetensors"))
    assert image.load(request) is None  # the bound steps do not reproduce the reference: not kept
    image.write(_full(saved, precision), request)
    assert image.load(request) is not None
    config = os.path.join(saved[1], "streams_config.json")
    os.utime(config, ns=(os.stat(config).st_atime_ns, os.stat(config).st_mtime_ns + 10**9))  # "another" stream set
    assert image.load(request) is None


def test_only_engines_on_the_kernels_whole_layer_steps_have_images(saved, packs):
    full = Engine.load(saved[0], streams_dir=saved[1], precision="fp32")
    assert image.ineligible(full) and image.write(full, _request(saved, "fp32")) is None


PROBE = """
import json, sys
from specstream_core import cli
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "modeling": "transformers.modeling_utils" in sys.modules}), file=sys.stderr)
"""


def test_generate_starts_from_the_image_it_left(saved, tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1", "SPECSTREAM_PACK_DIR": str(tmp_path / "packed")}
    env.pop("SPECSTREAM_IMAGE", None)
    argv = ["generate", "--base", saved[0], "--streams", saved[1], "--precision", PRECISIONS[-1], "--prompt", "abc ab",
            "--max-new-tokens", "8", "--json"]
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=300)
        report = json.loads(proc.stderr.strip().splitlines()[-1])
        assert report["code"] == 0, proc.stderr
        out = json.loads(proc.stdout)
        runs.append((out["token_ids"], report["modeling"], out["started_from_image"]))
    assert runs[0][1:] == (True, False) and runs[1][1:] == (False, True)  # a full start, then one from the image
    assert runs[0][0] == runs[1][0]


def test_only_the_most_recently_used_images_are_kept(saved, packs, monkeypatch):
    monkeypatch.setattr(image, "KEEP", 2)
    full = _full(saved, PRECISIONS[-1])
    folders = [image.write(full, _request(saved, PRECISIONS[-1], gamma=g)) for g in (2, 3, 4)]
    assert [os.path.isdir(f) for f in folders] == [False, True, True]


def test_a_cache_folder_that_cannot_be_written_keeps_no_image(saved, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("SPECSTREAM_PACK_DIR", str(tmp_path / "file" / "packed"))
    full = _full(saved, PRECISIONS[-1])
    assert image.write(full, _request(saved, PRECISIONS[-1])) is None
    assert image.load(_request(saved, PRECISIONS[-1])) is None

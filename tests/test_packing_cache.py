"""Cached packing: an int4 / int4-a8 engine's packed layouts (blocked nibbles and scales, the 8-bit head, its layout
with the draft vocabulary first) are written to the kernel cache on the first load and read (or mapped) on the next,
which packs nothing and decodes the same tokens. A corrupt, truncated or foreign entry is rebuilt, never trusted;
other weights make another key."""

import os
import shutil

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.kernels.linears import int4_a8, pack_cache, rowinv
from specstream_core.model import compat
from helpers import saved_base_and_streams
from tiny_models import prompts, save_tiny_model_dir

pytestmark = pytest.mark.skipif(not rowinv.available(), reason="the packed layouts are the row-invariant kernel's")
PRECISIONS = ["int4"] + (["int4-a8"] if int4_a8.available() else [])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama saved as a user's --base, and a stream set with a draft vocabulary (the head is laid out anew)."""
    return saved_base_and_streams(tmp_path_factory.mktemp("packing"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of the test's own (the kernel library is already loaded from the usual one)."""
    assert rowinv.available()
    monkeypatch.setenv("SPECSTREAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECSTREAM_PACK_CACHE", raising=False)
    return tmp_path / "cache" / "packed"


def _load(saved, precision: str) -> tuple[Engine, dict]:
    """The engine, and what its load packed, loaded, wrote and found bad (`pack_cache.COUNTS` differences)."""
    before = dict(pack_cache.COUNTS)
    engine = Engine.load(saved[0], streams_dir=saved[1], precision=precision)
    return engine, {k: pack_cache.COUNTS[k] - before[k] for k in before}


def _tokens(engine: Engine) -> list[list[int]]:
    cfg = DecodeConfig(mode="ss", max_new_tokens=12, stop_on_eos=False, tree_topk=(2, 2, 1))
    return [engine.generate(ids, cfg).token_ids for ids in prompts(3, seed=5, max_len=30)]


def _packs(folder) -> list[str]:
    return sorted(p for p in os.listdir(folder) if p.endswith(".pack"))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_second_load_packs_nothing_and_decodes_the_same(saved, cache, precision, monkeypatch):
    first, made = _load(saved, precision)
    assert made["packed"] > 0 and made["written"] >= 1 and made["loaded"] == 0
    again, second = _load(saved, precision)
    assert second["packed"] == 0 and second["written"] == 0 and second["loaded"] >= 1
    monkeypatch.setenv("SPECSTREAM_PACK_CACHE", "map")
    mapped, third = _load(saved, precision)
    assert third["packed"] == 0 and third["loaded"] >= 1
    assert hasattr(compat.decoder_layers(mapped.model)[0].mlp.down_proj.q4, "_specstream_mapped")  # the file's pages
    assert again.model.config.specstream_int4 == first.model.config.specstream_int4  # the report, as first made
    monkeypatch.setenv("SPECSTREAM_PACK_CACHE", "0")
    fresh, off = _load(saved, precision)
    assert off["packed"] > 0 and off["loaded"] == 0
    assert _tokens(again) == _tokens(mapped) == _tokens(fresh) == _tokens(first)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other key"])
def test_a_bad_entry_is_rebuilt(saved, cache, damage):
    precision = PRECISIONS[-1]
    reference = _tokens(_load(saved, precision)[0])
    entries = _packs(cache)
    main = max(entries, key=lambda p: os.path.getsize(cache / p))  # the layers' entry (a head's layout is smaller)
    path = str(cache / main)
    if damage == "truncated":
        os.truncate(path, os.path.getsize(path) - 4096)
    elif damage == "garbage":
        with open(path, "r+b") as f:
            f.seek(20)
            f.write(b"\xff" * 64)
    else:  # a whole entry, for another key, under this one's name
        shutil.copyfile(pack_cache.write("f" * 32, {"q4": torch.zeros(64, dtype=torch.uint8)}, {}), path)
    engine, counts = _load(saved, precision)
    assert counts["rebuilt"] >= 1 and counts["packed"] > 0 and counts["written"] >= 1
    assert _tokens(engine) == reference
    assert _load(saved, precision)[1]["packed"] == 0  # rewritten whole: the next load maps it


def test_keys_follow_the_weights_the_build_and_the_request(tmp_path):
    a = save_tiny_model_dir(tmp_path / "a")
    b = save_tiny_model_dir(tmp_path / "b")
    files = lambda d: {"checkpoint": os.path.join(d, "model.safetensors"), "config": os.path.join(d, "config.json")}  # noqa: E731
    asked = {"kind": "int4", "a8": True}
    assert pack_cache.key(files(a), asked) == pack_cache.key(files(a), dict(asked))  # stable
    assert pack_cache.key(files(a), asked) != pack_cache.key(files(a), {**asked, "a8": False})
    assert pack_cache.key(files(a), asked) != pack_cache.key(files(b), asked)  # same bytes, another file's mtime
    from safetensors.torch import load_file, save_file

    weights = load_file(files(a)["checkpoint"])
    stamp = os.stat(files(a)["checkpoint"])
    before = pack_cache.key(files(a), asked)
    name = next(k for k in weights if k.endswith("down_proj.weight"))
    weights[name] = weights[name] + 1.0  # other weights, the same size
    save_file(weights, files(a)["checkpoint"], metadata={"format": "pt"})
    os.utime(files(a)["checkpoint"], ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # even with the mtime kept
    assert os.path.getsize(files(a)["checkpoint"]) == stamp.st_size
    assert pack_cache.key(files(a), asked) != before


def test_writes_are_atomic_and_the_cache_is_bounded(cache):
    t = torch.arange(4096, dtype=torch.int32)
    assert pack_cache.write("a" * 32, {"t": t}, {"n": 1})
    got, meta = pack_cache.read("a" * 32)
    assert torch.equal(got["t"], t) and meta == {"n": 1}

    class Broken(torch.Tensor):
        def contiguous(self, *args, **kwargs):
            raise OSError("disk full")

    assert pack_cache.write("b" * 32, {"t": t, "u": t.as_subclass(Broken)}, {}) is None  # killed mid-write
    assert _packs(cache) == ["a" * 32 + ".pack"] and not [p for p in os.listdir(cache) if p.endswith(".tmp")]
    for name in "cd":
        pack_cache.write(name * 32, {"t": torch.zeros(1 << 18)}, {})  # 1 MiB each
    gone = pack_cache.trim(limit_mb=1.5)
    assert len(_packs(cache)) == 1 and "d" * 32 + ".pack" in _packs(cache) and len(gone) == 2

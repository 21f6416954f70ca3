"""An engine's image: what a later start needs to decode as this engine does, without transformers' modeling code.

A full start (`Engine.load`) imports transformers' modeling modules, whose own imports (torch.distributed, dynamo,
sympy) take most of a one-question command's seconds. Where every decoder layer runs as the kernel's whole-layer
steps (an int4 or int4-a8 engine of Llama's form on the row-invariant kernel, its layouts in the kernel cache), the
modules are only containers for the kernel's weights. After such a start, `write` keeps beside the kernel cache's
layouts:
- what the model is made of besides them (`backends.image_model.capture`: the config's fields, the norms, RoPE's
  table of every position, the attention's shape fields), the eos ids and the tokenizer's class;
- a probe: the outputs of `backends.base.probe` (a prompt, then a speculative step, through every layer), and a chat
  prompt's token ids, as the full engine computed them.

`load` builds the engine from that alone (`image_model.build`: containers holding the kernel cache's 4-bit Linears
and 8-bit head), binds the kernel's layer steps against the probe's outputs (`direct_layers.bind`'s reference), and
keeps the engine only where every output equals the full engine's bit for bit and the tokenizer encodes the prompt to
the same ids; anything else (a changed file, another build, a mismatch) returns None, and the caller starts in full.
An image is keyed by everything its bytes follow from: what was asked (model, streams, precision, settings), the
model's and the stream set's files (the kernel cache's cheap digests), this package's code, the kernel build, and the
versions of torch, transformers and tokenizers. $SPECSTREAM_IMAGE=0 turns images off.
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import json
import os
import shutil
import tempfile
import warnings
from importlib import metadata

from safetensors.torch import load_file, save_file

from specstream_core.backends import image_model
from specstream_core.backends.base import probe
from specstream_core.decoding.drafters.ngram_store import NgramStore
from specstream_core.decoding.engine import Engine
from specstream_core.model import compat, msa
from specstream_core.model.chat import encode_prompt
from specstream_core.model.streams import StreamParams

FORMAT = 1
PROBE_PROMPT = "Name three planets."
KEEP = 8  # images kept, the most recently used (another code version, model or setting makes another)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def enabled() -> bool:
    return (os.environ.get("SPECSTREAM_IMAGE", "").strip().lower() not in ("0", "false", "no", "off")
            and image_model.cache_enabled())


def _files(directory: str | None) -> dict[str, str]:
    if not directory or not os.path.isdir(directory):
        return {}
    return {os.path.basename(p): p for p in sorted(glob.glob(os.path.join(directory, "*"))) if os.path.isfile(p)}


def _code_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(_PACKAGE, "**", "*.py"), recursive=True)):
        with open(path, "rb") as f:
            h.update(path[len(_PACKAGE):].encode() + b"\0" + f.read())
    return h.hexdigest()


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def key(request: dict) -> str:
    """The image's key: what was asked (`request`: base, streams, precision, device, ... as given), the files of the
    base and the stream set (and a converted model's GGUF source), this package's code, the kernel build, versions."""
    files = {f"base/{n}": p for n, p in _files(request["base"]).items()}
    files.update({f"streams/{n}": p for n, p in _files(request.get("streams")).items()})
    marker = files.get("base/specstream-source.json")
    if marker:
        with open(marker) as f:
            source = json.load(f).get("source")
        if source and os.path.isfile(source):
            files["gguf"] = source
    what = {"format": FORMAT, "request": request, "code": _code_digest(), "build": image_model.build_name(),
            "files": {role: image_model.file_digest(path) for role, path in files.items()},
            "env": {k: os.environ.get(k, "") for k in ("SPECSTREAM_KERNEL", "SPECSTREAM_PACK_CACHE")},
            "versions": {n: _version(n) for n in ("torch", "transformers", "tokenizers")}}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def folder_of(image_key: str) -> str:
    return os.path.join(image_model.cache_folder(), "images", image_key)


def request(base: str, streams: str | None, precision: str = "auto", device: str = "cpu", gamma: int = 4,
            n_stream_layers: int | None = None, chat: bool = True, stream_weights: str = "auto") -> dict:
    """What `Engine.load` is asked (a resolved base and stream set: `model.defaults.resolve`), as an image keeps it."""
    return {"base": base, "streams": streams, "precision": precision, "device": device, "gamma": gamma,
            "n_stream_layers": n_stream_layers, "chat": chat, "stream_weights": stream_weights}


def start(asked: dict, image: bool = True) -> tuple[Engine, bool]:
    """(the engine `asked` (`request`) names, whether it started from its image): from the image where there is one
    that reproduces the full engine, else a full start, which leaves an image where the engine can have one. image:
    False for what needs the library's modules (attention capture); only local directories have images."""
    image = image and os.path.isdir(asked["base"]) and (asked["streams"] is None or os.path.isdir(asked["streams"]))
    image_key = _key_or_none(asked) if image and enabled() else None  # once: it reads the files' digests
    engine = load(asked, image_key) if image_key else None
    if engine is not None:
        return engine, True
    engine = Engine.load(asked["base"], asked["streams"], precision=asked["precision"], device=asked["device"],
                         gamma=asked["gamma"], n_stream_layers=asked["n_stream_layers"], chat=asked["chat"],
                         stream_weights=asked["stream_weights"])
    if image_key:
        write(engine, asked, image_key)
    return engine, False


def _key_or_none(asked: dict) -> str | None:
    try:
        return key(asked)
    except OSError:  # a file that cannot be read: no image
        return None


def kept(asked: dict) -> bool:
    """Whether an image of what `asked` names is there (it may still be found stale when loaded)."""
    image_key = _key_or_none(asked) if enabled() else None
    return bool(image_key) and os.path.isfile(os.path.join(folder_of(image_key), "image.json"))


def started_from_image(engine: Engine) -> bool:
    return isinstance(engine.model, image_model.ImageCausalLM)


def ineligible(engine: Engine) -> str | None:
    """Why `engine` cannot be kept as an image, or None."""
    return image_model.ineligible(engine.model, engine.precision, engine.backend.name)


def write(engine: Engine, request: dict, image_key: str | None = None) -> str | None:
    """Keep `engine` (just loaded in full, as `request` asked) as an image; returns its folder, or None where the engine
    has none (`ineligible`) or images are off. A folder is written whole or not at all."""
    if not enabled() or ineligible(engine) is not None or (engine.streams is not None and not request["streams"]):
        return None  # (fresh streams are made anew at each start: nothing to keep)
    tensors, fields = image_model.capture(engine.model)
    reference = probe(engine.backend, msa.forward)
    tensors.update({f"probe.{i}": t.contiguous() for i, t in enumerate(reference)})
    meta = {"format": FORMAT, "request": request, "model": fields, "name": engine.name, "precision": engine.precision,
            "stream_weights": engine.stream_weights, "eos": sorted(engine.eos_ids),
            "tokenizer": [type(engine.tokenizer).__module__, type(engine.tokenizer).__name__],
            "probe_ids": engine.encode(PROBE_PROMPT), "probe_count": len(reference)}
    try:  # a cache folder that cannot be written: no image, nothing else changes
        target = folder_of(image_key or key(request))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".writing-", dir=os.path.dirname(target))
    except OSError:
        return None
    try:
        save_file(tensors, os.path.join(staging, "image.safetensors"))
        with open(os.path.join(staging, "image.json"), "w") as f:
            json.dump(meta, f)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return None
    _trim(os.path.dirname(target))
    return target


def _trim(folder: str) -> None:
    """Keep the KEEP most recently used images (`load` touches the one it starts from)."""
    images = [p for p in glob.glob(os.path.join(folder, "*")) if os.path.isdir(p) and not
              os.path.basename(p).startswith(".")]
    for path in sorted(images, key=os.path.getmtime, reverse=True)[KEEP:]:
        shutil.rmtree(path, ignore_errors=True)


def load(request: dict, image_key: str | None = None) -> Engine | None:
    """The engine `request` asks for, from its image, where there is one and it reproduces the full engine's probe
    bit for bit; else None (start in full)."""
    if not enabled():
        return None
    try:
        target = folder_of(image_key or key(request))
        with open(os.path.join(target, "image.json")) as f:
            meta = json.load(f)
        tensors = load_file(os.path.join(target, "image.safetensors"))
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT or meta.get("request") != request:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a probe that differs says so by leaving the steps unbound
        engine = _engine(meta, tensors, request)
    if engine is None or compat.layer_path(engine.model)["path"] != "kernel":
        return None
    try:
        os.utime(target)  # used: kept longest by `_trim`
    except OSError:
        pass
    return engine


def _engine(meta: dict, tensors: dict, request: dict) -> Engine | None:
    model = image_model.build(meta["model"], tensors, meta["eos"])
    if model is None:
        return None
    model.probe_reference = [tensors[f"probe.{i}"] for i in range(meta["probe_count"])]  # what `bind` compares with
    streams = ngrams = None
    if request.get("streams"):
        streams = StreamParams.load(request["streams"], model)
        ngrams = NgramStore.load(request["streams"])
    module, name = meta["tokenizer"]
    tokenizer = getattr(importlib.import_module(module), name).from_pretrained(request["base"])
    if encode_prompt(tokenizer, PROBE_PROMPT, request["chat"]) != meta["probe_ids"]:
        return None
    engine = Engine(model, tokenizer, streams, name=meta["name"], precision=meta["precision"], chat=request["chat"],
                    ngrams=ngrams, stream_weights=request["stream_weights"])
    return engine if engine.stream_weights == meta["stream_weights"] else None

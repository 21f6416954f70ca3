"""Which models the lab offers, and one loaded engine per (model, stream mode).

Visitors pick a model by name; paths and hub ids come only from the host:
  - the default model, SmolLM2-135M-Instruct (`specstream_core.default_model`), with the stream sets
    in assets/smollm2/ when present;
  - SPECSTREAM_MODELS: JSON, or a path to a JSON file, mapping name -> spec:
        {"tiny": {"base": "/models/tiny", "streams": "/models/tiny/streams", "precision": "fp32"},
         "qwen-nf4": {"base": "Qwen/Qwen2.5-0.5B", "streams": {"lossless": "/adapters/qwen-ll"},
                      "precision": "nf4", "device": "cuda"}}
    `streams` is a directory (its own config says lossless or shared) or {mode: directory};
    without streams the model runs with fresh, untrained streams (`gamma`, default 4).
Engines are cached per (name, mode) behind a lock; each comes with its own step lock, because the
model (and its stream row switch) is shared by every session.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field

from specstream_core import defaults
from specstream_core.errors import SpecstreamError

log = logging.getLogger("specstream.lab")
MODES = ("lossless", "shared")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    base: str
    streams: dict = field(default_factory=dict)  # mode -> directory
    precision: str = "fp32"
    device: str = ""
    gamma: int = 4

    @property
    def modes(self) -> list[str]:
        return [m for m in MODES if m in self.streams] or ["lossless"]


def _stream_mode(directory: str) -> str:
    from specstream_core.streams import read_stream_config

    return read_stream_config(directory).mode


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
        if isinstance(entry, str):
            entry = {"base": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("base"), str):
            raise SpecstreamError(f"SPECSTREAM_MODELS[{name!r}] needs a 'base' (directory or hub id)")
        streams = entry.get("streams") or {}
        if isinstance(streams, str):
            streams = {_stream_mode(streams): streams}
        if not isinstance(streams, dict) or any(m not in MODES for m in streams):
            raise SpecstreamError(f"SPECSTREAM_MODELS[{name!r}].streams must be a directory or {{lossless|shared: dir}}")
        specs[str(name)] = ModelSpec(str(name), entry["base"], dict(streams), str(entry.get("precision", "fp32")),
                                     str(entry.get("device", "")), int(entry.get("gamma", 4)))
    return specs


def bundled_spec() -> ModelSpec | None:
    """The default model (SmolLM2-135M-Instruct, converted once from its package) with the stream sets
    the project trained for it; None when it cannot be found (then the allow-list alone is offered)."""
    from specstream_core import default_model

    try:
        base = default_model.resolve_default_base(progress=log.info)
    except SpecstreamError as exc:
        log.error("the default model is unavailable: %s", exc)
        return None
    streams = {m: d for m in MODES if (d := defaults.default_streams(m)) is not None}
    return ModelSpec(default_model.NAME, base, streams)


def available_specs(env=None) -> dict[str, ModelSpec]:
    """Bundled model first, then the host's allow-list (SPECSTREAM_DEFAULT_MODEL may name another to put
    first). A broken allow-list is logged, not fatal."""
    env = os.environ if env is None else env
    specs = {}
    bundled = bundled_spec()
    if bundled is not None:
        specs[bundled.name] = bundled
    try:
        specs.update(parse_specs(env.get("SPECSTREAM_MODELS", "")))
    except SpecstreamError as exc:
        log.error("ignoring SPECSTREAM_MODELS: %s", exc)
    first = env.get("SPECSTREAM_DEFAULT_MODEL", "")
    if first in specs:  # the host may pick which model the page opens with
        specs = {first: specs[first], **{k: v for k, v in specs.items() if k != first}}
    return specs


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        return "cpu"


def gamma_of(spec: ModelSpec, mode: str) -> int:
    directory = spec.streams.get(mode)
    if directory is None:
        return spec.gamma
    from specstream_core.streams import read_stream_config

    return read_stream_config(directory).gamma


class EngineCache:
    """(model name, mode) -> (engine, step lock), loaded once and warmed up."""

    def __init__(self, specs: dict[str, ModelSpec]):
        self.specs = specs
        self._engines: dict[tuple[str, str], tuple[object, threading.Lock]] = {}
        self._load_lock = threading.Lock()

    def get(self, name: str, mode: str):
        if name not in self.specs:
            raise SpecstreamError(f"unknown model {name!r}; choose one of {', '.join(self.specs) or '(none)'}")
        spec = self.specs[name]
        if mode not in spec.modes:
            raise SpecstreamError(f"model {name!r} has no {mode} streams; choose {' or '.join(spec.modes)}")
        key = (name, mode)
        with self._load_lock:
            if key not in self._engines:
                self._engines[key] = (self._load(spec, mode), threading.Lock())
            return self._engines[key]

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
        ids = engine.encode("Hello")  # warm-up: first passes pay one-off allocation costs
        for m in ("ar", "ss"):
            engine.generate(ids, DecodeConfig(mode=m, max_new_tokens=4, stop_on_eos=False))
        return engine

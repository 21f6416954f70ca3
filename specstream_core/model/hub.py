"""Stream sets on the Hugging Face Hub: `from_pretrained`, `save_pretrained`, `push_to_hub` and a model card.

    streams = StreamParams.from_pretrained("user/smollm2-streams", model)   # or a local directory
    streams.save_pretrained("out/streams", training_data="chat corpus, self-distilled")
    streams.push_to_hub("user/smollm2-streams")

A stream set on the hub is the directory `StreamParams.save` writes (`streams_config.json`,
`streams.safetensors`, `lora/` in shared mode) plus a README.md model card. `Engine.load(base, streams_dir)`
and `--streams` accept a hub id too (`local_dir`). Thin wrappers over huggingface_hub; nothing here runs
at import time, and nothing touches the network unless given a hub id that is not a local directory.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from specstream_core.errors import SpecstreamError
from specstream_core.model.lora import apply_shared_lora
from specstream_core.model.stream_config import LORA_DIR, read_stream_config

FILES = ("streams_config.json", "streams.safetensors", "lora/*", "README.md", "train_log.json")
CARD_NAME = "README.md"


def _looks_like_repo_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~")) and "\\" not in name


def local_dir(name_or_path: str, revision: str | None = None, token: str | bool | None = None,
              cache_dir: str | None = None) -> str:
    """A local directory holding the stream set: the path itself, or a hub repo's snapshot (downloaded once,
    then read from the cache; HF_HUB_OFFLINE=1 reads the cache only)."""
    if os.path.isdir(name_or_path) or not _looks_like_repo_id(name_or_path):
        return name_or_path  # a missing local path is reported by the loader, as before
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name_or_path, revision=revision, token=token, cache_dir=cache_dir,
                                 allow_patterns=list(FILES))
    except Exception as exc:  # noqa: BLE001 - offline, no such repo, no access: one clear line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecstreamError(f"stream directory not found: {name_or_path} (not a local directory, and fetching "
                              f"it from the hub failed: {reason})") from None


def from_pretrained(cls, name_or_path: str, model, revision: str | None = None, token: str | bool | None = None,
                    cache_dir: str | None = None):
    """Load a stream set from a local directory or a hub repo and attach it to `model`.

    Shared-mode sets carry a LoRA adapter for the base weights: it is merged into `model` in place."""
    directory = local_dir(name_or_path, revision=revision, token=token, cache_dir=cache_dir)
    if read_stream_config(directory).mode == "shared":
        merged = apply_shared_lora(model, directory)
        if merged is not model:  # pragma: no cover - peft's merge_and_unload returns the base module itself
            raise SpecstreamError("could not merge the shared-mode LoRA into the model in place; "
                                  "use Engine.load(base, streams_dir) instead")
    return cls.load(directory, model)


# ---- the model card ---------------------------------------------------------------------------------------
CARD_TEMPLATE = """---
library_name: specstream
base_model: {base_model}
tags:
- speculative-decoding
- speculative-streaming
- specstream
---

# Speculative Streaming stream set for `{base_model}`

Speculative streams for [Speculative Streaming](https://arxiv.org/abs/2402.11131): the model drafts
{gamma} future tokens per step from its own top {n_stream_layers} layers, with no separate draft model,
and verifies them in the same forward pass. {mode_line}

| setting | value |
|---|---|
| base model | `{base_model}` |
| streams (γ) | {gamma} |
| multi-stream layers (Ns) | {n_stream_layers} of {num_layers} |
| mode | {mode} |
| draft vocabulary | {draft_vocab} |
| stream adapter rank / pruning rank | {adapter_rank} / {prune_rank} |
| extra parameters | {extra_params} |
| training steps | {trained_steps} |
| training data | {training_data} |
| eval τ (accepted tokens per step, estimate) | {eval_tau} |
| recommended draft tree | {decode} |

## Use it

```bash
pip install .          # in a checkout of the specstream repository (adds the `specstream` command)
specstream generate --base {base_model} --streams {repo_id} --prompt "Write a haiku about the sea."
specstream generate-batch --base {base_model} --streams {repo_id} --input prompts.jsonl --output out.jsonl
```

```python
from specstream_core import DecodeConfig, Engine

engine = Engine.load("{base_model}", "{repo_id}")
print(engine.generate("Write a haiku about the sea.", DecodeConfig(mode="ss", max_new_tokens=64)).text)
```

With transformers alone (the repository's `custom_generate/` folder):

```python
model.generate(**inputs, custom_generate="<dir or repo of custom_generate>", trust_remote_code=True,
               streams="{repo_id}", max_new_tokens=64)
```

Files: `streams_config.json` (settings), `streams.safetensors` (the stream parameters){lora_files}.
"""


def _fmt(value, missing: str = "not recorded") -> str:
    if value is None or value == "":
        return missing
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def model_card(params, repo_id: str | None = None, base_model: str | None = None,
               training_data: str | None = None, eval_tau: float | None = None) -> str:
    """README.md text for a stream set: the template filled from its config and what training recorded."""
    cfg = params.cfg
    extra = cfg.extra or {}
    if base_model is None:
        attached = getattr(params, "_attached_to", None)
        base_model = getattr(attached, "name_or_path", None) or extra.get("base_model")
    if eval_tau is None:
        eval_tau = (extra.get("eval") or {}).get("tau_estimate")
    if training_data is None:
        training_data = extra.get("training_data") or extra.get("targets")
    decode = extra.get("decode")
    shared = cfg.mode == "shared"
    return CARD_TEMPLATE.format(
        base_model=base_model or "unknown", repo_id=repo_id or "<this repo or directory>",
        gamma=cfg.gamma, n_stream_layers=cfg.n_stream_layers, num_layers=cfg.num_layers or "?",
        mode=cfg.mode, draft_vocab=f"{cfg.draft_vocab_size} most frequent tokens" if cfg.draft_vocab_size
        else "the whole vocabulary",
        mode_line=("Shared mode: a LoRA adapter (`lora/`) changes the base weights too, so output follows the "
                   "adapted model." if shared else
                   "Lossless mode: the base model's own rows are untouched, so greedy output is exactly the "
                   "base model's."),
        adapter_rank=cfg.adapter_rank, prune_rank=cfg.prune_rank, extra_params=f"{params.extra_parameter_count():,}",
        trained_steps=cfg.trained_steps or extra.get("steps") or "not recorded",
        training_data=_fmt(training_data), eval_tau=_fmt(eval_tau),
        decode=_fmt(json.dumps(decode) if decode else None, "the engine's default"),
        lora_files=", `lora/` (the shared-mode adapter)" if shared else "")


def save_pretrained(params, directory: str, repo_id: str | None = None, base_model: str | None = None,
                    training_data: str | None = None, eval_tau: float | None = None,
                    source_dir: str | None = None) -> str:
    """`params.save(directory)` plus a README.md model card; a shared-mode set's `lora/` is copied from
    `source_dir` (the directory it was loaded from or trained into). Returns the directory."""
    extra = {k: v for k, v in (("base_model", base_model), ("training_data", training_data)) if v}
    params.save(directory, extra=extra or None)
    if params.cfg.mode == "shared":
        lora = os.path.join(source_dir or "", LORA_DIR)
        if not source_dir or not os.path.isdir(lora):
            raise SpecstreamError("a shared-mode stream set needs its LoRA adapter: pass source_dir= (the "
                                  "directory holding lora/)")
        if os.path.abspath(lora) != os.path.abspath(os.path.join(directory, LORA_DIR)):
            shutil.copytree(lora, os.path.join(directory, LORA_DIR), dirs_exist_ok=True)
    card = model_card(params, repo_id=repo_id, base_model=base_model, training_data=training_data,
                      eval_tau=eval_tau)
    with open(os.path.join(directory, CARD_NAME), "w", encoding="utf-8") as f:
        f.write(card)
    return directory


def push_to_hub(params, repo_id: str, private: bool | None = None, token: str | bool | None = None,
                commit_message: str = "Upload speculative streams", revision: str | None = None, **card) -> str:
    """Save the stream set with its card into a temporary directory and upload it as one commit.
    Returns the commit's URL. `card` takes save_pretrained's keywords (base_model, training_data, ...)."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="specstream-push-") as tmp:
        save_pretrained(params, tmp, repo_id=repo_id, **card)
        api.create_repo(repo_id, private=private, exist_ok=True)
        info = api.upload_folder(folder_path=tmp, repo_id=repo_id, commit_message=commit_message,
                                 revision=revision)
    return str(getattr(info, "commit_url", info))

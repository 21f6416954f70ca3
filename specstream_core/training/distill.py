"""Self-distillation targets: the base model's own greedy answers to the training prompts.

Lossless streams are accepted when they predict what the *base model* will say, not what the data
says. Training them on the base's own greedy continuations (as Medusa-2 and EAGLE do) removes the
mismatch between reference text and the base's choices; since greedy decoding is a deterministic
function of the prompt, these targets are also far more predictable than human text.

Answers are generated in batches with transformers' `generate` (left padding); a cap on new tokens
bounds the cost. Shown with a progress bar; results can be cached as JSONL so a rebuild reuses them.

The cache: `FILE` holds one `{"prompt_ids": [...], "answer_ids": [...]}` line per answer (appended as
batches finish); `FILE.meta.json` says what made them — the model's fingerprint and name, the
tokenizer's fingerprint and max_new_tokens. Reusing the cache with another model or other settings is an
error (use another file). A cache without the sidecar (written by an older version) is adopted on first
use: the sidecar is written for the current model and settings, with a note. A half-written last line (a
killed run) is ignored, and cut off before new answers are appended; any other bad line is an error.
Appends take an exclusive lock on the file, so runs sharing one cache take turns. A cache named `*.gz` is
read and appended compressed: each batch is one whole gzip member, and a member cut short by a kill is
dropped the same way; its sidecar is `FILE` without `.gz` plus `.meta.json`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import zlib

import torch

from specstream_core.training.checkpoint import model_fingerprint
from specstream_core.errors import SpecstreamError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: appends are not serialized
    fcntl = None

META_SUFFIX = ".meta.json"
CACHE_FORMAT = "specstream-distill-cache"


def greedy_answers(model, tokenizer, prompts: list[list[int]], max_new_tokens: int = 128,
                   batch_size: int = 32, progress: bool = True, on_batch=None) -> list[list[int]]:
    """The base model's greedy continuation of each prompt (ids), ending with EOS when it stops.

    `on_batch(prompts, answers)` is called after every batch (to save work as it is done)."""
    from tqdm.auto import tqdm

    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    if pad is None:
        raise SpecstreamError("self-distillation needs a pad or EOS token in the tokenizer")
    device = next(model.parameters()).device
    # similar lengths share a batch, sorted within chunks so that a run stopped early has covered a
    # prefix of the input (a balanced one, when the input interleaves categories)
    chunk = batch_size * 8
    order = [i for lo in range(0, len(prompts), chunk)
             for i in sorted(range(lo, min(lo + chunk, len(prompts))), key=lambda i: len(prompts[i]))]
    answers: list[list[int] | None] = [None] * len(prompts)
    bar = tqdm(total=len(prompts), disable=not progress, desc="self-distill", unit="answer")
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width = max(len(prompts[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            attn = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):  # left padding
                ids[row, width - len(prompts[i]):] = torch.tensor(prompts[i])
                attn[row, width - len(prompts[i]):] = 1
            out = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=eos)
            for row, i in enumerate(idx):
                new = out[row, width:].tolist()
                if eos is not None and eos in new:
                    new = new[: new.index(eos) + 1]
                answers[i] = new
            if on_batch is not None:
                on_batch([prompts[i] for i in idx], [answers[i] for i in idx])
            bar.update(len(idx))
    bar.close()
    return answers  # type: ignore[return-value]


def distilled_pairs(model, tokenizer, pairs: list[tuple[list[int], list[int]]], max_new_tokens: int = 128,
                    batch_size: int = 32, cache_file: str | None = None,
                    progress: bool = True) -> list[tuple[list[int], list[int]]]:
    """Replace each (prompt, answer) pair's answer by the base model's greedy answer.

    With `cache_file`, answers already generated for the same prompt ids are reused and new ones
    appended, so an interrupted or repeated build does not redo them.
    """
    cached: dict[str, list[int]] = {}
    if cache_file:
        cached = read_cache(cache_file)
        tie_cache(cache_file, cache_meta(model, tokenizer, max_new_tokens), has_records=bool(cached))
    todo = [p for p, _ in pairs if p and _key(p) not in cached]
    todo = list({_key(p): p for p in todo}.values())
    appender = _Appender(cache_file) if cache_file and todo else None

    def keep(batch_prompts, batch_answers):
        for p, a in zip(batch_prompts, batch_answers):
            cached[_key(p)] = a
        if appender is not None:
            appender.write("".join(json.dumps({"prompt_ids": p, "answer_ids": a}) + "\n"
                                   for p, a in zip(batch_prompts, batch_answers)))

    if todo:
        try:
            greedy_answers(model, tokenizer, todo, max_new_tokens, batch_size, progress, on_batch=keep)
        finally:
            if appender is not None:
                appender.close()
    # pairs without a prompt (plain text) keep their text: there is nothing to continue
    return [(p, cached[_key(p)]) if p else (p, a) for p, a in pairs]


def _key(ids: list[int]) -> str:
    return ",".join(map(str, ids))


# ---- the cache file ---------------------------------------------------------------------------------
def read_cache(path: str) -> dict[str, list[int]]:
    """prompt key -> answer ids; a half-written last line (no newline: a killed run) is ignored. A path
    ending in .gz is read compressed (the shipped copy, assets/smollm2/distill/answers.jsonl.gz)."""
    cached: dict[str, list[int]] = {}
    if not os.path.isfile(path):
        return cached
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SpecstreamError(f"{path}: cannot read it ({exc})") from None
    if path.endswith(".gz"):
        data, whole = whole_members(data)
        if whole < os.path.getsize(path):
            print(f"note: {path} ends in a cut compressed block (an interrupted run); it is ignored and will be "
                  f"replaced", file=sys.stderr)
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: b"" when the file ends in one
    for n, raw in enumerate(lines + [tail], 1):
        if not raw.strip():
            continue
        row = _record(raw)
        if row is None:
            if n == len(lines) + 1:  # the unterminated last line
                print(f"note: {path} ends in a half-written line (an interrupted run); it is ignored and will be "
                      f"replaced", file=sys.stderr)
                continue
            raise SpecstreamError(f"{path}:{n}: not a self-distillation record; delete the file") from None
        cached[_key(row["prompt_ids"])] = row["answer_ids"]
    return cached


def whole_members(data: bytes) -> tuple[bytes, int]:
    """The text of a gzip file's complete members, and the number of bytes they span (what follows is a
    member cut short by a killed append, or not gzip at all)."""
    texts, pos = [], 0
    while pos < len(data):
        member = zlib.decompressobj(wbits=31)
        try:
            text = member.decompress(data[pos:])
        except zlib.error:
            break
        if not member.eof:
            break
        texts.append(text)
        pos = len(data) - len(member.unused_data)
    return b"".join(texts), pos


def meta_path(path: str) -> str:
    """The sidecar of a cache: `answers.jsonl.meta.json` for `answers.jsonl` and `answers.jsonl.gz` alike."""
    return path.removesuffix(".gz") + META_SUFFIX


def _record(raw: bytes) -> dict | None:
    try:
        row = json.loads(raw)
        row = {"prompt_ids": [int(t) for t in row["prompt_ids"]], "answer_ids": [int(t) for t in row["answer_ids"]]}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        return None
    return row


def cache_meta(model, tokenizer, max_new_tokens: int) -> dict:
    """What the cached answers depend on."""
    return {"format": CACHE_FORMAT, "version": 1, "model": model_fingerprint(model),
            "model_name": str(getattr(model, "name_or_path", "") or ""),
            "tokenizer": tokenizer_fingerprint(tokenizer), "max_new_tokens": int(max_new_tokens)}


def tokenizer_fingerprint(tokenizer) -> str:
    h = hashlib.sha256(f"{tokenizer.eos_token_id}:{tokenizer.pad_token_id};".encode())
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if callable(get_vocab):
        h.update(json.dumps(sorted(get_vocab().items())).encode())
    return h.hexdigest()[:16]


def tie_cache(path: str, meta: dict, has_records: bool) -> None:
    """Check the cache's sidecar against `meta`; write it for a new cache or adopt a cache without one."""
    sidecar = meta_path(path)
    if os.path.isfile(sidecar) and has_records:
        try:
            with open(sidecar) as f:
                saved = json.load(f)
            if not isinstance(saved, dict) or saved.get("format") != CACHE_FORMAT:
                raise ValueError("not a distillation-cache sidecar")
        except (OSError, ValueError) as exc:
            raise SpecstreamError(f"{sidecar} is unreadable ({exc}); delete it to adopt {path} for this model") from None
        diffs = []
        if saved.get("model") != meta["model"]:
            diffs.append(f"model {saved.get('model_name') or '?'!r} (fingerprint {saved.get('model')}) -> "
                         f"{meta['model_name'] or '?'!r} (fingerprint {meta['model']})")
        for key in ("tokenizer", "max_new_tokens"):
            if saved.get(key) != meta[key]:
                diffs.append(f"{key} {saved.get(key)!r} -> {meta[key]!r}")
        if diffs:
            raise SpecstreamError(f"distillation cache {path} holds answers of a different " + "; ".join(diffs) +
                                  f": use another cache file for this model and settings, or delete {path} and "
                                  f"{sidecar} to generate them again")
        return
    if has_records:
        print(f"note: {path} does not say which model wrote it (a cache from an older version); adopting it for "
              f"model {meta['model_name'] or '?'!r} (fingerprint {meta['model']}), max_new_tokens "
              f"{meta['max_new_tokens']} in {sidecar}", file=sys.stderr)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = sidecar + ".tmp"
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(tmp, sidecar)


class _Appender:
    """Appends whole lines to the cache under an exclusive lock, after cutting off a half-written last line."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.file = open(path, "a+b")
        if fcntl is not None:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX)  # waits for another run appending to the same cache
        self.file.seek(0)
        data = self.file.read()
        self.compressed = path.endswith(".gz")
        if self.compressed:
            text, whole = whole_members(data)
            self.file.truncate(whole)  # drop a member cut short by a kill
            if text and not text.endswith(b"\n"):
                self.write("\n")
        else:
            tail = data[data.rfind(b"\n") + 1:]
            if tail.strip() and _record(tail) is not None:
                self.file.write(b"\n")  # a whole record that lacks its newline
            elif tail:
                self.file.truncate(len(data) - len(tail))
        self.file.flush()

    def write(self, text: str) -> None:
        """One write per batch, then flushed: whole lines (or one whole gzip member) unless killed mid-write."""
        data = text.encode()
        self.file.write(gzip.compress(data) if self.compressed else data)
        self.file.flush()

    def close(self) -> None:
        self.file.close()

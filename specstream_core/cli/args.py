"""Helpers the commands share (each command imports these, never another command): the model and
decoding arguments, the engine they describe, output-file checks, the training commands' shared flags and
config (`add_training_flags`, `training_config_from`), training examples and a stream set's recommended
decode settings."""

from __future__ import annotations

import argparse
import json
import os
import warnings
from dataclasses import fields
from typing import TYPE_CHECKING

from specstream_core.decoding.config import DecodeConfig, parse_topk
from specstream_core.errors import SpecstreamError
from specstream_core.io.jsonl import read_objects
from specstream_core.model import defaults
from specstream_core.model.stream_config import check_gamma
from specstream_core.model.precisions import PRECISIONS, QUANTIZE_CHOICES, precision_from_flags
from specstream_core.cli.vocab import Deprecated, add_tree_topk

if TYPE_CHECKING:  # the training stack loads in the training commands only, not on `generate`'s path
    from specstream_core.training.config import RunConfig


def _old_quantize(value: str) -> str | None:
    """--quantize's precision (None for `none`: the --precision/--dtype given, as before)."""
    if value not in QUANTIZE_CHOICES:
        raise ValueError(f"unknown name {value!r}; valid: {', '.join(QUANTIZE_CHOICES)}")
    return None if value == "none" else precision_from_flags(value, "auto")


def _old_dtype(value: str) -> str:
    if value not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(f"unknown name {value!r}; valid: auto, fp32, bf16, fp16")
    return value


def add_model_arguments(p) -> None:
    """Which model and streams to load, and how (shared with generate-batch)."""
    p.add_argument("--base", help="base model: local directory or hub id (default: SmolLM2-135M-Instruct, "
                                  "see `specstream_core/model/default_model.py` for where it is found)")
    p.add_argument("--streams", help="stream-adapter directory (default with --base: fresh streams)")
    p.add_argument("--gamma", type=int, default=4, help="number of fresh streams (ignored with --streams)")
    p.add_argument("--n-stream-layers", type=int, default=None, help="Ns for fresh streams (default: N/4)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="what the Linears compute in: auto (on the row-invariant CPU kernel int4-a8 for a "
                        "GGUF-converted base such as the default model, its fastest measured (its file's 4-bit groups "
                        "against 8-bit activations, as llama.cpp computes; int4 keeps fp32 activations and is the fp32 "
                        "model exactly); for any other base the checkpoint's own dtype, so greedy output equals "
                        "transformers' greedy generate; `generate` names the faster choices), fp32, bf16, fp16 (CUDA "
                        "only), nf4, int8, int4 or int4-a8; the same names as the benchmarks' --precisions")
    # the old flags (--quantize none|nf4|int8|int4|int4-a8, --dtype auto|fp32|bf16|fp16) still work
    p.add_argument("--quantize", dest="precision", action=Deprecated, new="--precision", convert=_old_quantize)
    p.add_argument("--dtype", dest="precision", action=Deprecated, new="--precision", convert=_old_dtype)
    p.add_argument("--stream-weights", choices=("auto", "same", "int4-a8"), default="auto",
                   help="what the multi-stream layers' stream rows (drafts only) are computed with: auto (default: 4-bit "
                        "copies where a pass has 8 or more stream rows on fp32 or bf16 Linears of the row-invariant "
                        "kernel, and an 8-bit draft head), same (the layers' own weights) or int4-a8; output never "
                        "changes (kernels/draft_weights.py)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--raw", action="store_true",
                   help="send the prompt text as it is (default: wrap it in the model's chat template, if it has one)")


def add_decode_arguments(p) -> None:
    """Decoding settings, turned into a DecodeConfig by build_config (shared with generate-batch)."""
    p.add_argument("--mode", choices=("ar", "ss"), default="ss", help="ar: plain decoding; ss: speculative streaming")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--sample-top-k", type=int, default=0, help="sampling: keep the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="sampling: nucleus mass (1 = off)")
    p.add_argument("--seed", type=int, default=None, help="sampling: the random seed (default: a fresh one each run)")
    add_tree_topk(p, "draft-tree candidates per depth, e.g. 4,3,2,1 (default: what the stream set records as "
                     "fastest)")
    p.add_argument("--prune-threshold", type=float, default=None,
                   help="drop tree branches below this transition probability (default: the stream set's)")
    p.add_argument("--node-budget", type=int, default=None, help="most tree nodes per step (default: the stream set's)")
    p.add_argument("--lookup", type=int, default=None,
                   help="graft up to this many prompt-lookup tokens (copied from where the context repeats) onto "
                        "the streams' tree; 0 = streams only (default: the stream set's)")
    p.add_argument("--ngrams", action=argparse.BooleanOptionalAction, default=None,
                   help="where the context has no copy longer than a token, copy from the stream set's n-gram store "
                        "(its base's own answers; ngrams.npz) instead (default: the stream set's choice)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=0,
                   help="never repeat an n-gram of this size already in prompt or output (0 = off; as transformers)")
    p.add_argument("--repetition-penalty", type=float, default=1.0,
                   help="divide logits of tokens already seen by this (1 = off, 1.2 is typical; as transformers)")


def build_config(args) -> DecodeConfig:
    layers = ()
    attention = getattr(args, "attention_layers", "")
    if attention:
        try:
            layers = tuple(int(x) for x in attention.split(","))
        except ValueError:
            raise SpecstreamError(f"--attention-layers must be comma-separated integers, got {attention!r}") from None
    draft = {k: v for k, v in (("tree_topk", parse_topk(args.topk) if args.topk else None),
                               ("prune_threshold", args.prune_threshold), ("node_budget", args.node_budget),
                               ("lookup", args.lookup), ("ngrams", getattr(args, "ngrams", None)))
             if v is not None}
    return DecodeConfig(mode=args.mode, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        top_k=args.sample_top_k, top_p=args.top_p, seed=args.seed, **draft,
                        stop_strings=tuple(args.stop), trace=bool(getattr(args, "trace", None)),
                        attention_layers=layers, no_repeat_ngram_size=args.no_repeat_ngram_size,
                        repetition_penalty=args.repetition_penalty)


def check_model_arguments(args) -> None:
    check_gamma(args.gamma, "--gamma")


def load_engine(args, quiet: bool = False, image: bool = False):
    """The engine named by --base/--streams (the default model when none is named). image: start from the engine's
    image where it has one that reproduces the full engine (`decoding.engine_image`: no transformers modeling
    imports), and leave one after a full start; for commands whose steps all run on the kernel's layer steps."""
    from specstream_core.decoding import engine_image

    base, streams = defaults.resolve(args.base, args.streams)
    asked = engine_image.request(base, streams, args.precision, args.device, args.gamma, args.n_stream_layers,
                                 chat=not getattr(args, "raw", False),
                                 stream_weights=getattr(args, "stream_weights", "auto"))
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        return engine_image.start(asked, image)[0]


def write_text(path: str, text: str) -> None:
    """Write a command's output file, making its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def check_output_file(path: str, flag: str) -> None:
    """A clear error now, rather than after the work is done, when `path` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise SpecstreamError(f"{flag} {path} is a directory; give a file name")
    if not os.path.isdir(folder):
        raise SpecstreamError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise SpecstreamError(f"{flag} {path}: not writable")


def eos_ids(tokenizer) -> list[int]:
    """The ids `load_examples` closes every answer with: an answer of only these has no text (no reference)."""
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def load_examples(data: str, tokenizer, per_category: int, split: str,
                  chat: bool = True) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + EOS) pairs; the loss is taken on answers only.

    data: 'chat' (the chat prompt corpus, `prompts`), 'tasks' (the old templated suite), or a JSONL file of {"text"} or {"prompt", "completion"}
    lines (a `prompts` corpus file: {"prompt", "reference"}; with --distill the answer may be missing).
    A file's last 5 % is its eval split unless a separate eval file is given. Prompts are wrapped in the
    tokenizer's chat template (when it has one) unless `chat` is False."""
    from specstream_core.model.chat import encode_prompt

    eos = eos_ids(tokenizer)
    if data == "tasks":
        from specstream_core.tasks import load_split

        rows = [(ex["prompt"], ex["reference"]) for ex in load_split(split, n=per_category)]
    elif data == "chat":  # the chat prompt corpus; answers come from --distill (instruct has no reference)
        from specstream_core.tasks.corpus import load_corpus

        records = load_corpus("eval" if split == "eval" else "train", n=per_category or None)
        rows = [(r["prompt"], r["reference"] or "") for r in records]
    else:
        rows = read_jsonl_examples(data)
        if split == "eval":
            rows = rows[-max(1, len(rows) // 20):]
        elif split == "train":
            rows = rows[: len(rows) - max(1, len(rows) // 20)] if len(rows) > 20 else rows
    pairs = []
    for prompt, answer in rows:
        if not prompt:
            pairs.append(([], tokenizer(answer, add_special_tokens=True)["input_ids"] + eos))
        elif chat:
            pairs.append((encode_prompt(tokenizer, prompt, True),
                          (tokenizer(answer, add_special_tokens=False)["input_ids"] if answer else []) + eos))
        else:
            full = tokenizer(prompt + answer, add_special_tokens=True)["input_ids"]
            cut = len(tokenizer(prompt, add_special_tokens=True)["input_ids"])
            pairs.append((full[:cut], full[cut:] + eos))
    return pairs


# the flag of each setting every trainer shares (`training.config.RunConfig`): field -> (type, help)
TRAINING_FLAGS = {
    "steps": (int, "optimizer steps"),
    "minutes": (float, "stop after this many minutes (0 = no limit)"),
    "batch_size": (int, "sequences per step"),
    "seq_len": (int, "tokens per training row"),
    "lr": (float, "peak learning rate"),
    "warmup": (int, "linear warm-up steps (then linear decay)"),
    "seed": (int, "initial tensors and the order of training batches"),
    "log_every": (int, "steps between log records"),
    "checkpoint_every": (int, "steps between checkpoints for --resume (0 = only when the time budget ends)"),
}


def add_training_flags(p, **defaults) -> None:
    """The flags of the settings every trainer shares, with this command's `defaults` where they differ from
    `RunConfig`'s, and where the run happens (--device, --threads, --resume). `training_config_from` reads them."""
    from specstream_core.training.config import RunConfig

    base = {f.name: f.default for f in fields(RunConfig)}
    unknown = sorted(set(defaults) - set(base))
    if unknown:
        raise ValueError(f"not a shared training setting: {unknown}")
    for name, (kind, text) in TRAINING_FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=defaults.get(name, base[name]), help=text)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch default)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint (an error when there is "
                   "none, or when it was made with another base model, settings or data)")


def training_config_from(args, kind: type[RunConfig], **own):
    """A `kind` config (validated there) from the shared flags' values and the command's own settings `own`."""
    return kind(**{name: getattr(args, name) for name in TRAINING_FLAGS}, **own)


def use_threads(args) -> None:
    """--threads (0: torch's default)."""
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def add_training_data_arguments(p, examples_per_category: int = 1500, distill: bool = False) -> None:
    """The options `training_pairs` reads (train, train-draft, train-medusa); `distill`: whether the base's own
    answers are the targets unless --no-distill says otherwise."""
    p.add_argument("--data", default="chat", help="'chat' (the chat prompt corpus), 'tasks' (the old task suite) or a JSONL file with "
                   "{\"prompt\", \"completion\"} or {\"text\"} lines")
    p.add_argument("--examples-per-category", type=int, default=examples_per_category,
                   help="task-suite examples per category")
    p.add_argument("--eval-data", default="", help="JSONL file of eval examples (default: the last 5%% of --data)")
    p.add_argument("--max-examples", type=int, default=0, help="use only the first N training examples (0 = all)")
    p.add_argument("--raw", action="store_true", help="do not wrap prompts in the model's chat template")
    p.add_argument("--distill", action=argparse.BooleanOptionalAction, default=distill,
                   help="train on the base model's own greedy answers to the prompts (self-distillation: "
                        "what lossless streams must predict to be accepted); --no-distill: on the data's answers")
    p.add_argument("--distill-max-new-tokens", type=int, default=128, help="cap on each distilled answer")
    p.add_argument("--distilled-only", action="store_true",
                   help="with --distill: train only on prompts already answered in --distill-cache (generate none)")
    p.add_argument("--distill-cache", default="", help="JSONL file that keeps distilled answers between runs")
    p.add_argument("--references", action="store_true",
                   help="with --distill: train on each prompt's reference answer where it has one and on the base's "
                        "distilled answer elsewhere (shared mode fine-tuned on the tasks, as the paper's shared mode)")


def training_pairs(args, model, tokenizer) -> tuple[list, list]:
    """(train, eval) (prompt ids, answer ids) pairs: from --data / --eval-data, distilled when asked."""
    chat = not args.raw
    if args.eval_data:
        train_pairs = load_examples(args.data, tokenizer, args.examples_per_category, "all", chat)
        eval_pairs = load_examples(args.eval_data, tokenizer, 0, "all", chat)
    else:
        train_pairs = load_examples(args.data, tokenizer, args.examples_per_category, "train", chat)
        eval_pairs = load_examples(args.data, tokenizer, max(20, args.examples_per_category // 20), "eval", chat)
    if args.max_examples:
        train_pairs = train_pairs[: args.max_examples]
    if args.distill:
        from specstream_core.training.distill import _key, distilled_pairs, read_cache

        cache = args.distill_cache or None
        if args.distilled_only:  # train on what a (possibly still running) distillation has finished
            if not cache or not os.path.isfile(cache):
                raise SpecstreamError("--distilled-only needs an existing --distill-cache file")
            done = read_cache(cache)
            train_pairs = [p for p in train_pairs if _key(p[0]) in done]
            print(f"{len(train_pairs)} training prompts have a distilled answer in {cache}")
        given = (train_pairs, eval_pairs)
        train_pairs = distilled_pairs(model, tokenizer, train_pairs, args.distill_max_new_tokens, cache_file=cache)
        eval_pairs = distilled_pairs(model, tokenizer, eval_pairs, args.distill_max_new_tokens, cache_file=cache)
        if args.references:
            eos = eos_ids(tokenizer)
            train_pairs, eval_pairs = (prefer_references(given[0], train_pairs, eos),
                                       prefer_references(given[1], eval_pairs, eos))
    elif args.references:
        raise SpecstreamError("--references needs --distill (the base's answers where a prompt has no reference)")
    train_pairs = [p for p in train_pairs if p[1]]  # prompts without an answer (not yet distilled)
    if not train_pairs:
        raise SpecstreamError("no training examples with an answer (use --distill for prompt-only data)")
    return train_pairs, eval_pairs


def prefer_references(given: list, distilled: list, eos: list[int]) -> list:
    """Each pair with its reference answer where the data gave one (more than the EOS that closes every answer),
    with the base's distilled answer elsewhere."""
    return [g if g[1] != eos else d for g, d in zip(given, distilled, strict=True)]


def read_jsonl_examples(path: str) -> list[tuple[str, str]]:
    """(prompt, answer) rows of a JSONL file: {"text"}, {"prompt", "completion"} or {"prompt", "reference"}."""
    rows = []
    for n, obj in read_objects(path, "training data"):
        if isinstance(obj.get("text"), str):
            rows.append(("", obj["text"]))
        elif isinstance(obj.get("prompt"), str):
            answer = obj.get("completion", obj.get("reference")) or ""
            rows.append((obj["prompt"], answer if isinstance(answer, str) else str(answer)))
        else:
            raise SpecstreamError(f"{path}:{n}: expected 'text' or 'prompt' (+ 'completion')")
    return rows


def recommended(streams_dir: str | None) -> dict:
    """Decoding settings stored with trained streams (chosen by the bundled model's build)."""
    if not streams_dir:
        return {}
    path = os.path.join(streams_dir, "streams_config.json")
    try:
        with open(path) as f:
            return json.load(f).get("extra", {}).get("decode", {}) or {}
    except (OSError, ValueError):
        return {}

"""`ngrams`: build a stream set's n-gram store (`ngrams.npz`) from self-distilled answers.

    python -m specstream_core ngrams --answers assets/smollm2/distill/answers.jsonl.gz \\
        --out assets/smollm2/streams-lossless

The store holds, for every 1..4-gram of the base model's own greedy answers, the token that most often
followed it (`decoding/drafters/ngram_store.py`); speculative streaming copies from it where the context
offers nothing longer (`--ngrams`). Answers to the chat corpus's eval prompts are left out (they are in a
distillation cache for `train`'s evaluation), so τ on the eval split measures prompts the store never saw.
A shared set fine-tuned on the prompts' references (`train --references`) gets its store from what it was
trained to say: `--references PROMPTS.jsonl` puts each prompt's reference answer in place of the base's,
where the prompt has one.
"""

from __future__ import annotations

import os

from specstream_core.errors import SpecstreamError
from specstream_core.model import defaults


def add_arguments(p) -> None:
    p.add_argument("--answers", required=True,
                   help="a self-distillation cache (`distill --out`, JSONL of prompt_ids/answer_ids; .gz read as such)")
    p.add_argument("--out", required=True, help="the stream set's directory: ngrams.npz is written there")
    p.add_argument("--base", help="base model directory or hub id, for its tokenizer (default: SmolLM2-135M-Instruct)")
    p.add_argument("--max-n", type=int, default=4, help="longest n-gram stored (at most 64 // bits per token id)")
    p.add_argument("--keep-eval", action="store_true",
                   help="keep answers to the chat corpus's eval prompts (default: leave them out)")
    p.add_argument("--raw", action="store_true", help="the cache's prompts were not chat-wrapped (`distill --raw`)")
    p.add_argument("--references", default="",
                   help="a prompt file (`prompts --out`): its prompts' reference answers stand in for the cached "
                        "answers, where given (the store of a shared set trained with `train --references`)")


def eval_prompt_keys(tokenizer, chat: bool) -> set[tuple[int, ...]]:
    """Token ids of every chat-corpus eval prompt, encoded as `distill` encodes them."""
    from specstream_core.model.chat import encode_prompt
    from specstream_core.tasks.corpus import load_corpus

    return {tuple(encode_prompt(tokenizer, r["prompt"], chat)) for r in load_corpus("eval", n=None)}


def reference_answers(path: str, tokenizer, chat: bool) -> dict[str, list[int]]:
    """{prompt key: reference ids + EOS} of a prompt file's rows that have a reference, keyed as the cache is."""
    from specstream_core.cli.args import eos_ids, load_examples
    from specstream_core.training.distill import _key

    if not os.path.isfile(path):
        raise SpecstreamError(f"{path}: no such file (make one with `python -m specstream_core prompts --out`)")
    eos = eos_ids(tokenizer)
    return {_key(p): a for p, a in load_examples(path, tokenizer, 0, "all", chat) if p and a != eos}


def run(args) -> int:
    from transformers import AutoConfig

    from specstream_core.decoding.drafters.ngram_store import NgramStore
    from specstream_core.model.loading import load_tokenizer
    from specstream_core.training.distill import read_cache

    if not 1 <= args.max_n <= 8:
        raise SpecstreamError(f"--max-n must be between 1 and 8, got {args.max_n}")
    if not os.path.isfile(args.answers):
        raise SpecstreamError(f"{args.answers}: no such file (make one with `python -m specstream_core distill`)")
    if not os.path.isdir(args.out):
        raise SpecstreamError(f"{args.out}: not a directory (the stream set's directory)")
    base, _ = defaults.resolve(args.base, None)
    tokenizer = load_tokenizer(base)
    vocab = max(len(tokenizer), int(AutoConfig.from_pretrained(base).vocab_size))
    cached = read_cache(args.answers)
    if not cached:
        raise SpecstreamError(f"{args.answers}: no answers in it")
    if args.references:
        cached.update(reference_answers(args.references, tokenizer, not args.raw))
    left_out = set() if args.keep_eval else eval_prompt_keys(tokenizer, not args.raw)
    answers = [a for key, a in cached.items() if tuple(int(t) for t in key.split(",")) not in left_out]
    store = NgramStore.build(answers, vocab, args.max_n)
    path = store.save(args.out)
    print(f"n-gram store: {len(answers):,} answers ({len(cached) - len(answers):,} to eval prompts left out), "
          f"{sum(map(len, answers)):,} tokens, {len(store):,} n-grams of 1 to {store.max_n} tokens, "
          f"{os.path.getsize(path) / 1e6:.1f} MB -> {path}")
    return 0

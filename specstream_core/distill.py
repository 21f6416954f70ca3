"""Self-distillation targets: the base model's own greedy answers to the training prompts.

Lossless streams are accepted when they predict what the *base model* will say, not what the data
says. Training them on the base's own greedy continuations (as Medusa-2 and EAGLE do) removes the
mismatch between reference text and the base's choices; since greedy decoding is a deterministic
function of the prompt, these targets are also far more predictable than human text.

Answers are generated in batches with transformers' `generate` (left padding); a cap on new tokens
bounds the cost. Shown with a progress bar; results can be cached as JSONL so a rebuild reuses them.
"""

from __future__ import annotations

import json
import os

import torch

from .errors import SpecstreamError


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
    if cache_file and os.path.isfile(cache_file):
        with open(cache_file) as f:
            for n, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                    cached[_key(row["prompt_ids"])] = list(row["answer_ids"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise SpecstreamError(f"{cache_file}:{n}: not a self-distillation record; delete the file") from None
    todo = [p for p, _ in pairs if p and _key(p) not in cached]
    todo = list({_key(p): p for p in todo}.values())
    def keep(batch_prompts, batch_answers):
        for p, a in zip(batch_prompts, batch_answers):
            cached[_key(p)] = a
        if cache_file:
            os.makedirs(os.path.dirname(os.path.abspath(cache_file)), exist_ok=True)
            with open(cache_file, "a") as f:
                for p, a in zip(batch_prompts, batch_answers):
                    f.write(json.dumps({"prompt_ids": p, "answer_ids": a}) + "\n")

    if todo:
        greedy_answers(model, tokenizer, todo, max_new_tokens, batch_size, progress, on_batch=keep)
    # pairs without a prompt (plain text) keep their text: there is nothing to continue
    return [(p, cached[_key(p)]) if p else (p, a) for p, a in pairs]


def _key(ids: list[int]) -> str:
    return ",".join(map(str, ids))

"""Score a model on the task suite with plain Hugging Face greedy decoding (`model.generate`).

    report = evaluate(model, tokenizer, n=20)   # {"per_category": {...}, "mean": ..., ...}

Prompts are decoded one at a time (no padding, so nothing differs from single-prompt use); the answer
is the text generated up to the end marker.
"""

from __future__ import annotations

import time

import torch

from . import CATEGORIES, load_split, score


@torch.inference_mode()
def generate_answer(model, tokenizer, prompt: str, max_new_tokens: int = 160) -> tuple[str, int]:
    """Greedy answer text and number of generated tokens."""
    enc = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    new = out[0, enc["input_ids"].shape[1]:]
    return tokenizer.decode(new, skip_special_tokens=True), int(new.shape[0])


def evaluate(model, tokenizer, n: int = 20, categories=None, max_new_tokens: int = 160,
             keep_examples: int = 1) -> dict:
    model.eval()
    per_category, samples = {}, {}
    total_tokens, t0 = 0, time.perf_counter()
    for cat in categories or CATEGORIES:
        scores = []
        for i, ex in enumerate(load_split("eval", cat, n=n)):
            answer, n_tokens = generate_answer(model, tokenizer, ex["prompt"], max_new_tokens)
            total_tokens += n_tokens
            scores.append(score(cat, answer, ex["reference"]))
            if i < keep_examples:
                samples.setdefault(cat, []).append({"prompt": ex["prompt"], "reference": ex["reference"],
                                                    "prediction": answer})
        per_category[cat] = round(sum(scores) / len(scores), 4)
    return {
        "n_per_category": n,
        "per_category": per_category,
        "mean": round(sum(per_category.values()) / len(per_category), 4),
        "generated_tokens": total_tokens,
        "seconds": round(time.perf_counter() - t0, 1),
        "samples": samples,
    }


def format_table(report: dict) -> str:
    lines = [f"{'category':<15} score   (n={report['n_per_category']}, greedy, plain HF generate)"]
    for cat, value in report["per_category"].items():
        lines.append(f"{cat:<15} {value:.3f}")
    lines.append(f"{'mean':<15} {report['mean']:.3f}")
    return "\n".join(lines)

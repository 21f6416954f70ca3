"""The benchmark page's generation-rate table: a `speed` file's loops beside llama.cpp's own `llama-bench` at the
same thread count, where the file holds llama-bench's rows (`speed --methods ...,llama-bench`)."""

from __future__ import annotations

from specstream_core.bench.report_sources import Source

TEXT = ("Generation rate: new tokens after the first, divided by the decode time (the wall time after the pass that "
        "gave the first token). Beside it, llama.cpp's own `llama-bench` on the same GGUF file at the same thread "
        "count, {note}: tg, one token a pass from an empty context; pp, a prompt as long as the eval prompts' median "
        "in one batch; the median of its repetitions before and after the other methods. Prompt rate: the prompt's "
        "tokens divided by the time to the first new token (the prefill pass and its pick), over the same prompts.")


def generation_table(src: Source, label) -> list[str]:
    """label: a `speed` method name -> the page's words for it. Nothing where the file has no llama-bench rows."""
    llama = {r["threads"]: r for r in src.data.get("llama_bench", [])}
    if not llama:
        return []
    note = next((r["note"] for r in llama.values() if "note" in r), "generation only, no Python, no tokenizer")
    out = ["", TEXT.format(note=note), "",
           "| method | precision | threads | tokens/s end to end | generation rate, tokens/s | × llama-bench tg | "
           "prompt rate, tokens/s (llama-bench: pp) |", "|---|---|---|---|---|---|---|"]
    for t, lb in llama.items():
        tg = lb.get("tg_tokens_per_s")
        for r in src.data["rows"]:
            rate, fill = r.get("generation_tokens_per_s"), r.get("prompt_tokens_per_s")
            if r.get("threads") == t and rate:
                out.append(f"| {label(r['method'])} | {r['precision']} | {t} | {r['tokens_per_s']:.1f} | {rate:.1f} | "
                           f"{f'{rate / tg:.2f}×' if tg else '–'} | {f'{fill:.1f}' if fill else ''} |")
        if "error" in lb:
            out.append(f"| {label('llama-bench')} | – | {t} | – | not run: {lb['error']} | – | – |")
            continue
        pp = f"pp{lb['pp_tokens']}: {lb['pp_tokens_per_s']:.1f}" if "pp_tokens" in lb else "–"
        out.append(f"| {label('llama-bench')} ({lb.get('model_type', '')}, build {lb.get('build_commit', '?')}) | "
                   f"gguf | {t} | – | tg{lb['tg_tokens']}: {tg:.1f} | 1.00× | {pp} |")
    return out

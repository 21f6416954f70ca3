"""Batch throughput: samples/s and tokens/s of batched decoding against a sequential loop and transformers.

Methods, every one decoding the same prompts to the same limit (greedy, EOS stops a row):
    ar-seq     our plain decoding, one prompt after another (batch 1)
    ar-batch   our batched plain decoding, B prompts per batch
    ss-batch   our batched speculative streaming, B prompts per batch
    hf-batch   transformers' `generate` on B left-padded prompts (DynamicCache)
The prompts are cut into consecutive batches of B; the time of a method is the wall time to decode
all of them. Per repeat the methods run in a rotating order (none always first), after one warm-up
batch each; the reported time is the median over repeats.

`shared_prefix_benchmark`: n samples of one prompt, our shared-prefix cache (the prompt's K/V once)
against the same batch without sharing and against `generate(num_return_sequences=n)`; bytes held by
the K/V cache and wall time.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

import torch

from specstream_core.decoding.config import DecodeConfig
from specstream_core.kernels.linears import rowinv

METHODS = ("ar-seq", "ar-batch", "ss-batch", "hf-batch")


@dataclass
class ThroughputRow:
    method: str
    batch_size: int
    samples: int
    tokens: int
    wall_s: float  # median over repeats
    samples_per_s: float
    tokens_per_s: float
    speedup_vs_ar_seq: float  # samples/s over the sequential batch-1 plain loop
    mean_accepted: float  # tokens per forward pass per sequence (ours), 0 for transformers
    identical: int  # sequences equal to the sequential plain loop, token for token
    walls: list[float]


@dataclass
class SharedRow:
    method: str
    n: int
    prompt_tokens: int
    new_tokens: int
    kv_bytes: int
    wall_s: float


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _cut_at_eos(tokens: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def hf_batch_generate(model, batch: list[list[int]], max_new_tokens: int, pad_id: int, eos: set[int]) -> list[list[int]]:
    """transformers' greedy generate on left-padded prompts (torch's Linears, as it ships); each row's
    tokens up to its first EOS."""
    width = max(len(p) for p in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for b, p in enumerate(batch):
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    with torch.inference_mode(), rowinv.torch_linears():
        out = model.generate(ids.to(model.device), attention_mask=mask.to(model.device), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=pad_id)
    return [_cut_at_eos(row[width:].tolist(), eos) for row in out]


def _runner(name: str, engine, cfg_ar: DecodeConfig, cfg_ss: DecodeConfig | None = None
            ) -> Callable[[list[list[int]]], tuple[list[list[int]], list[float]]]:
    """batch of prompts -> (outputs, per-sequence tokens per forward pass)."""
    if name == "ar-seq":
        def run(batch):
            results = [engine.generate(p, cfg_ar) for p in batch]
            return [r.token_ids for r in results], [r.stats["mean_accepted"] for r in results]
    elif name == "ar-batch" or name.startswith("ss-batch"):
        cfg = cfg_ar if name == "ar-batch" else cfg_ss

        def run(batch):
            results = engine.generate_batch(batch, cfg, share_prefix=False)
            return [r.token_ids for r in results], [r.stats["mean_accepted"] for r in results]
    elif name == "hf-batch":
        pad = engine.model.generation_config.pad_token_id
        pad = pad if pad is not None else (min(engine.eos_ids) if engine.eos_ids else 0)

        def run(batch):
            return hf_batch_generate(engine.model, batch, cfg_ar.max_new_tokens, pad, engine.eos_ids), []
    else:
        raise ValueError(name)
    return run


def run_throughput(engine, prompts: list[list[int]], batch_sizes: list[int], max_new_tokens: int,
                   ss_trees: list[tuple[int, ...]], methods=METHODS, repeats: int = 3, progress: bool = True,
                   node_budget: int = 64, lookup: int = 0) -> list[ThroughputRow]:
    """One row per (method, batch size); ar-seq is batch-size independent and measured once per repeat.
    ss-batch runs once per draft tree in `ss_trees` (named `ss-batch 1,1,1,1`)."""
    from tqdm.auto import tqdm

    cfg_ar = DecodeConfig(mode="ar", max_new_tokens=max_new_tokens)
    runners = {}
    for m in methods:
        if m != "ss-batch":
            runners[m] = _runner(m, engine, cfg_ar)
            continue
        for tree in ss_trees:
            cfg_ss = DecodeConfig(mode="ss", max_new_tokens=max_new_tokens, tree_topk=tuple(tree), node_budget=node_budget,
                                  lookup=lookup)
            runners[f"ss-batch {','.join(map(str, tree))}"] = _runner("ss-batch", engine, cfg_ar, cfg_ss)
    methods = list(runners)
    jobs = [(m, 1) for m in methods if m == "ar-seq"] + [(m, b) for b in batch_sizes for m in methods if m != "ar-seq"]
    for m, b in jobs:  # warm-up: one batch of each job
        runners[m](prompts[:b])
    walls: dict[tuple[str, int], list[float]] = {job: [] for job in jobs}
    outputs: dict[tuple[str, int], list[list[int]]] = {}
    accepted: dict[tuple[str, int], list[float]] = {}
    bar = tqdm(total=repeats * len(jobs), desc="bench-batch", disable=not progress)
    for r in range(repeats):
        shift = r % len(jobs)
        for job in jobs[shift:] + jobs[:shift]:  # rotating order
            m, b = job
            t0 = time.perf_counter()
            outs, acc = [], []
            for batch in _chunks(prompts, b):
                o, a = runners[m](batch)
                outs += o
                acc += a
            walls[job].append(time.perf_counter() - t0)
            outputs[job], accepted[job] = outs, acc
            bar.set_postfix_str(f"{m} B={b}")
            bar.update()
    bar.close()
    reference = outputs.get(("ar-seq", 1))
    base = None
    rows = []
    for job in jobs:
        m, b = job
        wall = statistics.median(walls[job])
        tokens = sum(len(o) for o in outputs[job])
        sps = len(prompts) / wall
        if m == "ar-seq":
            base = sps
        same = sum(o == ref for o, ref in zip(outputs[job], reference)) if reference else 0
        rows.append(ThroughputRow(m, b, len(prompts), tokens, wall, sps, tokens / wall, 0.0,
                                  statistics.mean(accepted[job]) if accepted[job] else 0.0, same, walls[job]))
    for row in rows:
        row.speedup_vs_ar_seq = row.samples_per_s / base if base else 0.0
    return rows


def _dynamic_cache_bytes(cache) -> int:
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def shared_prefix_benchmark(engine, prompt: list[int], n: int, max_new_tokens: int, ss_cfg: DecodeConfig,
                            repeats: int = 3, seed: int = 0) -> list[SharedRow]:
    """n samples (temperature 1) of one prompt; every method decodes exactly max_new_tokens per row."""
    rows = []

    def ours(name, cfg, share):
        walls, kv, new = [], 0, 0
        for _ in range(repeats):
            dec = engine.start_batch([prompt] * n, cfg, share_prefix=share)
            t0 = time.perf_counter()
            results = dec.run()
            walls.append(time.perf_counter() - t0)
            kv, new = dec.cache.nbytes(), sum(len(r.token_ids) for r in results)
        rows.append(SharedRow(name, n, len(prompt), new, kv, statistics.median(walls)))

    base = dict(max_new_tokens=max_new_tokens, temperature=1.0, seed=seed, stop_on_eos=False)
    ar_cfg = DecodeConfig(mode="ar", **base)
    ss = replace(ss_cfg, mode="ss", **base)
    ours("ar shared prefix (ours)", ar_cfg, True)
    ours("ar unshared (ours)", ar_cfg, False)
    ours("ss shared prefix (ours)", ss, True)
    ours("ss unshared (ours)", ss, False)
    walls, kv = [], 0
    ids = torch.tensor([prompt], device=engine.model.device)
    for _ in range(repeats):
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.inference_mode(), rowinv.torch_linears():
            out = engine.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                                        temperature=1.0, num_return_sequences=n, max_new_tokens=max_new_tokens,
                                        min_new_tokens=max_new_tokens, return_dict_in_generate=True,
                                        pad_token_id=0)
        walls.append(time.perf_counter() - t0)
        kv = _dynamic_cache_bytes(out.past_key_values)
    rows.append(SharedRow("transformers generate(num_return_sequences=n), DynamicCache", n, len(prompt),
                          n * max_new_tokens, kv, statistics.median(walls)))
    return rows


def throughput_markdown(rows: list[ThroughputRow]) -> str:
    lines = ["| method | batch | samples/s | tokens/s | × ar-seq | tokens/pass | identical to ar-seq | wall s (median) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tau = f"{r.mean_accepted:.2f}" if r.mean_accepted else "–"  # transformers reports no pass count
        lines.append(f"| {r.method} | {r.batch_size} | {r.samples_per_s:.2f} | {r.tokens_per_s:.1f} | "
                     f"{r.speedup_vs_ar_seq:.2f}× | {tau} | {r.identical}/{r.samples} | {r.wall_s:.2f} |")
    return "\n".join(lines)


def shared_markdown(rows: list[SharedRow]) -> str:
    lines = ["| method | n | prompt tokens | new tokens | K/V bytes held | wall s |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.method} | {r.n} | {r.prompt_tokens} | {r.new_tokens} | {r.kv_bytes / 2**20:.2f} MiB | {r.wall_s:.2f} |")
    return "\n".join(lines)


def to_json(throughput: list[ThroughputRow], shared: list[SharedRow], meta: dict) -> dict:
    return {"meta": meta, "throughput": [asdict(r) for r in throughput], "shared_prefix": [asdict(r) for r in shared]}

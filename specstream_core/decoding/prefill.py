"""Pass 0 of the loop (`loop.py`): the prompts into the cache, each row's first token and first draft.

Every prompt runs as a chain (main rows, causal); its last position carries the streams, whose
logits are the first draft. With a shared prompt (`Decoding.share_prefix`) the prompt runs once at
batch 1 and its K/V becomes the `SharedPrefixCache` every row attends over.
"""

from __future__ import annotations

import time

import torch

from specstream_core.decoding import processors
from specstream_core.decoding.tracer import Pass, attention_maps, capturing_forward
from specstream_core.decoding.tree import chain
from specstream_core.decoding.verify import sample_token
from specstream_core.model.cache import SharedPrefixCache


def pad_steps(items: list[tuple[list[int], list[int], torch.Tensor]], starts: list[int], device):
    """Per row (tokens, depths, visibility [n, n]) → ids, positions [B, w] and visibility [B, w, w].

    Rows shorter than the widest get dummy nodes: token 0, the row's first position, visible only to
    themselves. Positions are each row's own prefix length + depth.
    """
    if len(items) == 1:  # one sequence, nothing to pad: every step of a single decoding (a few µs, not ~40)
        tokens, node_depths, vis = items[0]
        positions = torch.tensor([[starts[0] + d for d in node_depths]], dtype=torch.long)
        return (torch.tensor([tokens], dtype=torch.long).to(device), positions.to(device),
                vis.to(device=device, dtype=torch.bool, copy=True)[None])
    width = max(len(tokens) for tokens, _, _ in items)
    B = len(items)
    ids = torch.zeros(B, width, dtype=torch.long)
    depths = torch.zeros(B, width, dtype=torch.long)
    visible = torch.eye(width, dtype=torch.bool).repeat(B, 1, 1)
    for b, (tokens, node_depths, vis) in enumerate(items):
        n = len(tokens)
        ids[b, :n] = torch.tensor(tokens)
        depths[b, :n] = torch.tensor(node_depths)
        visible[b, :n, :n] = vis
    positions = torch.tensor(starts)[:, None] + depths
    return ids.to(device), positions.to(device), visible.to(device)


def prefill(dec) -> list[Pass]:
    """Run the prompts of `dec` (a `loop.Decoding`), fill its cache; one `Pass` per live row."""
    engine, cfg, live = dec.engine, dec.cfg, dec.live
    t0 = time.perf_counter()
    prompts = [live[0].prompt_ids] if dec.share_prefix else [row.prompt_ids for row in live]
    dec.cache = dec.allocate(len(prompts), max(len(p) for p in prompts))
    device = engine.device
    items = [(p, list(range(len(p))), torch.tril(torch.ones(len(p), len(p), dtype=torch.bool))) for p in prompts]
    ids, positions, visible = pad_steps(items, [0] * len(prompts), device)
    last = torch.tensor([[len(p) - 1] for p in prompts], device=device)  # [P, 1]
    carriers = last if dec.streams is not None else None
    out = capturing_forward(dec, engine.model, ids, positions, visible, streams=dec.streams, carriers=carriers,
                            cache=dec.cache, window=engine.window, num_streams=dec.num_streams or None)
    logits, scored = dec.backend.head_scores(out.main[torch.arange(len(prompts), device=device), last[:, 0]],
                                             out.streams)  # [P, V]; the last row's stream rows too, as a step's
    dec.cache.commit([(0, dec.num_layers, [torch.arange(len(p), device=device) for p in prompts])])
    if dec.share_prefix:
        dec.cache = SharedPrefixCache(dec.cache, batch=len(live), capacity=dec.cfg.max_new_tokens + dec.scratch())
    t1 = time.perf_counter()
    passes = []
    for b, row in enumerate(live):
        src = 0 if dec.share_prefix else b  # the pass row this sequence's prompt ran in
        n = len(row.prompt_ids)
        scores = logits[src]
        if processors.active(cfg):
            scores = processors.apply(cfg, scores, row.prompt_ids)
        bonus = sample_token(scores, cfg.sampling, row.generator)
        row.drafter.observe(dec._row_output(out, src, carriers=[n - 1], scored=scored), n - 1)  # the first draft
        tree = chain(row.prompt_ids[0], row.prompt_ids[1:])
        top = n + dec.num_streams if dec.streams is not None else n
        attention = (attention_maps(engine, cfg, out, src, 0, list(range(n)), tree, 0, row.prompt_ids)
                     if dec.capture else None)
        passes.append(Pass(tree, list(range(n)), list(range(n)), bonus, (n, top), 0, prefill=True,
                           times={"verify": (t1 - t0) * 1e3, "draft": 0.0, "accept": 0.0}, attention=attention))
    return passes

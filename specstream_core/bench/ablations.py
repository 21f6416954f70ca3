"""The ablation variants `bench` runs: lossless speculative streaming on the fp32 engine with one
setting varied at a time — draft depth γ, per-depth top-k, pruning threshold, Ns (other stream sets)
and prompt lookup grafted onto the streams' tree (tokens, node budget); 'draft' varies the whole draft at
once (tree, prompt-lookup tokens, node budget) to find the fastest one to record as the default."""

from __future__ import annotations

import os
from dataclasses import replace

from specstream_core.bench.runner import engine_method, hf_method
from specstream_core.decoding.config import NODE_BUDGET
from specstream_core.decoding.loop import default_drafter
from specstream_core.bench.names import ABLATIONS  # noqa: F401 - re-exported

TOPK_GRID = ((1, 1, 1, 1), (2, 1, 1, 1), (2, 2, 1, 1), (3, 2, 2, 1), (4, 3, 2, 1))
PRUNE_TREE = (3, 2, 2, 1)
PRUNE_GRID = (0.0, 0.02, 0.05, 0.1, 0.2)
LOOKUP_GRID = ((0, 64), (2, 3), (3, 4), (8, 64))  # (prompt-lookup tokens, node budget) on the recommended tree
# whole drafts (tree per depth, copied tokens, node budget, copy from the n-gram store), from one node to
# eight: the cheaper a wide pass (the row-invariant kernel, bf16), the larger the draft that pays; one stream's
# top 2 against two streams' top 1; the nine-node 2,2,1,1 and seven-node 2,1,1 trees lost everywhere
# measured (an int4 draft ablation) and left the grid, as did the 3,1 and 1,1,1,1 ones since
DRAFT_GRID = (((1,), 0, 64, False), ((1,), 2, 3, False), ((1,), 2, 3, True), ((1,), 3, 4, False), ((1,), 3, 4, True),
              ((1,), 4, 5, True), ((2,), 2, 4, True), ((1, 1), 0, 64, False), ((1, 1), 2, 4, True),
              ((1, 1), 3, 5, True), ((2, 1), 2, 5, False), ((1, 1, 1), 3, 6, False))


def tree_nodes(topk: tuple[int, ...], budget: int) -> int:
    total, width = 1, 1
    for k in topk:
        width *= k
        total += width
    return min(total, budget)


def ablation_methods(names_needed, engine, ctx, plan_, load_engine) -> list:
    """Ablation variants of lossless speculative streaming (γ, k, Ns, pruning, prompt lookup grafted onto
    the tree, drafts) on `engine`, bench's first precision; transformers' baseline on ctx["hf_model"]
    where bench runs it in fp32 beside the engine (`bench._hf_model`)."""
    # the tree ablations vary the streams' own tree: no prompt lookup, no node cap it would need
    ss_cfg, max_new = replace(ctx["ss_cfg"], lookup=0, node_budget=NODE_BUDGET, ngrams=False), ctx["max_new"]
    out = [engine_method("ar", engine, ctx["ar_cfg"])]
    if plan_["baseline"] == "hf-greedy":
        out.append(hf_method("hf-greedy", ctx.get("hf_model") or engine.model, max_new))
    extra = engine.streams.extra_parameter_count()
    gamma = engine.streams.cfg.gamma
    rec = tuple(ss_cfg.tree_topk) + (1,) * gamma
    if "gamma" in names_needed:
        for g in range(1, gamma + 1):
            cfg = replace(ss_cfg, tree_topk=rec[:g])
            out.append(engine_method(f"ss γ={g}", engine, cfg, extra_params=extra, ablation="gamma", value=str(g),
                                     tree_nodes=tree_nodes(cfg.tree_topk, cfg.node_budget)))
    if "topk" in names_needed:
        for t in TOPK_GRID:
            t = t[:gamma]
            cfg = replace(ss_cfg, tree_topk=t, prune_threshold=0.0)
            label = ",".join(map(str, t))
            out.append(engine_method(f"ss k={label}", engine, cfg, extra_params=extra, ablation="topk",
                                     value=f"{label} ({tree_nodes(t, cfg.node_budget)} nodes)",
                                     tree_nodes=tree_nodes(t, cfg.node_budget)))
    if "prune" in names_needed and engine.streams.prune is not None:
        t = PRUNE_TREE[:gamma]
        for th in PRUNE_GRID:
            cfg = replace(ss_cfg, tree_topk=t, prune_threshold=th)
            out.append(engine_method(f"ss prune={th}", engine, cfg, extra_params=extra, ablation="prune",
                                     value=f"{th}", tree_nodes=tree_nodes(t, cfg.node_budget)))
    if "lookup" in names_needed:
        for n, budget in LOOKUP_GRID:
            cfg = replace(ctx["ss_cfg"], lookup=n, node_budget=budget)
            out.append(engine_method(f"ss lookup={n}", engine, cfg, extra_params=extra, ablation="lookup",
                                     value=f"{n} (budget {budget})",
                                     tree_nodes=default_drafter(engine, cfg).max_nodes))
    if "draft" in names_needed:
        for topk, n, budget, ngrams in DRAFT_GRID:
            if len(topk) > gamma or (ngrams and engine.ngrams is None):
                continue
            cfg = replace(ctx["ss_cfg"], tree_topk=topk, prune_threshold=0.0, lookup=n, node_budget=budget,
                          ngrams=ngrams)
            label = f"k={','.join(map(str, topk))} lookup={n} budget={budget}{' ngrams' if ngrams else ''}"
            out.append(engine_method(f"ss {label}", engine, cfg, extra_params=extra, ablation="draft", value=label,
                                     tree_nodes=default_drafter(engine, cfg).max_nodes))
    if "ns" in names_needed:
        for d in [t.strip() for t in (ctx["ablation_streams"] or "").split(",") if t.strip()]:
            other = load_engine(ctx["base"], d, engine.precision, ctx["device"])
            cfg = replace(ss_cfg, tree_topk=other.recommended_decode().get("tree_topk", ss_cfg.tree_topk))
            ns = other.streams.cfg.n_stream_layers
            out.append(engine_method(f"ss Ns={ns} ({os.path.basename(d.rstrip('/'))})", other, cfg,
                                     extra_params=other.streams.extra_parameter_count(), ablation="ns",
                                     value=f"{ns} ({os.path.basename(d.rstrip('/'))})",
                                     tree_nodes=tree_nodes(cfg.tree_topk, cfg.node_budget)))
    return out

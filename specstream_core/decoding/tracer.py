"""Traces as an observer of the decoding loop: each row's `RowTrace` records every pass it took part
in (format: `trace.py`, docs/TRACE.md). The loop only calls `record` and `finish`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specstream_core.decoding import trace as schema
from specstream_core.decoding.tree import Tree
from specstream_core.model import msa


@dataclass
class Pass:
    """What one forward pass did for one row (stats, emission and traces read it)."""
    tree: Tree  # the row's draft tree (the prompt chain in the prefill)
    keep: list[int]  # surviving node ids (all when nothing was pruned)
    path: list[int]  # accepted node ids in `tree`, root first
    bonus: int  # the token chosen after the last accepted node
    rows: tuple[int, int]  # rows of this sequence below / in the multi-stream layers
    start: int  # the row's cached prefix length before the pass
    prefill: bool = False
    times: dict = field(default_factory=dict)  # ms: draft, verify, accept
    attention: dict | None = None


class RowTrace:
    def __init__(self, engine, cfg, prompt_ids: list[int]):
        self.engine, self.cfg = engine, cfg
        self.data = schema.new_trace(engine.trace_meta(cfg), engine.decode_text(prompt_ids), prompt_ids)

    def record(self, p: Pass, emitted: list[int]) -> None:
        text = self.engine.token_text
        steps = self.data["steps"]
        if self.cfg.mode == "ar":  # one node: the token this pass chose
            tok = emitted[0] if emitted else -1
            steps.append({"index": len(steps), "prefix_len": p.start,
                          "nodes": [_node(0, tok, text(tok) if emitted else "", -1, 0, 1.0, False, True)],
                          "accepted": [0], "bonus": {"token": p.bonus, "text": text(p.bonus)}, "emitted": emitted,
                          "rows": {"bottom": 1, "top": 1}, "time_ms": {"draft": 0.0, "verify": 0.0, "accept": 0.0},
                          "attention": None})
            return
        if p.prefill:  # the prompt pass as a single root: the prompt's last token
            last = p.tree.tokens[-1]
            nodes, accepted = [_node(0, last, text(last), -1, 0, 1.0, False, True)], [0]
        else:
            kept, on_path = set(p.keep), set(p.path)
            nodes = [_node(i, t, text(t), p.tree.parents[i], p.tree.depths[i], round(p.tree.probs[i], 5),
                           i not in kept, i in on_path, i in p.tree.copied) for i, t in enumerate(p.tree.tokens)]
            accepted = list(p.path)
        steps.append({"index": len(steps), "prefix_len": p.start, "nodes": nodes, "accepted": accepted,
                      "bonus": {"token": p.bonus, "text": text(p.bonus)}, "emitted": list(emitted),
                      "rows": {"bottom": p.rows[0], "top": p.rows[1]},
                      "time_ms": {k: round(v, 3) for k, v in p.times.items()}, "attention": p.attention})

    def finish(self, output: list[int], stats: dict) -> None:
        self.data["output"] = {"text": self.engine.decode_text(output), "token_ids": list(output)}
        self.data["stats"] = stats


def _node(i, token, text, parent, depth, prob, pruned, accepted, copied=False) -> dict:
    node = {"id": i, "token": token, "text": text, "parent": parent, "depth": depth, "prob": prob,
            "pruned": pruned, "accepted": accepted}
    if copied:  # prompt lookup's copy grafted onto the streams' tree
        node["copied"] = True
    return node


def attention_maps(engine, cfg, out, b: int, carrier: int, path: list[int], survivors: Tree, start: int,
                   context: list[int]) -> dict:
    """Row b's accepted node's stream rows over the context it sees and its sibling streams.

    Key columns: the latest `attention_context` tokens the node sees (cached prefix, then the
    accepted path's main rows), then its γ streams. Row r of this pass sits in key column start + r.
    """
    gamma = out.streams.shape[2]  # the streams this pass ran
    m = out.main.shape[1]
    rows = [m + carrier * gamma + j for j in range(gamma)]
    seen = [(i, context[i]) for i in range(start)] + [(start + i, survivors.tokens[i]) for i in path]
    seen = seen[-cfg.attention_context:]
    cols = [k for k, _ in seen] + [start + r for r in rows]
    labels = [engine.token_text(t) for _, t in seen] + [f"⟨s{j + 1}⟩" for j in range(gamma)]
    heads = list(cfg.attention_heads) or None
    layers = {}
    for li, weights in out.attention.items():
        w = weights[b][:, rows][:, :, cols].float()  # [H, γ, cols]
        if heads:
            w = w[heads]
        layers[str(li)] = [[[round(x, 4) for x in row] for row in head] for head in w.tolist()]
    return {"layers": layers, "heads": heads or list(range(len(next(iter(layers.values()), [])))),
            "columns": labels, "context_len": len(seen)}


def capture_layers(cfg, streams) -> tuple[int, ...]:
    """Layers whose attention a pass records (trace only, stream layers only)."""
    return tuple(cfg.attention_layers) if (cfg.trace and streams is not None) else ()



def capturing_forward(dec, *args, **kwargs) -> msa.ForwardOutput:
    """`msa.forward` capturing the attention layers of `dec` (a `loop.Decoding`): in the pass itself, or, with
    `dec.capture_apart`, in a pass of its own just before it (whose scratch K/V the real pass overwrites).
    Capturing takes layers off their fast path, so in the pass it rounds differently and can change later drafts;
    apart, every pass is the one a run without capture makes. A pass whose survivors differ from the capturing
    pass's gets no maps."""
    if not (dec.capture and dec.capture_apart):
        return msa.forward(*args, capture_layers=dec.capture, **kwargs)
    seen = msa.forward(*args, capture_layers=dec.capture, **kwargs)
    out = msa.forward(*args, **kwargs)
    same = out.keep is None if seen.keep is None else (out.keep is not None and torch.equal(seen.keep, out.keep))
    out.attention = seen.attention if same else {}
    return out

"""What one forward pass costs on this machine, by shape — the other half of every speedup.

Speculative decoding trades passes for work per pass: speedup ≈ τ ÷ (cost of a speculative pass ÷
cost of a plain pass). τ comes from the drafts; the cost ratio comes from the hardware, the model's
shape and the draft's shape, and it can be measured without any trained drafter. This module times,
after a prefix of `context` tokens in the KV cache:

    plain       one token (plain decoding's pass), logits of that row
    verify k    a chain of k tokens without streams (the pass that checks a draft from prompt lookup,
                a draft model or Medusa heads), logits of all k rows
    ss g        Speculative Streaming with a chain g deep: g+1 tree nodes, each carrying streams
                1..g in the multi-stream layers; logits of the g+1 main rows and of one node's g
                stream rows (what the decoder computes)
    draft n×s   the pass a draft of n nodes makes when each node carries s stream rows (the stream
                set's recommended draft: `Engine.recommended_decode`, `recommended_drafts`)

Every pass writes into the cache's scratch slots and commits nothing, so the prefix is the same for
every measurement. The kinds run in a rotating order within each repeat; each figure is a median.
From the ratio r of a pass to the plain pass: τ must exceed r to win at all and reach 2r for 2×;
a g-deep draft can give at most τ = g+1.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from specstream_core.model import compat, msa
from specstream_core.bench import clocks
from specstream_core.kernels.heads import greedy, int8_head
from specstream_core.kernels.linears import rowinv
from specstream_core.model.cache import KVCache
from specstream_core.bench.pass_parts import below_table, measure_parts
from specstream_core.bench.results import read_json
from specstream_core.bench.roofline import BYTES_PER_WEIGHT, HEAD_BYTES_PER_WEIGHT, Machine, pass_limit
from specstream_core.errors import SpecstreamError
from specstream_core.decoding.drafters import RowOutput
from specstream_core.decoding.tree import chain
from specstream_core.tasks import CATEGORIES, load_split


@dataclass
class PassCost:
    kind: str  # plain | verify | ss
    label: str  # "plain", "verify 5", "ss γ=4"
    nodes: int  # tree nodes (main rows)
    rows_bottom: int  # rows per pass below the multi-stream layers
    rows_top: int  # rows per pass in the multi-stream layers (= rows_bottom without streams)
    median_ms: float
    ratio: float  # median_ms / plain median_ms
    max_tau: int  # the most tokens this pass can yield (nodes)
    tau_break_even: float  # = ratio
    tau_for_2x: float  # = 2 * ratio
    roofline_ms: float = float("nan")  # the least this pass can take here (bench/roofline.py)
    roofline_ratio: float = float("nan")  # roofline_ms / the plain pass's roofline_ms
    bound: str = ""  # memory | compute, at the roofline
    linears_ms: float = float("nan")  # time in the kernel's Linears (engines on the kernel; bench/pass_parts.py)
    attention_ms: float = float("nan")  # time in the kernel's attention
    rest_ms: float = float("nan")  # everything else: torch's per-op work in the model's modules, Python
    below: dict | None = None  # the parts below those (bench/pass_parts.py's BELOW, ms)

    @property
    def reachable_2x(self) -> bool:
        return self.tau_for_2x <= self.max_tau


def _context_ids(engine, context: int) -> list[int]:
    """`context` real token ids: eval prompts of the task suite one after another (or cycled ids)."""
    ids: list[int] = []
    if engine.tokenizer is not None:
        for cat in CATEGORIES:
            for ex in load_split("eval", cat, n=4):
                ids.extend(engine.tokenizer(ex["prompt"])["input_ids"])
                if len(ids) >= context:
                    return ids[:context]
    vocab = int(engine.model.config.vocab_size)
    while len(ids) < context:
        ids.append(1 + len(ids) % (vocab - 1))
    return ids[:context]


def measure(engine, context: int = 256, verify_rows=(2, 3, 5, 9), repeats: int = 30,
            progress: bool = True, machine: Machine | None = None, drafts=()) -> list[PassCost]:
    """Median time of each pass kind (see the module docstring), plain first in the result; with a
    `machine`, each pass also gets its roofline (the least time its bytes and flops can take)."""
    if repeats < 1:
        raise SpecstreamError(f"repeats must be >= 1, got {repeats}")
    kinds, cache = pass_kinds(engine, context, verify_rows, drafts)
    times, rows = _time_kinds(kinds, repeats, progress)
    if cache.lengths != [context]:
        raise RuntimeError("a measured pass changed the cached prefix")
    plain = statistics.median(times["plain"]) * 1e3
    out = []
    for kind, label, nodes, _ in kinds:
        ms = statistics.median(times[label]) * 1e3
        ratio = ms / plain
        out.append(PassCost(kind, label, nodes, rows[label][0], rows[label][1], round(ms, 3), round(ratio, 3),
                            nodes, round(ratio, 2), round(2 * ratio, 2)))
    if rowinv.uses_kernel(engine.model):
        _with_parts(out, kinds, repeats)
    if machine is not None:
        with_rooflines(out, engine, machine, context)
    return out


def recommended_drafts(engine) -> tuple[tuple[int, int], ...]:
    """(nodes, stream rows per node) of the passes the stream set's recommended draft makes at the engine's precision:
    2 nodes (no copy) up to its node budget, each node carrying the streams its tree's depth needs; () without streams."""
    if engine.streams is None:
        return ()
    cfg = engine.decode_config(mode="ss")
    widths = [1]
    for k in cfg.tree_topk:  # nodes at each depth of the streams' tree
        widths.append(widths[-1] * k)
    nodes = min(cfg.node_budget, sum(widths) + cfg.lookup)
    s = min(len(cfg.tree_topk), engine.streams.cfg.gamma)
    return tuple((n, s) for n in range(2, nodes + 1))


def pass_kinds(engine, context: int = 256, verify_rows=(2, 3, 5, 9), drafts=()) -> tuple[list[tuple], KVCache]:
    """The passes `measure` times, after a prefix of `context` tokens: (kind, label, tree nodes, run) each,
    plain first (run(), called inside torch.inference_mode(), makes one pass as a decoding step does and
    returns its (bottom, top) row counts), and the cache holding the prefix."""
    if context < 1:
        raise SpecstreamError(f"context must be >= 1 token, got {context}")
    verify_rows = tuple(dict.fromkeys(verify_rows))  # each kind once
    streams = engine.streams
    gamma = streams.cfg.gamma if streams is not None else 0
    if any(k < 2 or k > 64 for k in verify_rows):
        raise SpecstreamError(f"verify rows must be between 2 and 64, got {list(verify_rows)}")
    if any(n < 2 or not 1 <= g <= gamma for n, g in drafts):
        raise SpecstreamError(f"drafts need 2 or more nodes and 1 to {gamma} streams a node, got {list(drafts)}")
    widest = max([1, *verify_rows, gamma + 1, *(n for n, _ in drafts)])
    engine.check_length(context, widest)
    ids = _context_ids(engine, context)
    cache = KVCache.for_model(engine.model, batch=1, capacity=context + widest * (1 + gamma) + 8)
    device = engine.device
    with torch.inference_mode():
        positions = torch.arange(context, device=device)[None]
        msa.forward(engine.model, torch.tensor([ids], device=device), positions, engine.causal(context),
                    cache=cache, window=engine.window)
        cache.advance(context)

    def chain_pass(k: int, g: int) -> Callable[[], tuple[int, int]]:
        tree = chain(ids[-1], ids[-k:][: k - 1] if k > 1 else [])
        tokens = torch.tensor([tree.tokens], device=device)
        pos = (context + torch.tensor(tree.depths, device=device))[None]
        visible = tree.visibility(device)[None]
        carriers = torch.arange(k, device=device)[None] if g else None

        def run() -> tuple[int, int]:
            with _step_attention(engine):
                out = msa.forward(engine.model, tokens, pos, visible, streams=streams if g else None,
                                  carriers=carriers, cache=cache, window=engine.window, num_streams=g or None)
            choices, scored = engine.greedy_picks(out.main[0], out.streams[0] if g else None)  # as the loop does
            choices.tolist()  # verification rows' choices, host sync, as the loop's walk does
            if g:  # one node's streams: the next draft, over the draft vocabulary as the drafters rank it
                scores, ids = RowOutput(out.main[0], out.streams[0], None, engine.draft_scores,
                                        None if scored is None else (scored, streams.draft_vocab)).node_scores(k - 1)
                best = greedy.argmax(scores)
                (best if ids is None else ids[best]).tolist()
            return out.rows_bottom, out.rows_top
        return run

    kinds: list[tuple[str, str, int, Callable]] = [("plain", "plain", 1, chain_pass(1, 0))]
    kinds += [("verify", f"verify {k}", k, chain_pass(k, 0)) for k in verify_rows]
    kinds += [("ss", f"ss γ={g}", g + 1, chain_pass(g + 1, g)) for g in range(1, gamma + 1)]
    kinds += [("draft", f"draft {n}×{g}", n, chain_pass(n, g)) for n, g in dict.fromkeys(drafts)]
    return kinds, cache


def _with_parts(costs: list[PassCost], kinds, repeats: int) -> None:
    """Where each pass's time goes (engines on the kernel): kernel calls timed, the rest is the rest."""
    parts = measure_parts(kinds, rounds=max(3, min(repeats, 7)))
    for c in costs:
        p = parts[c.label]
        c.linears_ms, c.attention_ms, c.rest_ms, c.below = p.linears_ms, p.attention_ms, p.rest_ms, p.below


def _step_attention(engine):
    """The attention a decoding step runs (the engine's backend's: row-exact where its Linears are row-invariant)."""
    streams = engine.streams
    return engine.backend.attention(streams.rows if streams is not None else None, per_row=True, causal_prompt=False)


def with_rooflines(costs: list[PassCost], engine, machine: Machine, context: int) -> None:
    """Fill each pass's roofline from its rows (measured) and the model's shape."""
    cfg = engine.streams.cfg if engine.streams is not None else None
    birth = cfg.birth_layer if cfg is not None else engine.model.config.num_hidden_layers
    exact8 = isinstance(compat.lm_head(engine.model), int8_head.Int8Linear)  # fp32's exact 8-bit head, too
    head_bytes = HEAD_BYTES_PER_WEIGHT["int4"] if exact8 else HEAD_BYTES_PER_WEIGHT.get(engine.precision, 4.0)
    limits = [pass_limit(engine.model.config, machine, rows_bottom=c.rows_bottom, rows_top=c.rows_top,
                         birth_layer=birth, main_logit_rows=c.nodes,
                         stream_logit_rows=c.nodes - 1 if c.kind == "ss" else 0, context=context,
                         bytes_per_weight=BYTES_PER_WEIGHT.get(engine.precision, 4.0),
                         head_bytes_per_weight=head_bytes,
                         draft_vocab=cfg.draft_vocab_size if cfg is not None else 0,
                         linear_gops=machine.int8_gops if engine.precision == "int4-a8" else 0.0) for c in costs]
    plain = limits[0].ms
    for c, lim in zip(costs, limits):
        c.roofline_ms, c.roofline_ratio, c.bound = round(lim.ms, 3), round(lim.ms / plain, 3), lim.bound


def _time_kinds(kinds, repeats: int, progress: bool) -> tuple[dict[str, list[float]], dict[str, tuple[int, int]]]:
    """Each kind's pass times over `repeats` rounds (after a warm-up), the kinds' order rotated every round."""
    from tqdm.auto import tqdm

    times: dict[str, list[float]] = {label: [] for _, label, _, _ in kinds}
    rows: dict[str, tuple[int, int]] = {}
    with torch.inference_mode():
        for _, label, _, run in kinds:  # warm-up
            rows[label] = run()
            run()
        for r in tqdm(range(repeats), disable=not progress, desc="pass cost", unit="round"):
            order = kinds[r % len(kinds):] + kinds[: r % len(kinds)]  # rotate: none always first
            for _, label, _, run in order:
                t = clocks.now()
                run()
                times[label].append(clocks.now() - t)
    return times, rows


def markdown(runs: list[dict]) -> str:
    """One table per run; runs are `to_json` records."""
    parts = []
    for run in runs:
        st = run["settings"]
        linears = f", Linears on {st['linears']}" if st.get("linears") else ""
        if st.get("stream_weights") == "int4-a8":
            linears += f", stream rows on 4-bit copies where a pass has {st.get('stream_min_rows', '?')} or more"
        parts.append(f"**{run['label']}** — after a {st['context']}-token prefix, {st['device']}{linears}, {st['threads']} "
                     f"thread(s), median of {st['repeats']} rounds (kinds rotated within each round)\n\n"
                     "| pass | tree nodes | rows (bottom / multi-stream layers) | median ms | × plain | τ to break even | "
                     "τ for 2× | 2× possible (τ ≤ nodes) | roofline ms (bound) | roofline × plain | measured ÷ roofline |"
                     "\n|---|---|---|---|---|---|---|---|---|---|---|")
        for c in run["passes"]:
            possible = "—" if c["kind"] == "plain" else ("yes" if c["reachable_2x"] else "no")
            roof = c.get("roofline_ms")
            has_roof = isinstance(roof, (int, float)) and roof == roof
            roof_cells = (f"{roof:.2f} ({c.get('bound', '')}) | {c['roofline_ratio']:.2f}× | {c['median_ms'] / roof:.2f}"
                          if has_roof else "– | – | –")
            parts.append(f"| {c['label']} | {c['nodes']} | {c['rows_bottom']} / {c['rows_top']} | {c['median_ms']:.2f} | "
                         f"{c['ratio']:.2f}× | {c['tau_break_even']:.2f} | {c['tau_for_2x']:.2f} | {possible} | "
                         f"{roof_cells} |")
        machine = st.get("machine")
        if machine:
            parts.append(f"\nRoofline: this machine read {machine['bandwidth_gbs']:.1f} GB/s and multiplies at most "
                         f"{machine['peak_gflops']:.0f} GFLOP/s ({machine['dtype']}, {st['threads']} thread(s){_peaks(machine)});"
                         " a pass reads every weight and the cached keys/values once, and multiplies each weight by "
                         "every row that passes through it (bench/roofline.py).")
        parts.extend(_parts_table(run["passes"]))
        parts.append("")
    return "\n".join(parts)


def _peaks(machine: dict) -> str:
    """Which arithmetic roof the peak is: the vector units' FMA rate, torch's matmul, or both named."""
    fma, mm = machine.get("fma_gflops", 0.0), machine.get("matmul_gflops", 0.0)
    return f": the vector units' FMA rate; torch's matmul reaches {mm:.0f}" if fma and mm else ""


def _parts_table(passes: list[dict]) -> list[str]:
    """Where each pass's time goes (engines on the kernel), beside its roofline; [] when not measured."""
    def num(x) -> bool:
        return isinstance(x, (int, float)) and x == x

    if not all(num(p.get("linears_ms")) for p in passes):
        return []
    lines = ["\nWhere the time goes (the kernel's calls timed over a few more rounds; the rest is torch's per-op "
             "work in the model's modules and Python, which no roofline counts; a Llama-form layer's steps of one "
             "sequence run as kernel calls of whole layers or runs of layers, counted with the Linears, attention, "
             "norms and SiLU inside):\n",
             "| pass | Linears ms | attention ms | rest ms | (Linears + attention) ÷ roofline |", "|---|---|---|---|---|"]
    for p in passes:
        roof = p.get("roofline_ms")
        eff = f"{(p['linears_ms'] + p['attention_ms']) / roof:.2f}" if num(roof) and roof else "–"
        lines.append(f"| {p['label']} | {p['linears_ms']:.1f} | {p['attention_ms']:.1f} | {p['rest_ms']:.1f} | {eff} |")
    return lines + below_table(passes)


def to_json(label: str, costs: list[PassCost], settings: dict) -> dict:
    return {"label": label, "settings": settings,
            "passes": [asdict(c) | {"reachable_2x": c.reachable_2x} for c in costs]}


def figure_series(runs: list[dict]) -> tuple[list[str], dict[str, list]]:
    """Pass labels (x) and each run's × plain ratios, for the bar figures."""
    labels = list(dict.fromkeys(p["label"] for run in runs for p in run["passes"]))
    series = {}
    for run in runs:
        ratio = {p["label"]: p["ratio"] for p in run["passes"]}
        series[run["label"]] = [ratio.get(x) for x in labels]
    return labels, series


def load_runs(path: str) -> list[dict] | None:
    """Runs of a `pass-cost --json` file; None when the file does not exist; a clear error when it is not one."""
    data = read_json(path, "pass costs")
    if data is None:
        return None
    runs = data.get("runs") if isinstance(data, dict) else None
    ok = isinstance(runs, list) and runs and all(
        isinstance(r, dict) and isinstance(r.get("label"), str) and isinstance(r.get("passes"), list)
        and all(isinstance(p, dict) and isinstance(p.get("label"), str) and isinstance(p.get("ratio"), (int, float))
                for p in r["passes"]) for r in runs)
    if not ok:
        raise SpecstreamError(f"{path} is not a pass-cost result (expected {{'runs': [{{'label', 'passes'}}]}})")
    return runs

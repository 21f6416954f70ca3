"""'How it works': the method told on one real pass of the current (or replayed) run. Pure: trace in,
Markdown out."""

from __future__ import annotations

from .traces import checked, decode_steps, is_speculative, step_of, token_label, trace_gamma


def most_telling_step(trace: dict) -> int:
    """The verification pass with the longest accepted path (ties: the earliest); 0 if there is none."""
    trace = checked(trace)
    best, best_len = 0, -1
    for i, step in enumerate(trace["steps"]):
        if is_speculative(trace) and i == 0:
            continue
        if len(step["accepted"]) > best_len:
            best, best_len = i, len(step["accepted"])
    return best


def _tok(text) -> str:
    """A token as Markdown code; a backtick in it would end the code span and let the rest be read as
    Markdown (or HTML), so it becomes a look-alike."""
    return f"`{token_label(text).replace('`', 'ˋ')}`"


def explain_step(trace: dict, index: int) -> str:
    # long: one narrative, paragraph by paragraph in the order a reader follows a pass; splitting it
    # would scatter the text's order across helpers
    trace = checked(trace)
    step = step_of(trace, index)
    meta = trace["meta"]
    gamma = trace_gamma(trace)
    intro = (
        "**Speculative Streaming** lets one model draft *and* verify. Besides its normal (main) stream, the top "
        f"`Ns = {meta.get('n_stream_layers', '?')}` of its `{meta.get('num_layers', '?')}` layers also run "
        f"`γ = {gamma}` *speculative streams* per position: stream *j* predicts the token *j* steps beyond the main "
        "stream's next token. One forward pass therefore **verifies** the draft tree built by the previous pass "
        "and **drafts** the next one from the streams of the last accepted token — no draft model, no extra heads, "
        "only γ·d stream embeddings (plus small adapters)."
    )
    if not is_speculative(trace):
        return (intro + "\n\nThis trace is a **plain autoregressive** run: every forward pass produces exactly one "
                f"token (τ = 1). Pass {index} fed the cached prefix of {step.get('prefix_len', '?')} tokens and "
                f"produced {_tok(step.get('bonus', {}).get('text'))}.")
    if index == 0:
        bonus = step.get("bonus", {}).get("text")
        return (intro + f"\n\n### Pass 0 — the prefill\nThe whole prompt ({len(trace['prompt'].get('token_ids', []))} "
                f"tokens) goes through the model in one pass. The main stream at its last position chose "
                f"{_tok(bonus)} (the first output token), and that position's γ streams produced the first draft. "
                "Move the step slider to a later pass to see a draft being verified.")
    nodes = step["nodes"]
    accepted = step["accepted"]
    root = nodes[0]
    by_depth: dict[int, list[dict]] = {}
    copied = [n for n in nodes[1:] if n.get("copied") is True]
    for n in nodes[1:]:
        if n.get("copied") is not True:
            by_depth.setdefault(n["depth"], []).append(n)
    lines = [intro, f"\n### Pass {index}, step by step"]
    lines.append(f"1. **Draft.** The cache holds {step.get('prefix_len', '?')} accepted tokens. The previous pass "
                 f"ended with the token {_tok(root.get('text'))} (the tree's root, already correct), and its γ "
                 "streams proposed candidates for the following tokens:")
    for depth in sorted(by_depth):
        seen, cands = set(), []
        for n in by_depth[depth]:
            if n["token"] not in seen:
                seen.add(n["token"])
                cands.append(f"{_tok(n.get('text'))} ({n.get('prob', 0):.2f})")
        lines.append(f"   - stream {depth} → {', '.join(cands[:6])}{' …' if len(cands) > 6 else ''}")
    if copied:
        source = ("the context repeated its last words (or, where it did not, the model's own answers to "
                  "training prompts in the stream set's n-gram store did)" if meta.get("ngrams")
                  else "the context repeated its last words")
        lines.append(f"   - prompt lookup → {' '.join(_tok(n.get('text')) for n in copied[:8])}: {source}, so "
                     "what followed them there was copied onto the tree (◆ nodes; "
                     f"up to {meta.get('lookup', '?')} tokens, sharing the stream nodes it agrees with)")
    n_pruned = sum(1 for n in nodes if n.get("pruned"))
    prune = meta.get("prune_threshold", 0)
    lines.append(f"2. **Tree.** Each stream's candidates hang under every candidate of the stream before it: "
                 f"{len(nodes)} nodes (node budget {meta.get('node_budget', '?')}, per-depth top-k "
                 f"{meta.get('topk', '?')}). "
                 + (f"The pruning layer (an early exit at layer N−Ns) dropped {n_pruned} node(s) whose transition "
                    f"probability was below {prune} before the expensive stream layers." if prune else
                    "Pruning was off for this run."))
    rows = step.get("rows", {})
    lines.append(f"3. **One forward pass** ran {rows.get('bottom', '?')} rows through the lower layers and "
                 f"{rows.get('top', '?')} rows (each surviving node plus its γ streams) through the top Ns layers, "
                 "under the multi-stream attention mask shown above: a node sees the prefix and its ancestors; "
                 "stream j of a node also sees streams 1..j of that node; the main stream never sees streams — so "
                 "its logits are exactly the base model's.")
    path = " → ".join(_tok(nodes[a].get("text")) for a in accepted)
    bonus = step.get("bonus", {}).get("text")
    n_acc = len(accepted) - 1
    verdict = (f"4. **Verify.** The base model's choices matched the draft along {path}: {n_acc} draft token(s) "
               f"accepted" if n_acc else
               f"4. **Verify.** The base model's choice after {_tok(root.get('text'))} matched no drafted child: "
               "no draft token accepted")
    verdict += (f", plus the **bonus** token {_tok(bonus)} — the model's own next token after the accepted path. "
                f"This pass produced **{n_acc + 1} token(s)** where plain decoding produces 1.")
    lines.append(verdict)
    lines.append(f"5. **Next draft.** The streams of the last accepted node ({_tok(nodes[accepted[-1]].get('text'))}) "
                 f"were computed in this same pass; they form the next tree. The accepted path's keys/values move "
                 "into place in the cache; the rest is overwritten later.")
    taus = [len(s["accepted"]) for s in decode_steps(trace)]
    if taus:
        lines.append(f"\nOver the run: {len(trace['steps'])} forward passes for "
                     f"{sum(len(s['emitted']) for s in trace['steps'])} tokens — "
                     f"τ = {sum(len(s['emitted']) for s in trace['steps']) / len(trace['steps']):.2f}.")
    return "\n".join(lines)

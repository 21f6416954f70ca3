"""HTML of a multi-lane race (a `race.RaceView` with `lanes`): the one table of every lane (τ, tokens/s, speedup over
plain decoding, the check against it), the output check over all lanes, the other lanes' tinted texts and the lane
picker's note. Pure functions; everything from a trace or a visitor is escaped, numbers go through `number`."""

from __future__ import annotations

import html

from .lanes import LABELS, SHORT
from .race import RaceView, SideView, number, tau
from .render import render_badge, render_text

ROW_NAMES = {"plain": "plain (AR)", "fast": "speculative (SS)", "teaching": "SS teaching", "lookup": "prompt lookup",
             "medusa": "Medusa heads", "assisted": "assisted"}


def lane_speedup(lane: SideView, plain: SideView) -> float | None:
    """tokens/s over plain decoding's (the same as the wall-time ratio where both made as many tokens)."""
    mine, base = number(lane.stats.get("tokens_per_s")), number(plain.stats.get("tokens_per_s"))
    return mine / base if mine and base else None


def _check(side: SideView, key: str) -> str:
    if key == "plain":
        return "referent"
    if side.identical is None:
        return "racing…" if not side.done else "–"
    return "✔ identical" if side.identical else "≠ differs"


def render_lane_table(view: RaceView) -> str:
    """Every lane in one table (τ, tokens/s, speedup over plain decoding, the check against it); the lane the per-pass
    views follow is underlined. Compact, so that six lanes stay in the first screen at 1280×720."""
    plain = view.ar
    rows = []
    for key, side in view.lanes.items():
        s = {k: number(side.stats.get(k)) for k in ("new_tokens", "tokens_per_s")}
        x = lane_speedup(side, plain) if key != "plain" else 1.0
        mark = ' class="lab-shown"' if key == view.shown and len(view.lanes) > 2 else ""
        rows.append(f'<tr{mark} data-lane="{html.escape(key)}" title="{html.escape(LABELS.get(key, key))}">'
                    f'<th>{html.escape(ROW_NAMES.get(key, key))}</th><td>{s["new_tokens"]:.0f}</td>'
                    f'<td>{tau(side.stats):.2f}</td><td>{s["tokens_per_s"]:.1f}</td>'
                    f'<td>{"–" if x is None else f"{x:.2f}×"}</td><td class="lab-check">{_check(side, key)}</td></tr>')
    skipped = "".join(f'<tr class="lab-skipped"><th>{html.escape(ROW_NAMES.get(k, k))}</th>'
                      f'<td colspan="5">not raced: {html.escape(why)}</td></tr>' for k, why in view.skipped.items()
                      if k in LABELS)
    where = "replayed trace" if view.replay else (f"elapsed {number(view.elapsed_s):.2f} s, {len(view.lanes)} lanes "
                                                  "interleaved pass by pass")
    if view.precision and view.device:  # what actually ran, not what the model line resolved beforehand
        where += f" · {view.precision} on {view.device}" + (f" · Linears: {view.linears}" if view.linears else "")
    return ('<table class="lab-meters lab-lane-table"><tr><th></th><th>tokens</th><th>τ</th><th>tokens/s</th>'
            f'<th>speedup</th><th>= plain</th></tr>{"".join(rows)}{skipped}</table>'
            f'<div class="lab-note">{html.escape(where)}</div>')


def render_lane_badge(view: RaceView) -> str:
    """The output check: the two-lane badge (`render.render_badge`), or, with more lanes, whether every lane's tokens
    are plain decoding's, and what plain decoding's output equals at this precision."""
    others = {k: v for k, v in view.lanes.items() if k != "plain"}
    if len(others) <= 1 or not view.finished:
        return render_badge(view)
    equals = view.plain_equals or view.equals
    if not equals:
        referent = "plain decoding is the referent"
    elif equals.startswith("plain decoding"):  # the precision's own plain decoding is the referent (int4-a8, …)
        referent = f"the referent is {equals}"
    else:
        referent = f"plain decoding's output equals {equals}"
    known = {k: v.identical for k, v in others.items() if v.identical is not None}
    if not known:
        return '<div class="lab-badge pending">this trace records no lane check</div>'
    differ = [SHORT.get(k, k) for k, same in known.items() if not same]
    if not differ:
        why = ("sampling: each lane draws from the same distribution, the same text this time" if view.sampling
               else f"greedy · {referent}")
        return (f'<div class="lab-badge equal" data-equal="true">✔ all {len(known)} lanes identical to plain decoding'
                f'<div class="lab-note">{html.escape(why)}</div></div>')
    why = ("expected in sampling mode: the lanes consume random numbers differently" if view.sampling
           else f"{', '.join(differ)} part from plain decoding; {referent}")
    return (f'<div class="lab-badge differ" data-equal="false">≠ {len(differ)} of {len(known)} lanes differ'
            f'<div class="lab-note">{html.escape(why)}</div></div>')


def render_lane_texts(view: RaceView) -> str:
    """The lanes other than plain decoding and the shown one, each tinted by pass ("" when there are none)."""
    parts = [f'<div class="lab-lane" data-lane="{html.escape(k)}"><div class="lab-lane-name">'
             f'{html.escape(LABELS.get(k, k))}</div>{render_text(side, True, "…")}</div>'
             for k, side in view.lanes.items() if k not in ("plain", view.shown) and side.pieces]
    return f'<div class="lab-lanes">{"".join(parts)}</div>' if parts else ""


def lanes_note(reasons: dict[str, str], fast: str, teaching: str) -> str:
    """Under the lane picker: which draft is which, and each lane this model cannot race, with the reason."""
    lines = [f"<b>fastest draft</b>: the stream set's fastest measured tree ({html.escape(fast)})",
             f"<b>teaching draft</b>: the streams' own tree ({html.escape(teaching)}), every stream's proposals and "
             "attention shown"]
    lines += [f"{html.escape(LABELS[k])}: unavailable, {html.escape(why)}" for k, why in reasons.items() if k in LABELS]
    return f'<div class="lab-note" id="lanes-why">{"<br>".join(lines)}</div>'


LANE_CSS = """
.lab-meters tr.lab-shown th { text-decoration: underline; }
.lab-lane-table th, .lab-lane-table td { padding: 3px 8px; white-space: nowrap; }
.lab-meters tr.lab-skipped th, .lab-meters tr.lab-skipped td { color: #555; text-align: left; }
.lab-lanes { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 10px; }
.lab-lane-name { font-weight: 600; margin: 2px 0 4px; }
"""

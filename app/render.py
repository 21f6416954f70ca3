"""HTML and Markdown of the lab's panels: the race (a `race.RaceView`), messages and the model line.
Pure functions; everything from a trace or a visitor is escaped."""

from __future__ import annotations

import html
import logging

from specstream_core.model import exactness
from specstream_core.model.loading import resolve_precision
from specstream_core.model.streams import read_stream_config

from .models import ModelSpec, default_device, layers_note, spec_gamma
from .race import RaceView, SideView, number, outputs_equal, speedup, tau

log = logging.getLogger("specstream.lab")

STEP_TINTS = ("#cfe8ff", "#d7f5d0", "#ffe3c2", "#ead7ff", "#fff3b0", "#ffd6e0")

CSS = """
.lab-text { white-space: pre-wrap; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 14px;
  line-height: 1.7; min-height: 7em; max-height: 22em; overflow-y: auto; padding: 10px 12px;
  border: 1px solid var(--border-color-primary); border-radius: 8px; background: var(--background-fill-primary); }
.lab-empty { color: #555; }
.lab-text .tok { border-radius: 3px; color: #111; }
.lab-text .tok.sel-pass { outline: 2px solid #1f5fa8; outline-offset: -1px; font-weight: 700; }
.lab-meters { width: 100%; border-collapse: collapse; font-size: 14px; }
.lab-meters th, .lab-meters td { padding: 4px 10px; text-align: right; border: none !important;
  border-bottom: 1px solid #e5e5e5 !important; }
.lab-meters th:first-child { text-align: left; }
.lab-note { font-size: 14px; line-height: 1.45; color: #3c3c3c; margin-top: 4px; }
.lab-speedup, .lab-badge { padding: 8px 14px; border-radius: 10px; font-size: 18px; min-height: 2.4em; }
.lab-speedup { background: #eef6ff; }
.lab-big { font-size: 34px; font-weight: 700; color: #1f5fa8; }
.lab-badge.equal { background: #e7f7e4; color: #1d6b18; font-weight: 600; }
.lab-badge.differ { background: #fff1e0; color: #8a4b00; font-weight: 600; }
.pending { color: #4a4a4a; background: #f3f3f3; }
.lab-error { background: #fdecea; color: #8a1c12; padding: 8px 12px; border-radius: 8px; font-weight: 600; }
.lab-info { background: #eef6ff; color: #1f3f68; padding: 8px 12px; border-radius: 8px; }
.legend span { padding: 1px 6px; border-radius: 3px; margin-right: 6px; }
/* the presenter view; !important: Gradio repeats every rule above under its container's classes, which
   outrank a body class */
body.lab-presenter, body.lab-presenter .gradio-container { background: #fff !important; color: #000 !important; }
body.lab-presenter .lab-text { font-size: 24px !important; line-height: 1.6 !important; max-height: 60vh !important;
  color: #000 !important; border: 2px solid #000 !important; }
body.lab-presenter .lab-text .tok { color: #000 !important; }
body.lab-presenter .lab-text .tok.sel-pass { outline: 3px solid #000 !important; }
body.lab-presenter .lab-big { font-size: 60px !important; color: #002e6e !important; }
body.lab-presenter .lab-speedup, body.lab-presenter .lab-badge { font-size: 28px !important; }
body.lab-presenter .lab-note { font-size: 20px !important; color: #000 !important; }
body.lab-presenter .lab-meters { font-size: 18px !important; color: #000 !important; }
body.lab-presenter .lab-meters th, body.lab-presenter .lab-meters td { border-bottom: 2px solid #000 !important; }
body.lab-presenter .prose { font-size: 20px !important; color: #000 !important; }
body.lab-presenter .lab-badge.equal { background: #d4f5cc !important; color: #0b4a06 !important; }
"""

# the presenter view: ← and → step through passes (the pass buttons), unless a text field has the focus
PRESENTER_JS = """<script>
document.addEventListener('keydown', (e) => {
  if (!document.body.classList.contains('lab-presenter') || e.altKey || e.ctrlKey || e.metaKey) return;
  const t = e.target;
  if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.isContentEditable)) return;
  const id = e.key === 'ArrowRight' ? 'pass-next' : e.key === 'ArrowLeft' ? 'pass-prev' : null;
  const el = id && document.getElementById(id);
  if (!el) return;
  e.preventDefault();
  (el.tagName === 'BUTTON' ? el : el.querySelector('button')).click();
});
</script>"""

# the checkbox's value <- ?presenter=1 on opening; the page's class <- the checkbox
PRESENTER_FROM_URL = ("() => { const on = new URLSearchParams(window.location.search).get('presenter') === '1';"
                      " document.body.classList.toggle('lab-presenter', on); return on; }")
PRESENTER_TOGGLE = "(on) => { document.body.classList.toggle('lab-presenter', !!on); }"

INTRO = """# Speculative Streaming lab
One model drafts **and** verifies: γ speculative streams in its top layers propose the next tokens while the same
forward pass verifies the previous proposal. **Run the race**: plain decoding (AR) against speculative streaming
(SS), interleaved pass by pass on the same device, each timed on its own.
"""

LEGEND = ('<div class="legend lab-note">Speculative output: each background colour is one forward pass; '
          '<span style="box-shadow:inset 0 -2px 0 #ff9f1c;background:#eee">underlined</span> = that pass\'s bonus '
          'token after ≥1 accepted draft; <span style="outline:2px solid #1f5fa8;font-weight:700">outlined</span> = '
          'the pass selected below. Hover a token for its pass.</div>')


def message(text: str, kind: str = "error") -> str:
    return f'<div class="lab-{kind}">{html.escape(text)}</div>' if text else ""


def mode_help(modes: list[str]) -> str:
    """The stream mode radio's help: what each offered mode means, and only those."""
    meaning = {"lossless": "base weights frozen, the output is the base model's own",
               "shared": "a LoRA shared by main and streams: a new model, its output differs from the base's"}
    return "; ".join(f"{m}: {meaning.get(m, m)}" for m in modes)


def shown_precision(spec: ModelSpec) -> str:
    """The precision a spec loads at ("auto" resolved: int4-a8 on a GGUF-converted base, else the checkpoint's own
    dtype, `resolve_precision`) on the device it will run on (a GPU where the host has one)."""
    return resolve_precision(spec.precision, spec.device or default_device(), base=spec.base)


def model_info(spec: ModelSpec | None, mode: str) -> str:
    if spec is None:
        return "No model is configured on this host: upload a trace to replay a recorded run."
    if mode not in spec.modes:
        return f"⚠ model {spec.name!r} has no such stream mode; choose {' or '.join(spec.modes)}"
    try:
        gamma = spec_gamma(spec, mode)
        streams = spec.streams.get(mode)
        trained = "fresh, untrained"
        if streams:
            steps = read_stream_config(streams).trained_steps
            trained = f"trained ({steps} steps)" if steps else "untrained (fresh)"
    except Exception as exc:  # the streams folder went away: the page says so, without its path
        log.warning("model info for %s (%s): %s", spec.name, mode, exc)
        return f"⚠ the {mode} streams of {spec.name!r} cannot be read on this host"
    equals = exactness.for_base(spec.base, spec.precision, spec.device or "cpu", mode)
    return (f"**γ = {gamma}** speculative streams · {mode} mode · {trained} streams · precision "
            f"{shown_precision(spec)} · greedy output equals {equals}{layers_note(spec)}")


def render_text(side: SideView, tinted: bool, placeholder: str = "", selected: int | None = None) -> str:
    """A side's text; tinted: one background per forward pass, and the tokens of pass `selected` (if any)
    outlined (class `sel-pass`)."""
    if not side.pieces:
        return f'<div class="lab-text lab-empty">{html.escape(placeholder)}</div>'
    if not tinted:
        return f'<div class="lab-text">{html.escape(side.text)}</div>'
    spans = []
    for p in side.pieces:
        colour = STEP_TINTS[p.step % len(STEP_TINTS)]
        title = f"pass {p.step}: " + (f"{p.drafts} draft token(s) accepted + bonus" if p.drafts else "bonus only")
        cls = "tok bonus" if p.bonus and p.drafts else "tok"
        if selected is not None and p.step == selected:
            cls += " sel-pass"
        style = f"background:{colour}" + (";box-shadow:inset 0 -2px 0 #ff9f1c" if p.bonus and p.drafts else "")
        spans.append(f'<span class="{cls}" style="{style}" title="{html.escape(title)}" '
                     f'data-step="{p.step}">{html.escape(p.text)}</span>')
    return f'<div class="lab-text">{"".join(spans)}</div>'


def render_meters(view: RaceView) -> str:
    def cell(side: SideView, name: str) -> str:
        s = {k: number(side.stats.get(k)) for k in ("new_tokens", "forward_passes", "tokens_per_s", "wall_s")}
        return (f'<tr><th>{name}</th><td>{s["new_tokens"]:.0f}</td><td>{s["forward_passes"]:.0f}</td>'
                f'<td>{tau(side.stats):.2f}</td><td>{s["tokens_per_s"]:.1f}</td><td>{s["wall_s"]:.2f} s</td>'
                f'<td>{"done" if side.done else "running…"}</td></tr>')

    label = "replayed trace" if view.replay else f"elapsed {number(view.elapsed_s):.2f} s (both, interleaved)"
    if view.precision and view.device:  # what actually ran, not what the model line resolved beforehand
        label += f" · {view.precision} on {view.device}" + (f" · Linears: {view.linears}" if view.linears else "")
    label = html.escape(label)
    return ('<table class="lab-meters"><tr><th></th><th>tokens</th><th>forward passes</th><th>τ</th>'
            '<th>tokens/s</th><th>own time</th><th></th></tr>'
            f'{cell(view.ar, "plain (AR)")}{cell(view.ss, "speculative (SS)")}</table>'
            f'<div class="lab-note">{label}</div>')


def render_speedup(view: RaceView) -> str:
    if not view.finished:
        return '<div class="lab-speedup pending">racing…</div>'
    x = speedup(view)
    if x is None:
        return '<div class="lab-speedup pending">no speedup: this trace has no baseline run</div>'
    a = {k: number(view.ar.stats.get(k)) for k in ("wall_s", "new_tokens", "forward_passes")}
    s = {k: number(view.ss.stats.get(k)) for k in ("wall_s", "new_tokens", "forward_passes")}
    cr = a["forward_passes"] / s["forward_passes"] if s["forward_passes"] else 0.0
    basis = ("wall-clock, same output length" if a["new_tokens"] == s["new_tokens"]
             else "tokens/s ratio (the outputs have different lengths)")
    return (f'<div class="lab-speedup"><span class="lab-big">{x:.2f}×</span> speedup'
            f'<div class="lab-note">AR {a["wall_s"]:.2f} s / SS {s["wall_s"]:.2f} s · {basis} · '
            f'call reduction {cr:.2f}× · τ = {tau(view.ss.stats):.2f} · same device, interleaved pass by pass'
            '</div></div>')


def _ran_on(view: RaceView) -> str:
    return f"{view.precision} on {view.device}" if view.precision and view.device else "this precision"


def _where(view: RaceView) -> str:
    """The first differing token and, from a live run, the plain pass's logit margin there."""
    d = view.difference
    if not d:
        return ""
    out = f"first difference at token {int(number(d.get('position')))}"
    if d.get("margin") is not None:
        out += (f"; the plain pass preferred its token by a logit margin of {number(d.get('margin')):.3g} "
                f"(its top two logits {number(d.get('runner_up_gap')):.3g} apart)")
    return out


def render_badge(view: RaceView) -> str:
    if not view.finished:
        return '<div class="lab-badge pending">comparing when both finish…</div>'
    if not view.ar.pieces or not view.ss.pieces:
        return '<div class="lab-badge pending">only one side recorded</div>'
    if outputs_equal(view):
        if view.sampling:
            why = "sampling, yet the same text this time"
        elif view.exact is False:
            why = (f"greedy decoding at {_ran_on(view)}, which is not exact: a speculative pass can round "
                   "differently from a plain pass, so a near-tie could have flipped a token (none did)")
        else:
            why = "greedy decoding: speculative streaming is lossless — every token is the base model's own choice"
        return f'<div class="lab-badge equal" data-equal="true">✔ identical outputs<div class="lab-note">{why}</div></div>'
    if view.sampling:
        why = ("expected in sampling mode: both decoders sample from exactly the base model's distribution, but "
               "tree rejection sampling consumes random numbers differently, so individual samples differ even "
               "with the same seed")
    elif view.exact is False:
        why = (f"at {_ran_on(view)}, which is not exact, a speculative pass can round differently from a plain "
               f"pass and flip a near-tie: {_where(view) or 'the outputs part'}")
    elif view.exact:
        why = (f"{_where(view) or 'the outputs part'}; {_ran_on(view)} is exact, so this should not happen — "
               "please report this run's trace")
    else:
        why = f"a recorded greedy run at {_ran_on(view)}: {_where(view) or 'the outputs part'}"
    return f'<div class="lab-badge differ" data-equal="false">≠ outputs differ<div class="lab-note">{html.escape(why)}</div></div>'

"""The Speculative Streaming lab: a Gradio app racing speculative streaming against plain decoding.

    python app.py            # or: from app.ui import build_demo, launch

figures.py (pure plots from traces) · explain.py (the method on one pass) · race.py (interleaved
decoders, text rendering) · models.py (allow-listed models, engine cache) · presets.py · ui.py (wiring).
"""

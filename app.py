"""Hugging Face Spaces / local entry point of the Speculative Streaming lab.

Models: the default SmolLM2-135M-Instruct (with its streams from assets/smollm2/), plus the host's allow-list in SPECSTREAM_MODELS.
Server: GRADIO_SERVER_NAME (default 127.0.0.1) and GRADIO_SERVER_PORT (default 7860).
On a ZeroGPU Space the default model loads here, at module level, and each race runs in a GPU worker
(app/zerogpu.py); docs/SPACES.md says how each kind of Space runs.
"""

import logging
import os

try:  # ZeroGPU patches torch's CUDA calls: `spaces` is imported before torch
    import spaces

    # only the race borrows the GPU (handlers.run_race): the other handlers hold the lab's locks and stay here
    spaces.disable_gradio_auto_wrap()
except ImportError:
    pass

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from app.ui import build_demo, launch  # noqa: E402

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
demo = build_demo(preload=True)

if __name__ == "__main__":
    launch(demo)

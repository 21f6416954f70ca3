import os
import sys
import warnings

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("SPECSTREAM_DEFAULT_BASE", "none")  # tests use tiny models, never the 135M default
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))

import torch  # noqa: E402

# tiny models: one thread is as fast, and avoids OpenMP spin-waits when another process shares the cores
torch.set_num_threads(1)
warnings.filterwarnings("ignore", message=".*fresh, untrained speculative streams.*")

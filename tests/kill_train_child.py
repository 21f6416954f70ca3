"""Child process of test_kill.py: trains the kill test's tiny streams and, when asked, SIGKILLs itself at
one point of its n-th checkpoint save.

    python tests/kill_train_child.py OUT_DIR [none|mid-write|before-rename|after-rename] [N]

Resumes when OUT_DIR holds a checkpoint. Not collected by pytest (no test_ prefix).
"""

import io
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from specstream_core.training.data import pack_examples as pack  # noqa: E402
from specstream_core.training.config import TrainConfig  # noqa: E402
from specstream_core.training.streams import train  # noqa: E402
from tiny_models import tiny_model  # noqa: E402

CFG = TrainConfig(mode="lossless", gamma=2, n_stream_layers=1, adapter_rank=2, steps=12, batch_size=4, seq_len=64,
                  precision="fp32", checkpoint_every=4, warmup=3, log_every=1)


def data():
    """Short repeating patterns (as test_train.periodic_data)."""
    g = torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(120):
        period = int(torch.randint(2, 5, (1,), generator=g))
        pattern = torch.randint(3, 128, (period,), generator=g).tolist()
        seq = (pattern * 20)[:32]
        pairs.append((seq[:6], seq[6:]))
    return pack(pairs, 64)


def run(out: str, where: str = "none", nth: int = 1, log=print) -> dict:
    torch.set_num_threads(1)
    saves = {"n": 0}

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    real_save, real_replace = torch.save, os.replace
    if where == "mid-write":  # half of the checkpoint's bytes reach the temporary file, then the kill
        def save(obj, f, *a, **k):
            if isinstance(obj, dict) and "streams" in obj:
                saves["n"] += 1
                if saves["n"] == nth:
                    buf = io.BytesIO()
                    real_save(obj, buf, *a, **k)
                    f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                    f.flush()
                    die()
            return real_save(obj, f, *a, **k)
        torch.save = save
    elif where in ("before-rename", "after-rename"):  # the temporary file is complete
        def replace(src, dst):
            if str(dst).endswith("checkpoint.pt"):
                saves["n"] += 1
                if saves["n"] == nth and where == "before-rename":
                    die()
                real_replace(src, dst)
                if saves["n"] == nth:
                    die()
                return None
            return real_replace(src, dst)
        os.replace = replace
    resume = os.path.isfile(os.path.join(out, "checkpoint", "checkpoint.pt"))
    return train(tiny_model("llama", seed=0), CFG, data(), out, resume=resume, progress=False, log=log)


if __name__ == "__main__":
    run(sys.argv[1], *(sys.argv[2:3] or ["none"]), *[int(x) for x in sys.argv[3:4]])

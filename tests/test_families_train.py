"""A stream set trains on each family (Qwen3, Phi-3, Gemma 3, OLMo 2) for a few steps, with stream-row adapters on
its own projections (Phi-3's fused ones too), saves, reloads beside its checkpoint and decodes exactly: speculative
output equals transformers' greedy generate of the checkpoint, token for token."""

import json

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.training.config import TrainConfig
from specstream_core.training.data import pack_examples
from specstream_core.training.streams import train
from tiny_models import FAMILIES, hf_greedy, prompts, save_tiny_family_dir

NEW = 12


def _data(n: int = 24, seed: int = 0):
    """Sequences that repeat a short random pattern (something for the streams to learn)."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        pattern = torch.randint(3, 128, (int(torch.randint(2, 5, (1,), generator=g)),), generator=g).tolist()
        seq = (pattern * 10)[:16]
        pairs.append((seq[:4], seq[4:]))
    return pack_examples(pairs, 32)


@pytest.mark.parametrize("family", FAMILIES)
def test_streams_train_save_reload_and_decode_exactly(family, tmp_path):
    from transformers import AutoModelForCausalLM

    base = save_tiny_family_dir(tmp_path / "base", family)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    ids = prompts(2, seed=7, min_len=6, max_len=16)
    refs = [hf_greedy(model, p, NEW) for p in ids]
    cfg = TrainConfig(mode="lossless", gamma=2, n_stream_layers=2, adapter_rank=4, steps=3, batch_size=4, seq_len=32,
                      lr=5e-3, warmup=1, precision="fp32", checkpoint_every=0, log_every=1)
    out = tmp_path / "streams"
    summary = train(model, cfg, _data(), str(out), progress=False, log=lambda *a: None)
    assert summary["steps"] == 3 and all(torch.isfinite(torch.tensor(h["loss"])) for h in summary["history"])
    saved = json.loads((out / "streams_config.json").read_text())
    assert saved["model_type"] == family and saved["trained_steps"] == 3 and saved["adapter_rank"] == 4

    engine = Engine.load(base, streams_dir=str(out), precision="fp32", chat=False)
    assert engine.streams.cfg.trained_steps == 3 and len(engine.streams.adapters) > 0
    ss = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(3, 2, 1))
    assert [engine.generate(p, ss).token_ids for p in ids] == refs, family

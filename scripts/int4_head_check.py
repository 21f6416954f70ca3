"""Why int4 on the default model has an 8-bit head: its decoder layers are the GGUF file's own Q4_1 groups
(the fp32 model's weights exactly), and its head is the file's own Q8_0 groups (the tied embedding: the
fp32 head exactly), while a 4-bit head (those weights quantized again) would be its one change of weights.
Decodes the lab's presets (2 per category, 64 tokens, plain loop, one thread) four ways, one prompt at a
time: fp32 on the kernel, and int4 with the head as loaded (8-bit), at its fp32 weights, or at 4 bits;
prints how much of the fp32 output each keeps and their times.

    python scripts/int4_head_check.py      # about 5 minutes on the default model
"""
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)
from app.presets import presets  # noqa: E402
from specstream_core.bench.speed import shared_prefix  # noqa: E402
from specstream_core.decoding.engine import Engine  # noqa: E402
from specstream_core.model import compat, defaults  # noqa: E402
from specstream_core.kernels.linears import int4, rowinv  # noqa: E402

base, _ = defaults.resolve(None, None)
engines = {"fp32": Engine.load(base, None, precision="fp32"), "int4 (8-bit head, as loaded)": Engine.load(base, None, precision="int4"),
           "int4, fp32 head": Engine.load(base, None, precision="int4"), "int4, 4-bit head": Engine.load(base, None, precision="int4")}
weight = compat.lm_head(engines["int4, fp32 head"].model).dequantized()  # the file's 8-bit groups: fp32 exactly
fp32_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False).requires_grad_(False)
fp32_head.weight.data = weight
rowinv.make_row_invariant(fp32_head)
for name, head in (("int4, fp32 head", fp32_head), ("int4, 4-bit head", int4.Int4Linear(*int4.quantize_groups(weight)))):
    compat.causal_lm(engines[name].model).lm_head = head
    engines[name]._lm_head = head  # the engine keeps its head

outputs = {name: [] for name in engines}
seconds = dict.fromkeys(engines, 0.0)
with torch.inference_mode():
    for text in presets(per_category=2).values():
        ids = engines["fp32"].encode(text)
        for name, engine in engines.items():
            t = time.perf_counter()
            outputs[name].append(engine.generate(ids, engine.decode_config(mode="ar", max_new_tokens=64)).token_ids)
            seconds[name] += time.perf_counter() - t
for name, outs in outputs.items():
    same = sum(a == b for a, b in zip(outs, outputs["fp32"]))
    print(f"{name}: identical to fp32 on {same}/{len(outs)} prompts, "
          f"{shared_prefix(outs, outputs['fp32']):.0%} of the tokens before the first difference, {seconds[name]:.1f} s")

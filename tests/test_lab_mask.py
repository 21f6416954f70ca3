"""The lab's mask view is the engine's mask: `app.figures.step_mask` on a recorded trace equals the
float mask the multi-stream layers received in that very pass (prefix columns folded into one)."""

import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.model import compat
from helpers import perturbed_streams
from tiny_models import prompts, tiny_model


def test_mask_view_equals_the_engines_mask(monkeypatch):
    from app.figures import step_mask

    model = tiny_model("llama", seed=3)
    streams = perturbed_streams(model, gamma=3, seed=4)
    engine = Engine(model, None, streams)
    seen: list[torch.Tensor] = []
    run_layer = compat.run_layer

    def recording(layer, h, mask, pe, cache):
        seen.append(mask)
        return run_layer(layer, h, mask, pe, cache)

    monkeypatch.setattr(compat, "run_layer", recording)
    try:
        for prune in (0.0, 0.05):
            cfg = DecodeConfig(mode="ss", max_new_tokens=10, stop_on_eos=False, tree_topk=(3, 2, 1), trace=True,
                               prune_threshold=prune)
            dec = engine.start(prompts(1, seed=5)[0], cfg)
            top_masks = []
            while not dec.done:
                seen.clear()
                dec.step()
                top_masks.append(seen[-1][0, 0])  # the last layer's mask of this pass: [q, prefix + q]
            trace = dec.trace
            for index in range(1, len(trace["steps"])):
                lab, rows, _ = step_mask(trace, index)
                prefix = trace["steps"][index]["prefix_len"]
                engine_mask = top_masks[index] == 0  # 0 = may attend
                assert engine_mask.shape == (len(rows), prefix + len(rows))
                assert all(row[0] == int(engine_mask[r, :prefix].all()) for r, row in enumerate(lab))
                assert [row[1:] for row in lab] == engine_mask[:, prefix:].int().tolist()
    finally:
        streams.detach()

"""Sliding windows smaller than the prompt plus the draft tree: tree passes that cross a window's edge stay exact.
Gemma 3 (local layers interleaved with global ones), Qwen3 with use_sliding_window (windows from max_window_layers
on: layers that differ), Mistral and Phi-3 (one window for every layer), saved and loaded as a user loads them."""

import pytest
import torch

from specstream_core import DecodeConfig, Engine
from specstream_core.backends import a8_available
from specstream_core.model import compat
from helpers import randomized
from tiny_models import hf_greedy, prompts, save_tiny_family_dir

pytestmark = pytest.mark.filterwarnings("ignore:using 3 fresh")  # fresh streams, randomized below
WINDOW = 5
NEW = 16
PROMPTS = prompts(3, seed=7, min_len=8, max_len=20)  # every prompt longer than the window
CASES = {"gemma3_text": dict(sliding_window=WINDOW),
         "qwen3": dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2),
         "mistral": dict(sliding_window=WINDOW), "phi3": dict(sliding_window=WINDOW)}
SS = DecodeConfig(mode="ss", max_new_tokens=NEW, stop_on_eos=False, tree_topk=(4, 3, 2, 1))
AR = DecodeConfig(mode="ar", max_new_tokens=NEW, stop_on_eos=False)


@pytest.fixture(scope="module", params=list(CASES))
def windowed(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    family = request.param
    path = save_tiny_family_dir(tmp_path_factory.mktemp(family), family, **CASES[family])
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ref.generation_config.eos_token_id = None
    return family, path, [hf_greedy(ref, p, NEW) for p in PROMPTS]


def test_windows_are_read_per_layer(windowed):
    family, path, _ = windowed
    from transformers import AutoConfig

    windows = compat.sliding_window(AutoConfig.from_pretrained(path))
    expected = {"gemma3_text": (WINDOW, None) * 2, "qwen3": (None, None, WINDOW, WINDOW), "mistral": WINDOW,
                "phi3": WINDOW}
    assert windows == expected[family]


@pytest.mark.parametrize("precision", ["auto", "bf16", "int4", "int4-a8", "nf4", "int8"])
def test_tree_passes_across_the_window_edge_stay_exact(windowed, precision):
    """fp32 (auto): speculative and plain output equal transformers' greedy generate, alone and in a batch; every
    other precision the CPU offers: speculative equals plain. Without the windows (engine.window = None) the outputs
    part: the test can fail."""
    if precision == "int4-a8" and not a8_available():
        pytest.skip("int4-a8 needs AVX512-VNNI and the kernel")
    if precision in ("nf4", "int8"):
        pytest.importorskip("bitsandbytes")
    family, path, refs = windowed
    engine = Engine.load(path, precision=precision, gamma=3, chat=False)
    randomized(engine.streams, seed=1, scale=0.3)
    plain = [engine.generate(ids, AR).token_ids for ids in PROMPTS]
    if precision == "auto":
        assert plain == refs, family
    assert [engine.generate(ids, SS).token_ids for ids in PROMPTS] == plain, f"{family} {precision}"
    assert [r.token_ids for r in engine.generate_batch(PROMPTS, SS)] == plain, f"{family} {precision} batch"
    if precision == "auto":
        engine.window = None  # the windows matter here: the whole context gives other tokens
        assert [engine.generate(ids, SS).token_ids for ids in PROMPTS] != refs, family


def test_gemma3_rope_per_layer_type_from_tables():
    """Gemma 3's local and global layers rotate by different bases: each layer type gets its own table, made by the
    module itself and equal to its output value for value."""
    from tiny_models import tiny_model

    model = tiny_model("gemma3_text", max_position_embeddings=8192)
    module = compat.inner_model(model).rotary_emb
    h = torch.zeros(1, 1, 64)
    for positions in (torch.tensor([[0]]), torch.tensor([[300, 301, 301, 302]]), torch.tensor([[5000, 7000]])):
        with torch.inference_mode():
            got = compat.rotary(model, h, positions)
        assert isinstance(got, compat.PerLayer) and got.kinds == ("sliding_attention", "full_attention") * 2
        for kind in got.kinds[:2]:
            want = module(h, positions, kind)
            assert torch.equal(got[kind][0], want[0]) and torch.equal(got[kind][1], want[1]), kind
    assert not torch.equal(got["sliding_attention"][0], got["full_attention"][0])
    assert module.__dict__["_specstream_rope_full_attention"][1][0].shape[0] == 8192  # a table, doubled for 7000

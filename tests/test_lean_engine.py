"""A lean engine: an int4-a8 engine keeps only what it decodes with. No fp32 weight of a decoder Linear survives
`Engine.load` (the 4-bit groups are all it reads), the head is one 8-bit copy even where the merged head reads it,
and the tokens are those of the same groups packed from a model that kept everything."""

import copy

import pytest
import torch
from torch import nn

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.linears import int4, int4_a8
from specstream_core.model import compat
from helpers import perturbed_streams
from tiny_models import prompts, save_tiny_model_dir

pytestmark = pytest.mark.skipif(not int4_a8.available(), reason="int4-a8 needs the kernel's AVX512-VNNI build")
NEW = 24


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama saved as a user's --base, and a stream set with a draft vocabulary (so the merged head runs)."""
    root = tmp_path_factory.mktemp("lean")
    base = save_tiny_model_dir(root / "base")
    model = Engine.load(base, precision="fp32", fresh_streams=False).model
    streams = perturbed_streams(model, gamma=3, draft_vocab=list(range(0, 128, 2)))
    streams.save(str(root / "streams"))
    return base, str(root / "streams")


@pytest.fixture(scope="module")
def lean(saved):
    base, streams = saved
    return Engine.load(base, streams_dir=streams, precision="int4-a8")


@pytest.fixture(scope="module")
def kept(saved):
    """The reference: the fp32 model kept whole beside its copy, quantized by the same rule (`int4.quantize_model`)."""
    base, streams = saved
    fp32 = Engine.load(base, precision="fp32", kernel="torch", fresh_streams=False).model
    model = copy.deepcopy(fp32)
    int4.quantize_model(model, kernel=True, a8=True)
    return Engine(model, None, StreamParams.load(streams, model), precision="int4-a8"), fp32


def _decoded(engine, mode: str) -> list[list[int]]:
    cfg = DecodeConfig(mode=mode, max_new_tokens=NEW, stop_on_eos=False, tree_topk=(2, 2, 1))
    return [engine.generate(ids, cfg).token_ids for ids in prompts(6, seed=11, max_len=40)]


def _linear_weights(model) -> list[tuple[str, torch.Tensor]]:
    """Every weight-like tensor of a Linear (nn.Linear or the kernel's) under the decoder layers, the stream set's own
    adapter factors aside (stream parameters, not the base's)."""
    found = []
    for name, module in compat.decoder_layers(model).named_modules():
        if "lora_" in name or not (isinstance(module, nn.Linear) or hasattr(module, "in_features")):
            continue
        for key in ("weight", "q4", "dm", "_blocked"):
            t = getattr(module, key, None)
            if isinstance(t, torch.Tensor):
                found.append((f"{name}.{key}", t))
    return found


def test_an_int4_a8_engine_holds_no_fp32_linear_weight(lean):
    tensors = _linear_weights(lean.model)
    assert tensors  # the 4-bit groups are there
    fp32 = [name for name, t in tensors if t.dtype is torch.float32 and t.numel() > 0]
    assert fp32 == [], f"fp32 weights kept: {fp32[:5]}"
    assert not any(isinstance(m, nn.Linear) and "lora_" not in n
                   for n, m in compat.decoder_layers(lean.model).named_modules())


def test_the_check_sees_fp32_weights(kept):
    _, fp32 = kept
    assert any(t.dtype is torch.float32 and t.numel() for _, t in _linear_weights(fp32))


def test_one_8_bit_head_serves_the_merged_head(lean):
    head = compat.lm_head(lean.model)
    assert isinstance(head, int8_head.Int8Linear) and head.a8
    merged = lean.backend.merged_head()
    assert merged is not None and merged.data is head.q8 and merged.dm is head.d  # the head's own copy, laid out
    x = torch.randn(5, head.in_features, generator=torch.Generator().manual_seed(0))
    q, scale = head.groups()
    assert torch.equal(head(x), int4_a8.linear_q8(x, *int4_a8.pack_q8(q, scale), head.out_features))


def test_the_lean_engine_decodes_the_kept_models_tokens(lean, kept):
    plain = _decoded(lean, "ar")
    assert _decoded(lean, "ss") == plain
    assert _decoded(kept[0], "ar") == plain


def test_an_fp32_engine_lets_its_copied_weights_pages_go(saved):
    """fp32 on the kernel reads its blocked copies: the weights' pages of the mapped checkpoint are dropped once copied
    (`CheckpointRows.release`) and read from the file again when the weight is read: the same values."""
    from safetensors.torch import load_file

    from specstream_core.kernels.linears import rowinv
    from specstream_core.model.loading import CheckpointRows

    base, _ = saved
    engine = Engine.load(base, precision="fp32", fresh_streams=False)
    if not rowinv.uses_kernel(engine.model):
        pytest.skip("the row-invariant kernel does not run here")
    reader = engine.model.__dict__[int4.WEIGHT_ROWS]
    assert isinstance(reader, CheckpointRows)
    stored = load_file(f"{base}/model.safetensors")
    down = compat.decoder_layers(engine.model)[0].mlp.down_proj
    assert down.blocked_weight() is not None and reader.release(down.weight)  # (again: it was, at its copy)
    assert torch.equal(down.weight.detach(), stored["model.layers.0.mlp.down_proj.weight"])
    plain = Engine.load(base, precision="fp32", kernel="torch", fresh_streams=False)
    cfg = DecodeConfig(mode="ar", max_new_tokens=NEW, stop_on_eos=False)
    for ids in prompts(3, seed=12, max_len=30):
        assert engine.generate(ids, cfg).token_ids == plain.generate(ids, cfg).token_ids


def test_a_bf16_engine_lets_the_fp32_pages_it_copied_go(saved, monkeypatch):
    """bf16 on the kernel copies each decoder Linear and the head to bf16: the fp32 pages each copy read are let go
    (`CheckpointRows.release`) as it is made, so the process does not hold the fp32 model besides its bf16 copy."""
    from specstream_core.kernels.linears import rowinv
    from specstream_core.model.loading import CheckpointRows

    if not rowinv.available():
        pytest.skip("the row-invariant kernel does not run here")
    released = []
    original = CheckpointRows.release
    monkeypatch.setattr(CheckpointRows, "release", lambda self, w: released.append(original(self, w)) or released[-1])
    engine = Engine.load(saved[0], precision="bf16", fresh_streams=False)
    linears = [m for m in compat.decoder_layers(engine.model).modules() if isinstance(m, rowinv.RowInvariantLinear)]
    assert linears and all(m.weight.dtype is torch.bfloat16 for m in linears)
    assert sum(released) >= len(linears) + 1  # every Linear's fp32 pages and the tied embedding's (the head's copy)


def test_the_gguf_header_reads_as_ggufs_own_reader(tmp_path):
    """`gguf_file.tensor_table` (the header alone, no object per metadata value) lists what gguf's reader does."""
    gguf = pytest.importorskip("gguf")
    from specstream_core.kernels.linears import gguf_file
    from helpers import write_tiny_gguf
    from tiny_models import tiny_model

    path = write_tiny_gguf(tiny_model("llama", seed=2, hidden=64, layers=2), str(tmp_path / "tiny.gguf"))
    theirs = [(t.name, t.tensor_type.name, int(t.data_offset), int(t.n_bytes)) for t in gguf.GGUFReader(path).tensors]
    assert gguf_file.tensor_table(path) == theirs and len(theirs) == 7 * 2 + 1


@pytest.mark.parametrize("a8", [False, True])
def test_an_8_bit_head_gives_its_rows_as_an_embedding(a8):
    """`Int8Linear.embed`: the rows of its weight (q * scale, exact), from either layout and after `lay_out`; a tied
    embedding whose weight they are is read from the head (`tie_embedding`), the same vectors."""
    from helpers import q8_exact
    from tiny_models import tiny_model

    w = q8_exact(128, 64, seed=3)
    head = int8_head.Int8Linear(*int8_head.quantize_groups(w), kernel=True, a8=a8)
    ids = torch.tensor([[0, 5, 127], [64, 5, 1]])
    assert torch.equal(head.embed(ids), w[ids])
    if a8:
        head.lay_out(torch.randperm(128, generator=torch.Generator().manual_seed(1)))
        assert torch.equal(head.embed(ids), w[ids]) and torch.equal(head.dequantized(), w)
        tiny = int8_head.Int8Linear(*int8_head.quantize_groups(w * 1e-4), kernel=True, a8=True)  # subnormal fp16 scales
        assert torch.equal(tiny.embed(ids), tiny.dequantized()[ids]) and tiny.embed(ids).abs().max() > 0
    model = tiny_model("llama", seed=2, hidden=64, tie_word_embeddings=True)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(w)
    model.lm_head = head
    assert int8_head.tie_embedding(model)
    assert isinstance(model.model.embed_tokens, int8_head.TiedEmbedding)
    assert torch.equal(model.model.embed_tokens(ids), w[ids])

"""The 8-bit LM head of int4 models (kernels/heads/int8_head.py, GGUF's Q8_0): its arithmetic on the row-invariant
kernel and through torch, its row invariance, a file's own Q8_0 blocks, and its draft-vocabulary rows; and an
fp32 head that is 8-bit groups exactly, read as them (`use_exact_head`)."""

import copy

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.errors import SpecstreamError
from specstream_core.model import compat
from specstream_core.kernels.heads import int8_head
from specstream_core.kernels.linears import rowinv
from specstream_core.model.loading import LoadConfig, load_model
from helpers import q8_exact
from tiny_models import hf_greedy, prompts, save_tiny_model_dir, tiny_model

PATHS = [pytest.param(True, id="kernel", marks=pytest.mark.skipif(not rowinv.available(), reason="no kernel here")),
         pytest.param(False, id="torch")]


def _head(n=98, k=128, seed=0, kernel=None):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed))
    return w, int8_head.Int8Linear(*int8_head.quantize_groups(w), kernel=kernel)


@pytest.mark.parametrize("kernel", PATHS)
def test_int8_head_computes_with_its_groups_and_is_row_invariant(kernel):
    w, head = _head(kernel=kernel)  # 98 outputs: padded to the kernel's block of 4
    x = torch.randn(13, 128, generator=torch.Generator().manual_seed(1))
    y = head(x)
    assert y.dtype == torch.float32 and y.shape == (13, 98)
    assert torch.allclose(y, x @ head.dequantized().T, atol=1e-4, rtol=1e-5)
    if kernel:  # the fp32 kernel's Linear on the dequantized weights, bit for bit
        assert torch.equal(y, rowinv.linear(x, head.dequantized()))
    step = w.reshape(98, 4, 32).abs().amax(-1) / 127  # each group's scale: within half a step of w
    assert ((head.dequantized() - w).reshape(98, 4, 32).abs() <= step[..., None] / 2 + 1e-6).all()
    if not kernel:  # through torch: an fp32 matmul, whose rows are not invariant (int4 keeps a 4-bit head there)
        return
    for m in range(1, 13):
        assert torch.equal(head(x[:m]), y[:m])
        assert torch.equal(head(x[m:m + 1]), y[m:m + 1])
        assert torch.equal(head(x[m:]), y[m:])


def test_the_kernel_sums_per_group_so_it_is_not_the_fp32_matmul():
    """What makes the kernel's head its own arithmetic (and `test_the_check_can_fail`-style checks needed)."""
    if not rowinv.available():
        pytest.skip("no kernel here")
    _, head = _head(n=256, k=576)
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ours = head(x)
        with rowinv.torch_linears():
            theirs = head(x)
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-5) and not torch.equal(ours, theirs)


@pytest.mark.parametrize("kernel", PATHS)
def test_rows_is_the_head_cut_to_a_vocabulary(kernel):
    _, head = _head(n=170, kernel=kernel)
    x = torch.randn(3, 128)
    for idx in (torch.tensor([5, 0, 169, 64, 7]), torch.randperm(170)[:32]):
        assert torch.allclose(head.rows(idx)(x), head(x)[:, idx], atol=1e-6)


def test_q8_0_blocks_become_the_kernels_groups():
    rng = np.random.default_rng(0)
    q = rng.integers(-127, 128, (6, 64)).astype(np.int8)
    d = rng.random((6, 2)).astype(np.float16)
    raw = np.concatenate([d.view(np.uint8).reshape(6, 2, 2), q.view(np.uint8).reshape(6, 2, 32)], axis=-1)
    got_q, scale = int8_head.from_q8_0(raw.reshape(6, 68), 6, 64)
    assert np.array_equal(got_q.numpy(), q) and np.array_equal(scale.numpy(), d.astype(np.float32))
    head = int8_head.Int8Linear(got_q, scale)
    assert torch.equal(head.groups()[0], got_q) and torch.equal(head.groups()[1], scale)
    want = d.astype(np.float32).repeat(32, 1) * q  # fp16 d times int8: exact in fp32
    assert torch.equal(head.dequantized(), torch.from_numpy(want.astype(np.float32)))


def test_odd_sizes_are_refused():
    with pytest.raises(SpecstreamError, match="multiples of 32"):
        int8_head.quantize_groups(torch.randn(4, 48))
    with pytest.raises(SpecstreamError, match="groups of 32"):
        int8_head.Int8Linear(torch.zeros(4, 64, dtype=torch.int8), torch.ones(4, 3))


def test_exact_groups_are_found_only_where_they_are_the_weight():
    w = q8_exact(40, 96)
    groups = int8_head.exact_groups(w)
    assert groups is not None and torch.equal(int8_head.dequantize(*groups), w)
    nudged = w.clone()
    nudged[3, 5] = torch.nextafter(nudged[3, 5], torch.tensor(1.0))  # one weight one step off: not 8-bit groups
    assert int8_head.exact_groups(nudged) is None
    assert int8_head.exact_groups(torch.randn(40, 96)) is None
    assert int8_head.exact_groups(w.bfloat16()) is None and int8_head.exact_groups(w[:, :48]) is None
    w[0, 0] = float("nan")
    assert int8_head.exact_groups(w) is None


@pytest.mark.skipif(not rowinv.available(), reason="no kernel here")
def test_an_fp32_head_of_exact_8_bit_groups_reads_them_and_keeps_its_logits():
    """`use_exact_head`: the fp32 model's logits bit for bit from a quarter of the head's bytes, and decoding
    still transformers' own greedy output, speculative and plain alike."""
    model = tiny_model("llama", seed=3, hidden=64)
    with torch.no_grad():
        model.lm_head.weight.copy_(q8_exact(*model.lm_head.weight.shape, seed=4, scale=40.0))
    reference = copy.deepcopy(model)  # transformers' own fp32 model
    fp32 = copy.deepcopy(model)
    rowinv.install(fp32)
    rowinv.install(model)
    assert int8_head.use_exact_head(model) and isinstance(model.lm_head, int8_head.Int8Linear)
    assert model.config.specstream_head.startswith("8-bit groups")
    assert rowinv.linears_label(model).endswith("+exact-8-bit-head") and "head" not in rowinv.linears_label(fp32)
    assert not int8_head.use_exact_head(model)  # already 8-bit
    ids = torch.tensor([prompts(1, seed=9)[0]])
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, fp32(ids).logits)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=1,
                                 draft_vocab=list(range(0, 128, 2)))
    engine = Engine(model, None, streams, precision="fp32")
    assert engine.exact and engine.row_exact
    draft_head = streams.draft_head(model.lm_head)  # the stream rows' head: 8-bit activations where their copies are
    assert isinstance(draft_head, int8_head.Int8Linear) and draft_head.a8 == streams.cheap_draft_head
    ar = DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False)
    ss = DecodeConfig(mode="ss", max_new_tokens=16, stop_on_eos=False, tree_topk=(2, 1, 1))
    for item in prompts(4, seed=4):
        want = hf_greedy(reference, item, 16)
        assert engine.generate(item, ar).token_ids == want and engine.generate(item, ss).token_ids == want


@pytest.mark.skipif(not rowinv.available(), reason="no kernel here")
def test_a_head_that_is_not_8_bit_groups_stays_fp32():
    model = tiny_model("llama", seed=3)
    rowinv.install(model)
    head = model.lm_head
    assert not int8_head.use_exact_head(model) and model.lm_head is head


@pytest.mark.skipif(not rowinv.available(), reason="no kernel here")
def test_decoding_engines_read_the_exact_head_and_training_loads_keep_its_weight(tmp_path):
    """`Engine.load` takes the 8-bit head; `load_model` (training, Medusa heads, the layer draft: they read
    `lm_head.weight`) keeps the fp32 one."""
    path = save_tiny_model_dir(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.lm_head.weight.copy_(q8_exact(*model.lm_head.weight.shape, seed=5, scale=40.0))
    model.save_pretrained(path)
    engine = Engine.load(path, precision="fp32", fresh_streams=False)
    assert isinstance(compat.lm_head(engine.model), int8_head.Int8Linear)
    trained = load_model(LoadConfig(path, precision="fp32"))
    assert isinstance(compat.lm_head(trained), rowinv.RowInvariantLinear) and trained.lm_head.weight.shape[0] > 0
    ids = engine.encode("abc")
    want = hf_greedy(model, ids, 8)
    assert engine.generate(ids, DecodeConfig(mode="ar", max_new_tokens=8, stop_on_eos=False)).token_ids == want

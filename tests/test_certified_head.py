"""certified_head: greedy choices of an exact 8-bit head from a read of it against 8-bit activations, with a bound on
every token, then the candidates exactly: torch's argmax of the whole head's logits, token for token, also on exact
ties and on gaps far below the 8-bit rounding; decoding through it equals transformers' greedy generate."""

import copy

import pytest
import torch

from specstream_core import DecodeConfig, Engine, StreamParams
from specstream_core.kernels.heads import certified_head, int8_head
from specstream_core.kernels import draft_weights
from specstream_core.kernels.linears import int4_a8, rowinv
from helpers import q8_exact
from tiny_models import hf_greedy, prompts, tiny_model

pytestmark = pytest.mark.skipif(not (rowinv.available() and int4_a8.available()),
                                reason="needs the kernel's AVX512-VNNI build")


def _exact_head(n=256, k=128, seed=0):
    w = q8_exact(n, k, seed=seed)
    return w, int8_head.Int8Linear(*int8_head.exact_groups(w), kernel=True)


def _outliers(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """x with a few channels 30x larger, as a language model's hidden states have (the bound's worst case)"""
    x[:, torch.randint(0, x.shape[1], (3,), generator=g)] *= 30
    return x


def test_choices_are_the_whole_heads_argmax():
    _, head = _exact_head()
    chooser = certified_head.CertifiedHead.of(head)
    assert chooser is not None
    g = torch.Generator().manual_seed(1)
    for trial in range(60):
        x = _outliers(torch.randn(1 + trial % 9, 128, generator=g) * 10.0 ** (trial % 5 - 2), g)
        choices, drafts = chooser.choose(x)
        assert drafts is None and choices.dtype == torch.int64
        assert torch.equal(choices, head(x).argmax(-1)), trial


def test_ties_and_gaps_below_the_rounding_are_decided_as_the_whole_head_decides():
    """Rows 5 and 77 the same weights (an exact tie: the first wins); row 140 row 5 with one weight a step larger
    where the input is positive (larger by d x_j, far below what 8-bit activations resolve), row 141 a step
    smaller. Inputs along row 5: the race is among these four."""
    w, _ = _exact_head(seed=2)
    q, scale = int8_head.exact_groups(w)
    q[77], scale[77] = q[5], scale[5]
    q[140], scale[140] = q[5], scale[5]
    q[141], scale[141] = q[5], scale[5]
    g = torch.Generator().manual_seed(3)
    wins = set()
    for trial in range(40):
        j = int(torch.randint(0, 128, (1,), generator=g))
        bumped = q.clone()
        bumped[140, j] += int(q[5, j] < 127)
        bumped[141, j] -= int(q[5, j] > -128)
        head = int8_head.Int8Linear(bumped, scale, kernel=True)
        x = (head.dequantized()[5] + 1e-3 * torch.randn(128, generator=g)).expand(3, 128).clone()
        x[:, j] = x[:, j].abs() + 1e-3
        x[1] *= -1  # a row whose largest is elsewhere
        want = head(x).argmax(-1)
        assert torch.equal(certified_head.CertifiedHead.of(head).choose(x)[0], want), trial
        wins.add(int(want[0]))
    assert wins <= {5, 140} and 140 in wins  # the step is found; the tie goes to the first row


def test_rows_that_are_not_finite_take_the_whole_head():
    _, head = _exact_head()
    chooser = certified_head.CertifiedHead.of(head)
    x = torch.randn(3, 128)
    x[1, 7] = float("nan")
    assert torch.equal(chooser.choose(x)[0], head(x).argmax(-1))
    x[1, 7] = float("inf")
    assert torch.equal(chooser.choose(x)[0], head(x).argmax(-1))


def test_stream_rows_get_the_draft_heads_scores_from_the_same_read():
    w, head = _exact_head()
    ids = torch.arange(0, 256, 4)  # 64 tokens: whole blocks of 32
    chooser = certified_head.CertifiedHead.of(head, ids)
    x, streams = torch.randn(4, 128), torch.randn(4, 3, 128)
    choices, drafts = chooser.choose(x, streams)
    assert torch.equal(choices, head(x).argmax(-1))
    assert torch.equal(drafts, draft_weights.head_rows(w[ids])(streams))


def test_other_heads_have_none():
    w, head = _exact_head()
    assert certified_head.CertifiedHead.of(int8_head.Int8Linear(*int8_head.exact_groups(w), kernel=True, a8=True)) is None
    assert certified_head.CertifiedHead.of(int8_head.Int8Linear(*int8_head.exact_groups(w), kernel=False)) is None
    assert certified_head.CertifiedHead.of(torch.nn.Linear(128, 256, bias=False)) is None


def test_greedy_decoding_through_it_is_transformers_greedy_and_sampling_does_not_use_it():
    model = tiny_model("llama", seed=3, hidden=64)
    with torch.no_grad():
        model.lm_head.weight.copy_(q8_exact(*model.lm_head.weight.shape, seed=4, scale=40.0))
    reference = copy.deepcopy(model)
    rowinv.install(model)
    assert int8_head.use_exact_head(model)
    streams = StreamParams.fresh(model, gamma=3, n_stream_layers=2, adapter_rank=4, seed=1,
                                 draft_vocab=list(range(0, 128, 2)))
    engine = Engine(model, None, streams, precision="fp32")
    calls = []
    choose = engine.backend.greedy_choices

    def counted(main, streams):
        picks = choose(main, streams)
        calls.append(picks is not None)
        return picks

    engine.backend.greedy_choices = counted
    ar = DecodeConfig(mode="ar", max_new_tokens=16, stop_on_eos=False)
    ss = DecodeConfig(mode="ss", max_new_tokens=16, stop_on_eos=False, tree_topk=(2, 1, 1))
    for item in prompts(4, seed=4):
        want = hf_greedy(reference, item, 16)
        assert engine.generate(item, ar).token_ids == want and engine.generate(item, ss).token_ids == want
    assert calls and all(calls)
    calls.clear()
    engine.generate(prompts(1, seed=5)[0], DecodeConfig(mode="ss", max_new_tokens=8, temperature=0.8, seed=1))
    assert not calls


def test_a_token_the_8_bit_read_ranks_second_is_still_found():
    """Row B is row A with one weight a step up at input j1 (group 0) and one a step down at j2 (group 1), where
    x[j1] > x[j2], so B's exact logit is larger; but group 1's scale is twice group 0's and rounding takes x[j1]
    down and x[j2] up, so the 8-bit read ranks A first. Only a sound bound keeps B among the candidates."""
    k, j1, j2 = 64, 3, 40
    g = torch.Generator().manual_seed(6)
    x = 0.004 * torch.rand(k, generator=g)
    x[0], x[32] = 1.27, 2.54  # group 0's scale 0.01, group 1's 0.02
    x[j1], x[j2] = 0.0149, 0.0101  # 8 bits: 1 x 0.01 and 1 x 0.02
    q = torch.randint(-5, 6, (32, k), generator=g)
    q[7] = 20
    q[7, j1] = q[7, j2] = 0
    q[9] = q[7]
    q[9, j1], q[9, j2] = 1, -1
    head = int8_head.Int8Linear(q, torch.full((32, 2), 0.05), kernel=True)
    exact = head(x[None])[0]
    assert exact.argmax() == 9 and exact[9] - exact[7] > 1e-4
    assert int4_a8.linear_q8(x[None], *int4_a8.pack_q8(q, torch.full((32, 2), 0.05)), 32)[0].argmax() == 7
    assert certified_head.CertifiedHead.of(head).choose(x[None])[0].item() == 9

"""What a decoding step prepares outside the model, on the fast paths a single decoding takes: the greedy
choice through the kernel (`greedy.argmax`), a tree's visibility, one sequence's padded inputs and its
additive mask. Each must give what the general path gives."""

import pytest
import torch

from specstream_core.decoding.prefill import pad_steps
from specstream_core.decoding.tree import Tree
from specstream_core.kernels.heads import greedy
from specstream_core.model import masks
from specstream_core.kernels.linears import rowinv


@pytest.mark.skipif(not rowinv.available(), reason=f"kernel unavailable: {rowinv.unavailable_reason()}")
def test_the_kernels_greedy_choice_is_torchs_argmax(monkeypatch):
    assert greedy._library(), "the kernel runs here, so its argmax must be the one used"
    gen = torch.Generator().manual_seed(0)
    cases = [torch.randn(rows, n, generator=gen) for n in (1, 15, 16, 17, 49152, 49153) for rows in (1, 3)]
    cases += [torch.randint(0, 3, (2, 301), generator=gen).float(),  # ties: the first of equal largest values
              torch.full((2, 40), float("-inf")), torch.zeros(1, 33), torch.randn(1, 4, 1000, generator=gen),
              torch.randn(8, 500, generator=gen)[::3],  # rows evenly spaced, not contiguous
              torch.randn(500, generator=gen)]
    cases[-4][0, 5] = -0.0
    nan = torch.randn(2, 100, generator=gen)
    nan[1, 50] = float("nan")  # torch counts NaN as the largest: the kernel hands such rows back to torch
    for x in cases + [nan]:
        assert torch.equal(greedy.argmax(x), x.argmax(-1)), x.shape
    calls = []
    real = torch.Tensor.argmax
    monkeypatch.setattr(torch.Tensor, "argmax", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    greedy.argmax(cases[0])
    assert not calls, "the kernel answered"
    greedy.argmax(nan)
    assert calls, "torch answered for the row with a NaN"


def test_tree_visibility_is_ancestors_or_self():
    tree = Tree(tokens=[5, 6, 7, 8, 9, 10], parents=[-1, 0, 0, 1, 3, 2], depths=[0, 1, 1, 2, 3, 2], probs=[1.0] * 6)
    vis = tree.visibility()
    assert vis.dtype is torch.bool and vis.shape == (6, 6)
    for i in range(6):
        ancestors, node = {i}, i
        while tree.parents[node] >= 0:
            node = tree.parents[node]
            ancestors.add(node)
        assert vis[i].nonzero().flatten().tolist() == sorted(ancestors)


def test_one_sequences_step_inputs_are_the_general_paths():
    tree = Tree(tokens=[5, 6, 7, 8], parents=[-1, 0, 1, 1], depths=[0, 1, 2, 2], probs=[1.0] * 4)
    item = (tree.tokens, tree.depths, tree.visibility())
    one = pad_steps([item], [11], torch.device("cpu"))
    two = pad_steps([item, item], [11, 11], torch.device("cpu"))
    for a, b in zip(one, two):
        assert a.dtype == b.dtype and torch.equal(a[0], b[0])
    local = masks.local_visibility(one[2], torch.arange(4)[None], 2)
    q_pos = torch.cat([one[1], masks.stream_positions(one[1], torch.arange(4)[None], 2)], 1)
    single = masks.additive_mask([11], local, q_pos, torch.float32)
    batched = masks.additive_mask([11, 11], local.expand(2, -1, -1), q_pos.expand(2, -1), torch.float32)
    assert single.shape == (1, 1, 12, 23) and torch.equal(single[0], batched[0])
    assert (single[0, 0, :, :11] == 0).all() and (single[0, 0, :4, 11:15] == 0).sum() == 1 + 2 + 3 + 3


def test_a_trees_stream_layout_from_the_memo_is_the_general_paths():
    for parents in ([-1, 0, 1, 1], [-1, 0, 1, 2, 3], [-1]):
        tree = Tree(tokens=list(range(len(parents))), parents=parents, depths=[0] * len(parents), probs=[1.0] * len(parents))
        visible = tree.visibility()[None]
        carriers = torch.arange(len(parents))[None]
        for start in (11, 40, 11):  # the second and third calls take the memo
            positions = (start + torch.arange(len(parents)))[None]
            with torch.inference_mode():
                q_pos, local = masks.stream_layout(positions, visible, carriers, 3)
            assert torch.equal(q_pos, torch.cat([positions, masks.stream_positions(positions, carriers, 3)], 1))
            assert torch.equal(local, masks.local_visibility(visible, carriers, 3))


def test_rope_from_the_table_is_the_modules_own():
    """A decoding step's (cos, sin) come from a table the rotary module made (`compat.rotary`), value for value what
    the module gives for the step's positions, past the table's first size too; RoPE that depends on the sequence
    (dynamic) is not tabled."""
    from specstream_core.model import compat
    from tests.tiny_models import tiny_model

    model = tiny_model("llama", max_position_embeddings=16384)
    module = compat.inner_model(model).rotary_emb
    h = torch.zeros(1, 1, 64)
    g = torch.Generator().manual_seed(0)
    for positions in (torch.tensor([[0]]), torch.tensor([[300, 301, 301, 302]]), torch.randint(0, 4096, (2, 7), generator=g),
                      torch.tensor([[5000, 9000]])):
        with torch.inference_mode():
            got = compat.rotary(model, h, positions)
        want = module(h, positions)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert module.__dict__["_specstream_rope"][1][0].shape[0] == 16384  # doubled to hold position 9000
    module.rope_type = "dynamic"
    assert compat._rope_table(module, h, torch.tensor([[3]])) is None

"""A row adapter's second factor on the kernel (`model/lowrank.py`, rowinv.c's `linear_kouter`)."""
import pytest
import torch
from torch import nn

from specstream_core.model import lowrank, rowinv

pytestmark = pytest.mark.skipif(not rowinv.available(), reason="the kernel cannot run here")


def _layer(k=32, n=197, seed=0):
    torch.manual_seed(seed)
    layer = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        layer.weight.normal_()
    return layer


def test_the_weight_lies_transposed_with_the_same_values():
    layer = _layer()
    before = layer.weight.detach().clone()
    assert lowrank.make_low_rank(layer) and isinstance(layer, lowrank.LowRankLinear)
    assert lowrank.transposed(layer.weight) and torch.equal(layer.weight, before)
    assert torch.equal(layer.state_dict()["weight"], before) and layer.weight.requires_grad
    assert not lowrank.make_low_rank(nn.Linear(lowrank.MAX_RANK + 1, 8, bias=False))  # not a short K
    assert not lowrank.make_low_rank(nn.Linear(32, 8, bias=True))


def test_each_output_is_summed_in_order_and_rows_never_meet():
    layer = _layer()
    lowrank.make_low_rank(layer)
    x = torch.randn(23, 32)
    with torch.no_grad():
        y = layer(x)
        # output n of row i: the products x[i, j] w[n, j] added for j = 0 .. K - 1, from zero, each FMA rounded once
        w = layer.weight.double()
        for i in (0, 7, 22):
            acc = torch.zeros(197, dtype=torch.float32)
            for j in range(32):
                acc = (acc.double() + x[i, j].double() * w[:, j]).float()
            assert torch.equal(y[i], acc)
        assert torch.allclose(y, x @ layer.weight.T, atol=1e-4, rtol=1e-5)
        for m in (1, 2, 5, 23):  # row-invariant: a row's result whatever rows share the call
            assert torch.equal(layer(x[:m]), y[:m])
            assert torch.equal(layer(x[m - 1:m]), y[m - 1:m])
        layer.weight.mul_(2)  # in place: the kernel reads the same buffer, nothing goes stale
        assert torch.equal(layer(x), 2 * y)


def test_training_goes_through_torch():
    layer = _layer(k=16, n=40)
    lowrank.make_low_rank(layer)
    x = torch.randn(3, 16, requires_grad=True)
    layer(x).square().sum().backward()
    assert layer.weight.grad is not None and x.grad is not None
    assert torch.allclose(layer.weight.grad, 2 * (x @ layer.weight.T).T @ x, atol=1e-4)

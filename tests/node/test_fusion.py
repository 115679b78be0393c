"""Fusion through the graph: lazy elementwise values are invisible except in speed.

Results equal eager evaluation (``mt.fusion(False)``), even when a buffer a lazy
value reads is written in place before the value is realized; and forward plus
backward of small models run a pinned, minimal number of kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import minitorch_exp as mt
from minitorch_exp.node.node import MAX_FUSED_OPS

from ._helpers import compare_with_torch, layouts, leaf, seeds, shapes, values

# Fusion itself, on tensors small enough to read: none is computed at once (tensor/eager.py).
pytestmark = pytest.mark.usefixtures("fuse_all")


def test_elementwise_results_are_lazy_only_with_fusion_on():
    x = mt.randn(3, 4, requires_grad=True)
    y = (x * 2 + 1).tanh()
    assert y.is_lazy
    with mt.count_kernels() as k:
        z = y * y - 1
    assert k.total == 0 and z.is_lazy
    with mt.count_kernels() as k:
        z.numpy()
        z.numpy()
    assert k.total == 1 and not z.is_lazy  # realized once, remembered
    with mt.fusion(False):
        e = x * 2
        assert not e.is_lazy
    assert (x * 2).is_lazy


# ---- writes into a buffer that a lazy value still reads ---------------------------

def _add(x):
    with mt.no_grad():
        x += 5


def _setitem(x):
    with mt.no_grad():
        x[...] = 7.0


def _data(x):
    x.data[...] = 0


def _data_slice(x):
    x.data[:1] = -3.0


def _zero(x):
    with mt.no_grad():
        x.zero_()


WRITES = [_add, _setitem, _data, _data_slice, _zero]

CONSUMERS = {
    "map": lambda x: x * 2 + 1,
    "transposed_map": lambda x: (x.T * 2).exp(),
    "map_of_view": lambda x: x.reshape(-1)[None] * x.reshape(1, -1),
    "expanded": lambda x: x.unsqueeze(0).expand(2, *x.shape) - x,
    "chain_dropping_intermediates": lambda x: ((x * 2).tanh() + 1) * 3,
    "detached": lambda x: (x * 2 + 1).detach(),
    "long_chain": lambda x: _chain(x, 3 * MAX_FUSED_OPS),
}


def _chain(x, n):
    for i in range(n):
        x = x * 1.01 + (0.01 if i % 2 else -0.01)
    return x


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_write_to_an_input_before_the_lazy_consumer_is_realized(consumer, write):
    fn = CONSUMERS[consumer]
    x = mt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    with mt.no_grad():
        expected = fn(mt.tensor(x.numpy())).numpy().copy()
    y = fn(x)
    write(x)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)


def test_write_to_an_input_then_backward_of_a_lazy_consumer_is_reported():
    x = leaf([1.0, 2.0])
    loss = (x * x).sum()
    _add(x)
    with pytest.raises(RuntimeError, match=r"mul.*modified in place"):
        loss.backward()


@pytest.mark.parametrize("realize_first", [False, True])
@pytest.mark.parametrize("write", WRITES)
def test_write_into_a_realized_intermediate(write, realize_first):
    """``y = x * 2`` is lazy; ``z = y * 3`` shares y's expression. Writing into y (which
    realizes it) must not change z, just as if every op had run eagerly."""
    for fused in (True, False):
        with mt.fusion(fused):
            x = mt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
            y = x * 2
            z = y * 3
            d = y.detach()
            if realize_first:
                y.numpy()
            write(y)
            np.testing.assert_array_equal(z.numpy(), [[6, 12, 18], [24, 30, 36]])
            assert not np.array_equal(y.numpy(), [[2, 4, 6], [8, 10, 12]])  # y was written
            np.testing.assert_array_equal(d.numpy(), y.numpy())  # detach shares memory


# ---- fusion on and off agree ----------------------------------------------------------

def _model(x, w1, b1, w2, c):
    h = mt.relu(x @ w1 + b1)
    h = (h * c).sigmoid() * h + mt.maximum(h, 0.3 * h.T.T)
    logits = h @ w2
    p = mt.softmax(logits, 1)
    loss = -(mt.log_softmax(logits, 1)[np.arange(4), np.array([0, 2, 1, 2])]).mean()
    return loss + (p * p).sum() * 0.1 + mt.logsumexp(logits.T, 0).sum() + (w1 ** 2).mean()


@settings(max_examples=10, deadline=None)
@given(seed=seeds, layout=layouts)
def test_fusion_on_and_off_agree_on_a_model(seed, layout):
    rng = np.random.default_rng(seed)
    arrays = [values(rng, s) for s in [(4, 5), (5, 6), (6,), (6, 3), (4, 1)]]
    results = {}
    for fused in (False, True):
        with mt.fusion(fused):
            nodes = [leaf(a, layout) for a in arrays]
            loss = _model(*nodes)
            loss.backward()
            results[fused] = [loss.numpy()] + [n.grad.numpy() for n in nodes]
    for a, b in zip(results[False], results[True]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("block", [None, 5])
def test_fused_model_matches_torch(block, monkeypatch):
    """Also with the NumPy evaluator's block size cut to 5 elements, so every fused pass
    and reduction runs its blocked path on these small shapes."""
    torch = pytest.importorskip("torch")
    if block is not None:
        from minitorch_exp.tensor import cpu_numpy
        monkeypatch.setattr(cpu_numpy, "BLOCK", block)
    rng = np.random.default_rng(0)
    layout = "contiguous" if block is None else "transposed"
    nodes = [leaf(values(rng, s), layout) for s in [(4, 5), (5, 6), (6,), (6, 3), (4, 1)]]

    def tmodel(x, w1, b1, w2, c):
        h = torch.relu(x @ w1 + b1)
        h = (h * c).sigmoid() * h + torch.maximum(h, 0.3 * h.T.T)
        logits = h @ w2
        p = torch.softmax(logits, 1)
        picked = torch.log_softmax(logits, 1)[torch.arange(4), torch.tensor([0, 2, 1, 2])]
        return (-picked.mean() + (p * p).sum() * 0.1 + torch.logsumexp(logits.T, 0).sum()
                + (w1 ** 2).mean())

    compare_with_torch(_model, tmodel, nodes)
    assert mt.gradcheck(_model, nodes)


@settings(max_examples=20, deadline=None)
@given(shape=shapes, layout=layouts, seed=seeds)
def test_fusion_modes_agree_on_elementwise_chains(shape, layout, seed):
    arr = values(np.random.default_rng(seed), shape)
    out = {}
    for fused in (False, True):
        with mt.fusion(fused):
            x = leaf(arr, layout)
            y = ((x * 1.5 - 0.25).tanh() * x.sigmoid() + abs(x) ** 1.5) / (x * x + 1)
            y.backward(mt.ones_like(y))
            out[fused] = (y.numpy().copy(), x.grad.numpy().copy())
    np.testing.assert_allclose(out[True][0], out[False][0], rtol=1e-13)
    np.testing.assert_allclose(out[True][1], out[False][1], rtol=1e-13)


# ---- kernel counts ---------------------------------------------------------------------

def test_kernel_count_of_an_elementwise_chain_with_broadcast():
    """Forward + backward of ``((x * 2 + 1).tanh() * y).sum()`` runs exactly 3 kernels:

    * forward: 1 reduce -- the whole map chain is fused into the reduction's input,
      nothing is materialized (the minimum: the scalar needs one pass over x);
    * backward: 1 fused pass writing x.grad (the chain rule through sum, mul, tanh, +, *
      as one expression, recomputing tanh), and 1 reduce writing y.grad (y was broadcast
      over x's rows, so its gradient sums ``g * tanh(...)`` over them, fused).
    Two outputs of different shapes need two passes: 3 is the minimum.
    """
    x = mt.randn(64, 32, requires_grad=True)
    y = mt.randn(32, requires_grad=True)
    with mt.count_kernels() as fwd:
        loss = ((x * 2 + 1).tanh() * y).sum()
    with mt.count_kernels() as bwd:
        loss.backward()
    assert (fwd.total, fwd["reduce"]) == (1, 1), fwd
    assert (bwd.total, bwd["fused"], bwd["reduce"]) == (2, 1, 1), bwd
    t = np.tanh(x.numpy() * 2 + 1)
    np.testing.assert_allclose(y.grad.numpy(), t.sum(0), rtol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), 2 * (1 - t * t) * y.numpy(), rtol=1e-4,
                               atol=1e-6)
    # without fusion every op is its own pass: the counter sees the difference
    x.grad = y.grad = None
    with mt.fusion(False), mt.count_kernels() as eager:
        ((x * 2 + 1).tanh() * y).sum().backward()
    assert eager.total > 6, eager


def test_kernel_count_of_a_layer_with_log_softmax_and_mean():
    """``mt.log_softmax(mt.relu(X @ W + b), 1).mean()``: 4 kernels forward, 4 backward.

    Forward: 1 blas (X @ W); log_softmax's stable logsumexp needs 2 row reductions
    (the row max, then the sum of exp(z - max)), each reading ``relu(X @ W + b)`` fused
    (the activation is never materialized); the mean is 1 more reduction -> 4.
    Backward: log_softmax's gradient ``g - softmax * rowsum(g)`` needs 1 row reduction;
    then 1 fused pass makes G = d loss / d(XW + b) (through mean, log_softmax, relu and
    +), which W's blas needs materialized; dW = X^T @ G is 1 blas; db = G.sum(0) is 1
    reduce -> 4. (X needs no gradient.) The mean's gradient, a broadcast scalar times
    1/n used by both branches of ``x - logsumexp``, is recomputed, not materialized.
    """
    X = mt.randn(32, 16)
    W = mt.randn(16, 10, requires_grad=True)
    b = mt.randn(10, requires_grad=True)
    with mt.count_kernels() as fwd:
        loss = mt.log_softmax(mt.relu(X @ W + b), 1).mean()
    with mt.count_kernels() as bwd:
        loss.backward()
    assert (fwd.total, fwd["blas"], fwd["reduce"]) == (4, 1, 3), fwd
    assert (bwd.total, bwd["blas"], bwd["fused"], bwd["reduce"]) == (4, 1, 1, 2), bwd
    torch = pytest.importorskip("torch")
    tW = torch.tensor(W.numpy(), requires_grad=True)
    tb = torch.tensor(b.numpy(), requires_grad=True)
    ref = torch.log_softmax(torch.relu(torch.tensor(X.numpy()) @ tW + tb), 1).mean()
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
    np.testing.assert_allclose(W.grad.numpy(), tW.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_long_elementwise_chain_realizes_in_bounded_pieces():
    """A chain longer than MAX_FUSED_OPS is cut every MAX_FUSED_OPS ops: kernels stay
    small and few (one per piece), forward and backward."""
    n = 4 * MAX_FUSED_OPS
    x = mt.randn(16, requires_grad=True)
    with mt.count_kernels() as fwd:
        y = _chain(x, n // 2)  # n ops: a mul and an add per step
        y.numpy()
    pieces = -(-n // MAX_FUSED_OPS)
    assert fwd.total == fwd["fused"] == pieces, fwd
    with mt.count_kernels() as bwd:
        y.sum().backward()
    # the sum, then the backward chain (one mul per step; + passes g through) in pieces
    assert bwd["reduce"] == 1 and bwd["fused"] <= pieces, bwd
    np.testing.assert_allclose(x.grad.numpy(), 1.01 ** (n // 2), rtol=1e-4)


def test_shared_gradient_is_realized_once():
    """A gradient used by two inputs (``a * b`` with both requiring grad) that is itself a
    chain is realized once, not recomputed in each input's pass."""
    a = mt.randn(50, requires_grad=True)
    b = mt.randn(50, requires_grad=True)
    with mt.count_kernels() as k:
        (((a * b).tanh() * 3).exp() * 2).sum().backward()
    # forward 1 reduce; backward: the shared d/d(a*b) once, then a.grad and b.grad
    assert k.total == 4, k

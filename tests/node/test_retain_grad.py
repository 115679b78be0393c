"""``retain_grad()`` on intermediate nodes, with PyTorch's semantics (issue 25): the
gradient lands in ``.grad`` after backward and accumulates like a leaf's; other
non-leaf nodes keep ``.grad`` None."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt


def _graph(n=64, m=80):
    x = mt.randn(n, 96, dtype=mt.float64)
    W = mt.randn(96, m, dtype=mt.float64, requires_grad=True)  # noqa: N806
    h = (x @ W).tanh()
    return x, W, h, (h * h).sum()


@pytest.mark.parametrize("shape", [(64, 80), (2, 3)])  # fused, and below any threshold
def test_a_retained_node_gets_its_gradient(shape):
    x, W, h, loss = _graph(*shape)
    h.retain_grad()
    assert h.retains_grad and not W.retains_grad and not loss.retains_grad
    loss.backward()
    assert np.allclose(h.grad.numpy(), 2 * h.numpy())            # d(sum h*h)/dh = 2h
    assert h.grad.shape == h.shape and h.grad.dtype == h.dtype
    assert not h.grad.requires_grad and h.grad.grad_fn is None


def test_leaf_gradients_are_the_same_with_or_without_retaining():
    grads = []
    for retain in (False, True):
        mt.manual_seed(0)
        x, W, h, loss = _graph()
        if retain:
            h.retain_grad()
        loss.backward()
        grads.append(W.grad.numpy())
    assert np.allclose(*grads)


def test_retained_gradients_accumulate_over_backward_calls():
    x, W, h, loss = _graph()
    h.retain_grad()
    loss.backward(retain_graph=True)
    first = h.grad.numpy().copy()
    loss.backward()
    assert np.allclose(h.grad.numpy(), 2 * first)


def test_a_node_read_twice_retains_the_sum():
    a = mt.randn(64, 80, dtype=mt.float64, requires_grad=True)
    e = a.exp()
    e.retain_grad()
    (e * 2 + e * e).sum().backward()
    assert np.allclose(e.grad.numpy(), 2 + 2 * e.numpy())


def test_the_root_can_retain_its_gradient():
    *_, loss = _graph()
    loss.retain_grad()
    loss.backward()
    assert loss.grad.item() == 1.0


def test_other_intermediate_nodes_keep_no_grad():
    x, W, h, loss = _graph()
    loss.backward()
    assert h.grad is None and not h.retains_grad


def test_retain_grad_on_a_leaf_changes_nothing():
    x, W, h, loss = _graph()
    W.retain_grad()
    assert not W.retains_grad
    loss.backward()
    assert W.grad is not None


def test_retain_grad_needs_a_node_that_requires_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        mt.randn(3).retain_grad()

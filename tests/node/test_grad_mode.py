"""``mt.no_grad()`` (context manager and decorator) and ``mt.enable_grad()`` inside it."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt


def _ops(x, w):
    """One of each kind of Function: elementwise, view, reduction, matmul, index, join."""
    return [x * 2 + 1, x.T, x.sum(0), x @ w, x[0], mt.cat([x, x]), x.max(), mt.softmax(x, 1),
            x.reshape(-1), x.clone(), x.astype(mt.float64)]


def test_no_grad_context_records_nothing():
    x = mt.randn(2, 3, requires_grad=True)
    w = mt.randn(3, 2, requires_grad=True)
    assert mt.is_grad_enabled()
    with mt.no_grad():
        assert not mt.is_grad_enabled()
        outs = _ops(x, w)
    assert mt.is_grad_enabled()
    for out in outs:
        assert not out.requires_grad and out.grad_fn is None and out.is_leaf
    with pytest.raises(RuntimeError, match="requires_grad|grad_fn"):
        outs[0].sum().backward()


def test_grad_recorded_outside_no_grad():
    x = mt.randn(2, 3, requires_grad=True)
    w = mt.randn(3, 2, requires_grad=True)
    for out in _ops(x, w):
        assert out.requires_grad and out.grad_fn is not None and not out.is_leaf


def test_no_grad_as_decorator():
    @mt.no_grad()
    def step(x):
        assert not mt.is_grad_enabled()
        return x * 2

    x = mt.tensor([1.0], requires_grad=True)
    y = step(x)
    assert not y.requires_grad and y.grad_fn is None
    assert mt.is_grad_enabled()
    assert step.__name__ == "step"


def test_enable_grad_inside_no_grad():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.no_grad():
        with mt.enable_grad():
            assert mt.is_grad_enabled()
            y = x * x
        z = x * x
        assert not mt.is_grad_enabled()
    assert y.requires_grad and y.grad_fn is not None
    assert not z.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_enable_grad_as_decorator_inside_no_grad():
    @mt.enable_grad()
    def f(x):
        return x * 3

    x = mt.tensor([1.0], requires_grad=True)
    with mt.no_grad():
        y = f(x)
    assert y.requires_grad


def test_grad_mode_is_restored_after_an_exception():
    with pytest.raises(ZeroDivisionError):
        with mt.no_grad():
            _ = 1 / 0
    assert mt.is_grad_enabled()

    @mt.no_grad()
    def boom():
        raise KeyError

    with pytest.raises(KeyError):
        boom()
    assert mt.is_grad_enabled()


def test_nested_and_reused_no_grad():
    ng = mt.no_grad()
    with ng:
        with ng:
            assert not mt.is_grad_enabled()
        assert not mt.is_grad_enabled()
    assert mt.is_grad_enabled()


def test_parameter_update_under_no_grad_builds_no_graph():
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    with mt.no_grad():
        w -= 0.1 * w.grad
    assert w.is_leaf and w.grad_fn is None and w.requires_grad
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)

"""The Node level's public hooks for the levels above: ``set_value``, ``set_grad_sink``,
``grads_in_sinks`` and ``__exp__`` (how tensor/explain.py names a Node's value)."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.node.node import Node, grads_in_sinks
from minitorch_exp.tensor import zeros
from minitorch_exp.tensor.explain import caller_names, held_exp
from minitorch_exp.tensor.expr import RVALUE


class Sink:
    """A gradient sink over one preallocated tensor (what nn/optim.py's GradSlot is)."""

    def __init__(self, like, device="cpu"):
        self.t, self.device, self.taken = zeros(like.shape, dtype=like.dtype), device, 0

    def take(self, device):
        self.taken += 1
        return self.t if str(device) == self.device else None

    def holds(self, value) -> bool:
        return value is self.t


# ---- set_value ---------------------------------------------------------------------------------

def test_set_value_keeps_the_very_tensor():
    p = mt.randn(2, 3, requires_grad=True)
    t = zeros((2, 3))
    p.set_value(t)
    assert p.value is t and np.array_equal(p.numpy(), np.zeros((2, 3)))


@pytest.mark.parametrize("bad, error", [(zeros((3, 2)), ValueError),
                                        (zeros((2, 3), dtype="float64"), TypeError)])
def test_set_value_checks_shape_and_dtype(bad, error):
    p = mt.randn(2, 3, requires_grad=True)
    with pytest.raises(error):
        p.set_value(bad)
    with pytest.raises((ValueError, TypeError)):
        p.set_value(bad, move=True)


def test_set_value_takes_only_a_tensor():
    p = mt.randn(2, requires_grad=True)
    with pytest.raises(TypeError, match="takes a Tensor"):
        p.set_value(mt.randn(2))


@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_set_value_on_a_lazy_node_ends_its_laziness():
    a = mt.randn(3)
    y = a * 2 + 1
    assert y.is_lazy
    y.set_value(zeros((3,)))
    assert not y.is_lazy and np.array_equal(y.numpy(), np.zeros(3))
    a.data[...] = 5  # a write into what y once read does not reach y
    assert np.array_equal(y.numpy(), np.zeros(3))


# ---- the gradient sink -------------------------------------------------------------------------

def test_backward_writes_a_new_gradient_into_the_sink():
    p = mt.randn(2, 3, requires_grad=True)
    sink = Sink(p)
    p.set_grad_sink(sink)
    (p * 3).sum().backward()
    assert sink.taken == 1 and p.grad.value is sink.t
    assert np.allclose(sink.t.numpy(), 3)
    assert grads_in_sinks([p], [p.value])


def test_a_sink_that_cannot_serve_the_device_lets_backward_make_one():
    p = mt.randn(2, requires_grad=True)
    sink = Sink(p, device="cuda")
    p.set_grad_sink(sink)
    p.sum().backward()
    assert sink.taken == 1 and p.grad.value is not sink.t
    assert not grads_in_sinks([p], [p.value])


def test_grads_in_sinks_sees_a_replaced_value_and_a_missing_grad():
    p, q = mt.randn(2, requires_grad=True), mt.randn(2, requires_grad=True)
    for x in (p, q):
        x.set_grad_sink(Sink(x))
    values = [p.value, q.value]
    assert not grads_in_sinks([p, q], values)  # no gradients yet
    (p + q).sum().backward()
    assert grads_in_sinks([p, q], values)
    q.data = zeros((2,))
    assert not grads_in_sinks([p, q], values)
    p.set_grad_sink(None)
    assert not grads_in_sinks([p], values[:1])


# ---- __exp__: how explain names a Node's value -----------------------------------------------

@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_a_node_names_its_value_in_explain():
    weights = mt.randn(4, requires_grad=True)
    lazy = weights * 2
    assert held_exp(weights) is weights.value and held_exp(lazy).kind != RVALUE
    assert lazy.is_lazy  # reading it for a name computed nothing
    names = caller_names()
    assert names[id(weights)] == names[id(weights.value)] == "weights"
    assert names[id(held_exp(lazy))] == "lazy"
    assert held_exp(Node) is None and held_exp(3) is None

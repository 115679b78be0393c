"""The backward engine: long chains, diamonds, reuse, retain_graph, errors, leaf shapes,
and saved tensors written in place between forward and backward."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt

from ..devices import CUDA_ONLY, DEVICES
from ._helpers import compare_with_torch, leaf


@pytest.mark.parametrize("fused", [True, False])
def test_ten_thousand_op_chain(fused):
    """No recursion limit: the topological sort and the lazy chains are iterative/bounded."""
    x = leaf([0.5, -1.0])
    with mt.fusion(fused):
        y = x
        for _ in range(5000):
            y = y * 1.0001
            y = y + 0.001
        loss = y.sum()
        loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 5000] * 2, rtol=1e-9)
    expected = x.numpy() * 1.0001 ** 5000 + 0.001 * sum(1.0001 ** k for k in range(5000))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-9)


def test_long_chain_of_non_elementwise_ops():
    x = leaf(np.ones((2, 2)))
    y = x
    for _ in range(3000):
        y = y.T.reshape(2, 2) @ mt.tensor(np.eye(2), dtype=mt.float64)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 2)))


@pytest.mark.parametrize("through", ["leaf", "intermediate"])
def test_node_with_thousands_of_consumers(through):
    """The gradient of a node used 3,000 times is a sum of 3,000 terms: bounded, too."""
    x = leaf([0.5, -1.0])
    h = x if through == "leaf" else x.tanh()
    s = h * 0
    for k in range(3000):
        s = s + h.exp() * k
    s.sum().backward()
    dh = np.exp(np.tanh(x.numpy()) if through != "leaf" else x.numpy()) * sum(range(3000))
    if through != "leaf":
        dh = dh * (1 - np.tanh(x.numpy()) ** 2)
    np.testing.assert_allclose(x.grad.numpy(), dh, rtol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_diamond(device):
    torch = pytest.importorskip("torch")
    a = leaf([[0.3, -0.7], [1.2, 0.1]], device=device)

    def f(a, lib):
        b = a * 2
        c = b.tanh()
        d = b.exp()
        e = lib.softmax(b, 1)
        return c * d + e @ b

    compare_with_torch(lambda a: f(a, mt), lambda a: f(a, torch), [a])


@pytest.mark.parametrize("device", DEVICES)
def test_reused_node_b_eq_a_plus_a(device):
    a = leaf([1.0, -2.0, 3.0], device=device)
    b = a + a
    c = b * b
    c.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 8 * a.numpy())  # d(4a^2)/da
    assert b.grad is None and c.grad is None


@pytest.mark.parametrize("device", DEVICES)
def test_same_node_as_both_operands_and_in_many_consumers(device):
    pytest.importorskip("torch")
    a = leaf([[0.5, -1.5, 2.0]], device=device)

    def f(a):
        s = a.sigmoid()
        return s * s + s / (a * a + 1) - s.sum(1, keepdims=True) * a + (s @ s.T)

    def tf(a):
        s = a.sigmoid()
        return s * s + s / (a * a + 1) - s.sum(1, keepdim=True) * a + (s @ s.T)

    compare_with_torch(f, tf, [a])
    assert mt.gradcheck(f, [a])


@pytest.mark.parametrize("device", DEVICES)
def test_backward_twice_with_retain_graph_doubles_leaf_grads(device):
    a = leaf([1.0, 2.0], device=device)
    w = leaf([3.0, -1.0], device=device)
    b = a * w
    c = b.tanh() * 2
    loss = c.sum()
    loss.backward(retain_graph=True)
    ga, gw = a.grad.numpy().copy(), w.grad.numpy().copy()
    loss.backward(retain_graph=True)
    np.testing.assert_allclose(a.grad.numpy(), 2 * ga)
    np.testing.assert_allclose(w.grad.numpy(), 2 * gw)
    loss.backward()  # the last one may free the graph
    np.testing.assert_allclose(a.grad.numpy(), 3 * ga)
    for inter in (b, c, loss):
        assert inter.grad is None
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("make", [
    lambda a: (a * a).sum(),
    lambda a: (a @ a).exp(),
    lambda a: a.max() * 2,
    lambda a: mt.cat([a, a])[1:].sum(),
    lambda a: a.reshape(2, 1).T.sum(),
    lambda a: mt.log_softmax(a, 0).mean(),
])
def test_second_backward_without_retain_graph_raises(make, device):
    a = leaf([1.0, 2.0], device=device)
    loss = make(a)
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_separate_graphs_accumulate_into_grad(device):
    a = leaf([1.0, 2.0], device=device)
    (a * 3).sum().backward()
    (a * a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [5.0, 7.0])
    a.grad = None
    (a * 3).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("device", DEVICES)
def test_grad_zero_and_accumulate(device):
    a = leaf([1.0, 2.0], device=device)
    (a * 3).sum().backward()
    a.grad.zero_()
    (a * 2).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 2.0])


def test_backward_without_grad_on_non_scalar_is_an_error():
    a = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"single-element.*\(2,\)"):
        (a * 2).backward()
    assert a.grad is None
    (a * 2)[:1].backward()  # one element (not 0-d) is fine, as in PyTorch
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 0.0])


def test_backward_on_something_without_grad_is_an_error():
    with pytest.raises(RuntimeError, match="requires_grad"):
        mt.tensor([1.0]).sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_backward_from_a_leaf(device):
    a = leaf([1.0, 2.0], device=device)
    a.backward(mt.tensor([0.5, 0.25], dtype=mt.float64, device=device))
    np.testing.assert_allclose(a.grad.numpy(), [0.5, 0.25])


@pytest.mark.parametrize("device", DEVICES)
def test_grad_has_the_leaf_shape_for_broadcast_operands(device):
    a = leaf(np.ones((3, 1)), device=device)
    b = leaf(np.ones((4,)), device=device)
    c = leaf(np.array(2.0), device=device)
    d = leaf(np.ones((1, 1, 4)), device=device)
    out = a * b + c - d / a
    assert out.shape == (1, 3, 4)
    out.sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,)
    assert c.grad.shape == () and d.grad.shape == (1, 1, 4)
    np.testing.assert_allclose(a.grad.numpy(), np.full((3, 1), 4 + 4))  # b + d/a^2
    np.testing.assert_allclose(c.grad.numpy(), 12.0)
    np.testing.assert_allclose(d.grad.numpy(), np.full((1, 1, 4), -3.0))


@pytest.mark.parametrize("device", DEVICES)
def test_unused_and_non_grad_inputs_get_no_grad(device):
    a = leaf([1.0], device=device)
    b = leaf([2.0], device=device)
    c = leaf([3.0], requires_grad=False, device=device)
    (a * c).sum().backward()
    assert b.grad is None and c.grad is None
    np.testing.assert_allclose(a.grad.numpy(), [3.0])


@pytest.mark.parametrize("device", CUDA_ONLY)
def test_to_device_carries_the_gradient_back(device):
    """``x.to(device)`` is differentiable: the gradient returns to x's device."""
    x = leaf([0.5, -1.0, 2.0])  # on the cpu
    y = x.to(device)
    assert y.device == mt.tensor.as_device(device) and y.requires_grad
    back = (y.tanh() * y).to("cpu")
    loss = back.sum() + (y * y).sum().to("cpu")
    loss.backward()
    a = np.array([0.5, -1.0, 2.0])
    expected = np.tanh(a) + a * (1 - np.tanh(a) ** 2) + 2 * a
    assert x.grad.device == x.device
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5)
    w = leaf([1.5, -0.5], device=device)  # a leaf on the device, used on the cpu
    (w.to("cpu") * 3).sum().backward()
    assert w.grad.device == w.device
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("device", DEVICES)
def test_detach_stops_the_gradient(device):
    a = leaf([1.0, 2.0], device=device)
    (a * a.detach()).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.0, 2.0])


# ---- saved tensors written in place between forward and backward -------------------

def _write_add(w):
    with mt.no_grad():
        w += 1


def _write_data(w):
    w.data[...] = 0


def _write_item(w):
    with mt.no_grad():
        w[0] = 5.0


def _write_zero(w):
    with mt.no_grad():
        w.zero_()


WRITES = [_write_add, _write_data, _write_item, _write_zero]

SAVING_OPS = {
    "mul": lambda x, w: (x * w).sum(),
    "tanh": lambda x, w: w.tanh().sum() + x.sum(),
    "div": lambda x, w: (x / (w + 3)).sum(),
    "MatMul": lambda x, w: (x @ w.reshape(2, 1)).sum(),
    "max": lambda x, w: w.max() + x.sum(),
    "pow": lambda x, w: (x ** w).sum(),
}


@pytest.mark.usefixtures("fuse_all")  # "div" saves a lazy value (see the comment below)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(SAVING_OPS))
@pytest.mark.parametrize("write", WRITES)
def test_in_place_write_to_a_saved_tensor_is_reported(op, write, device):
    x = leaf([1.0, 2.0], device=device)
    # Not from_numpy: a value reading memory the user can reach is computed at once
    # (tests/trust/test_laziness_invisible.py), and "div" is here to save a lazy one.
    w = mt.tensor([0.5, 1.5], dtype=mt.float64, device=device, requires_grad=True)
    loss = SAVING_OPS[op](x, w)
    write(w)
    with pytest.raises(RuntimeError, match=rf"{op}.*modified in place"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_write_after_backward_is_fine(device):
    x = leaf([1.0, 2.0], device=device)
    w = leaf([0.5, 1.5], device=device)
    loss = (x * w).sum()
    loss.backward()
    _write_add(w)
    np.testing.assert_allclose(x.grad.numpy(), [0.5, 1.5])


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_write_to_an_unrelated_tensor_is_fine(device):
    x = leaf([1.0, 2.0], device=device)
    w = leaf([0.5, 1.5], device=device)
    other = leaf([9.0, 9.0], device=device)
    loss = (x * w).sum()
    _write_add(other)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.5, 1.5])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("write", [_write_add, _write_data])
def test_in_place_write_to_a_saved_intermediate_never_gives_wrong_grads(fused, write, device):
    """``y = x * 2`` (maybe lazy) is saved by ``y * w``; writing into y afterwards must
    either be reported or leave the gradient of the forward that was computed."""
    with mt.fusion(fused):
        x = leaf([1.0, 2.0], device=device)
        w = leaf([3.0, 4.0], device=device)
        y = x * 2
        loss = (y * w).sum()
        value = loss.item()
        write(y)
        try:
            loss.backward()
        except RuntimeError as e:
            assert "modified in place" in str(e)
            return
    assert value == 22.0
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 8.0])

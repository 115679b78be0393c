"""The user API: ``mt.tensor`` and the factories return Nodes with PyTorch's attributes."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt


def test_tensor_from_data_copies_and_infers_dtype():
    data = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    x = mt.tensor(data)
    assert isinstance(x, mt.Node) and isinstance(x, mt.Tensor)
    data[0, 0] = 100
    assert x.numpy()[0, 0] == 1.0  # a copy
    assert mt.tensor([1.0, 2.0]).dtype == mt.float32
    assert mt.tensor([1, 2]).dtype == mt.int64
    assert mt.tensor([True, False]).dtype == mt.bool_
    assert mt.tensor(2.5).shape == () and mt.tensor(2.5).ndim == 0
    assert mt.tensor([1, 2], dtype=mt.float64).dtype == mt.float64
    assert mt.tensor([1, 2], dtype="float32").dtype == mt.float32


def test_tensor_keyword_arguments_and_attributes():
    x = mt.tensor([[1.0, 2.0, 3.0]], dtype=mt.float64, device="cpu", requires_grad=True)
    assert x.shape == (1, 3) and x.ndim == 2 and x.dtype == mt.float64
    assert str(x.device) == "cpu" and x.device == mt.Device("cpu")
    assert x.requires_grad and x.is_leaf and x.grad_fn is None and x.grad is None
    assert x.numel() == 3 and x.size() == (1, 3) and x.size(1) == 3 and x.dim() == 2
    assert len(x) == 1


def test_tensor_of_a_node_copies_it():
    a = mt.tensor([1.0, 2.0], requires_grad=True)
    b = mt.tensor(a * 2)
    assert b.is_leaf and not b.requires_grad
    np.testing.assert_array_equal(b.numpy(), [2.0, 4.0])


@pytest.mark.parametrize("factory", [mt.zeros, mt.ones, mt.randn, mt.rand, mt.empty])
def test_shape_factories(factory):
    for args in [(2, 3), ((2, 3),)]:
        x = factory(*args)
        assert isinstance(x, mt.Node) and x.shape == (2, 3) and x.dtype == mt.float32
        assert not x.requires_grad and x.is_leaf
    y = factory(4, dtype=mt.float64, requires_grad=True)
    assert y.dtype == mt.float64 and y.requires_grad and y.is_leaf


def test_factory_values():
    np.testing.assert_array_equal(mt.zeros(2).numpy(), [0, 0])
    np.testing.assert_array_equal(mt.ones(2).numpy(), [1, 1])
    np.testing.assert_array_equal(mt.arange(4).numpy(), [0, 1, 2, 3])
    np.testing.assert_array_equal(mt.arange(1, 7, 2).numpy(), [1, 3, 5])
    assert mt.arange(3.0).dtype.kind == "f"
    f = mt.full((2, 2), 7.0)
    assert isinstance(f, mt.Node) and f.shape == (2, 2)
    np.testing.assert_array_equal(f.numpy(), 7.0)
    r = mt.rand(1000).numpy()
    assert r.min() >= 0 and r.max() < 1
    n = mt.randn(2000, dtype=mt.float64).numpy()
    assert abs(n.mean()) < 0.15 and 0.85 < n.std() < 1.15


def test_manual_seed_makes_random_factories_repeatable():
    mt.manual_seed(3)
    a = mt.randn(5).numpy()
    mt.manual_seed(3)
    np.testing.assert_array_equal(a, mt.randn(5).numpy())


@pytest.mark.parametrize("factory", [mt.zeros_like, mt.ones_like, mt.randn_like, mt.rand_like,
                                     mt.empty_like])
def test_like_factories(factory):
    x = mt.tensor([[1.0, 2.0, 3.0]], dtype=mt.float64, requires_grad=True)
    y = factory(x)
    assert isinstance(y, mt.Node) and y.shape == x.shape and y.dtype == mt.float64
    assert not y.requires_grad and y.is_leaf
    z = factory(x, dtype=mt.float32, requires_grad=True)
    assert z.dtype == mt.float32 and z.requires_grad


def test_full_like():
    x = mt.zeros(2, 3)
    y = mt.full_like(x, 4.0)
    assert isinstance(y, mt.Node) and y.shape == (2, 3)
    np.testing.assert_array_equal(y.numpy(), 4.0)


def test_detach_numpy_item_to():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    np.testing.assert_array_equal(d.numpy(), [3.0, 6.0])
    assert isinstance(y.numpy(), np.ndarray)
    s = y.sum()
    assert s.item() == 9.0 and isinstance(s.item(), float)
    assert mt.tensor(3).item() == 3 and isinstance(mt.tensor(3).item(), int)
    assert x.to("cpu") is x and x.to(mt.Device("cpu")) is x
    assert x.cpu() is x
    with pytest.raises(ValueError):
        mt.tensor([1.0, 2.0]).item()


def test_detach_shares_storage_with_a_leaf():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    with mt.no_grad():
        x += 1
    np.testing.assert_array_equal(d.numpy(), [2.0, 3.0])


@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_detach_of_a_lazy_value_shares_storage_too():
    for fused in (True, False):
        with mt.fusion(fused):
            x = mt.tensor([1.0, 2.0], requires_grad=True)
            y = x * 2
            d = y.detach()
            d += 1  # d does not require grad: a plain in-place write, seen by y (as in torch)
            np.testing.assert_array_equal(y.numpy(), [3.0, 5.0])
            y.sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_backward_signature():
    x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(mt.ones_like(y))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    x.grad = None
    y = x * x
    y.backward(grad=np.array([1.0, 0.0, 2.0], dtype=np.float32), retain_graph=False)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 12.0])
    with pytest.raises(RuntimeError, match="shape"):
        (x * x).backward(mt.ones(2))


def test_repr_shows_values_and_flags():
    x = mt.tensor([1.5, -2.0], requires_grad=True)
    r = repr(x)
    assert r.startswith("tensor(") and "1.5" in r and "-2." in r and "requires_grad=True" in r
    y = x * 2
    r = repr(y)
    assert "3." in r and "-4." in r and "grad_fn" in r and "requires_grad" not in r
    assert "dtype=float64" in repr(mt.tensor([1.0], dtype=mt.float64))
    assert "dtype" not in repr(mt.tensor([1.0]))
    assert "5" in repr(mt.tensor(5)) and str(mt.tensor([7.0])) == repr(mt.tensor([7.0]))


def test_grad_is_a_node_with_the_leaf_shape_and_dtype():
    x = mt.tensor([[1.0, 2.0]], dtype=mt.float64, requires_grad=True)
    (x * 2).sum().backward()
    assert isinstance(x.grad, mt.Node)
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
    assert not x.grad.requires_grad


def test_requires_grad_():
    x = mt.zeros(2)
    assert x.requires_grad_() is x and x.requires_grad
    y = x * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)


def test_inplace_on_a_leaf_that_requires_grad_needs_no_grad():
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        w += 1
    with pytest.raises(RuntimeError, match="no_grad"):
        w[0] = 5.0
    with mt.no_grad():
        w -= 0.5
        w *= 2
        w /= 4
        w[1] = 9.0
    np.testing.assert_array_equal(w.numpy(), [0.25, 9.0])
    assert w.requires_grad and w.is_leaf


def test_len_bool_and_tolist():
    x = mt.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert len(x) == 2 and x.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert bool(mt.tensor([1.0])) and not bool(mt.tensor(0.0))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    with pytest.raises(TypeError):
        len(mt.tensor(1.0))


def test_numpy_interop():
    x = mt.tensor([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(x), [1.0, 2.0])
    y = x + np.array([1.0, 1.0], dtype=np.float32)
    assert isinstance(y, mt.Node)
    z = np.float32(2.0) * x
    assert isinstance(z, mt.Node)
    np.testing.assert_array_equal(z.numpy(), [2.0, 4.0])


def test_clone_is_a_copy_in_the_graph():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert c.grad_fn is not None
    with mt.no_grad():
        x += 1
    np.testing.assert_array_equal(c.numpy(), [1.0, 2.0])
    (c * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_astype_is_differentiable():
    x = mt.tensor([1.5, 2.5], requires_grad=True)
    y = x.astype(mt.float64)
    assert y.dtype == mt.float64 and y.requires_grad
    np.testing.assert_array_equal(y.numpy(), [1.5, 2.5])
    (y * y).sum().backward()
    assert x.grad.dtype == mt.float32
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 5.0])
    assert x.astype(mt.float32) is x
    i = x.astype(mt.int64)
    assert i.dtype == mt.int64 and not i.requires_grad


def test_augmented_assignment_on_graph_nodes_is_recorded_out_of_place():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    before = y
    y += x
    y *= 3
    assert y is not before and y.grad_fn is not None
    np.testing.assert_array_equal(before.numpy(), [2.0, 4.0])  # the old Node is unchanged
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [9.0, 9.0])
    acc = mt.zeros(2)
    acc += x  # a plain buffer accumulating a tensor that requires grad joins the graph
    assert acc.requires_grad
    with pytest.raises(ValueError, match="shape"):
        s = mt.zeros(1)
        s += x
    with pytest.raises(RuntimeError, match="no_grad"):
        (x * 1).zero_()


def test_item_assignment_of_a_value_that_requires_grad_is_refused():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    out = mt.zeros(2)
    with pytest.raises(RuntimeError, match="not recorded"):
        out[0] = x[1]
    with mt.no_grad():
        out[0] = x[1]
    assert out.numpy()[0] == 2.0 and not out.requires_grad

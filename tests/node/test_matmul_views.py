"""``@`` (1-D, 2-D, batched), views (indexing, gather, transpose, permute, .T,
reshape/view, expand, squeeze, unsqueeze, flatten) and joins (cat, stack):
finite differences and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt

from ..devices import DEVICES
from ._helpers import (
    compare_with_torch,
    layouts,
    leaf,
    nonempty_shapes,
    seeds,
    values,
)

# ---- matmul ------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3,), (3,)),            # 1-D . 1-D -> scalar
    ((3,), (3, 2)),          # vector @ matrix
    ((2, 3), (3,)),          # matrix @ vector
    ((2, 3), (3, 4)),
    ((1, 3), (3, 1)),
    ((2, 2, 3), (2, 3, 4)),  # batched
    ((2, 2, 3), (3, 4)),     # batch broadcast on the left
    ((3,), (2, 3, 2)),       # 1-D @ batched
    ((2, 2, 3), (3,)),       # batched @ 1-D
    ((2, 1, 2, 3), (3, 3, 2)),  # batch dims broadcast both ways
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
@settings(max_examples=8, deadline=None)
@given(la=layouts, lb=layouts, seed=seeds)
def test_matmul_gradcheck(device, sa, sb, la, lb, seed):
    rng = np.random.default_rng(seed)
    a, b = leaf(values(rng, sa), la, device=device), leaf(values(rng, sb), lb, device=device)
    assert mt.gradcheck(lambda a, b: a @ b, [a, b])
    assert a.grad.shape == sa and b.grad.shape == sb


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
@settings(max_examples=8, deadline=None)
@given(la=layouts, lb=layouts, seed=seeds)
def test_matmul_matches_torch(device, sa, sb, la, lb, seed):
    pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    a, b = leaf(values(rng, sa), la, device=device), leaf(values(rng, sb), lb, device=device)
    compare_with_torch(lambda a, b: a @ b, lambda a, b: a @ b, [a, b], seed=seed)
    compare_with_torch(mt.matmul, lambda a, b: a @ b, [a, b], seed=seed + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_of_lazy_operands_and_one_side_grad(device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = leaf(values(rng, (3, 4)), device=device)
    b = leaf(values(rng, (4, 2)), requires_grad=False, device=device)
    compare_with_torch(lambda a: ((a * 2).tanh() @ (b + 1)).sigmoid(),
                       lambda a: ((a * 2).tanh() @ (torch.tensor(b.numpy()) + 1)).sigmoid(), [a])
    assert b.grad is None


def test_matmul_with_numpy_operand():
    a = leaf(np.eye(2))
    out = a @ np.array([[1.0, 2.0], [3.0, 4.0]])
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [[3.0, 7.0], [3.0, 7.0]])


# ---- indexing --------------------------------------------------------------------

BASIC_KEYS = [
    (1,),
    (-1,),
    (slice(1, None),),
    (slice(None, None, 2),),
    (slice(None, None, -1),),
    (Ellipsis, 0),
    (None, slice(0, 2)),
    (0, slice(None, None, -2)),
    (slice(1, 3), None, -1),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key", BASIC_KEYS, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_basic_indexing(device, key, layout):
    arr = values(np.random.default_rng(0), (3, 4))
    x = leaf(arr, layout, device=device)
    assert mt.gradcheck(lambda x: x[key] * 1.5, [x])
    np.testing.assert_array_equal(x[key].numpy(), arr[key])
    pytest.importorskip("torch")
    if any(isinstance(k, slice) and k.step is not None and k.step < 0 for k in key):
        return  # torch has no negative-step slices
    compare_with_torch(lambda x: x[key], lambda x: x[key], [x])


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(shape=nonempty_shapes, layout=layouts, seed=seeds, n=st.integers(1, 6))
def test_integer_array_gather_with_repeats(device, shape, layout, seed, n):
    rng = np.random.default_rng(seed)
    arr = values(rng, shape)
    x = leaf(arr, layout, device=device)
    idx = rng.integers(-shape[0], shape[0], n)  # repeats and negatives: scatter-add
    assert mt.gradcheck(lambda x: x[idx], [x])
    np.testing.assert_array_equal(x[idx].numpy(), arr[idx])
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda x: x[idx] * 2, lambda x: x[torch.tensor(idx)] * 2, [x], seed=seed)
    # a Node (or list) as the index
    compare_with_torch(lambda x: x[mt.tensor(idx, device=device)],
                       lambda x: x[torch.tensor(idx)], [x])
    compare_with_torch(lambda x: x[list(idx)], lambda x: x[torch.tensor(idx)], [x])


@pytest.mark.parametrize("device", DEVICES)
def test_two_array_gather(device):
    torch = pytest.importorskip("torch")
    x = leaf(values(np.random.default_rng(3), (3, 4)), device=device)
    rows, cols = np.array([0, 2, 2, 1]), np.array([3, 0, 0, 1])
    assert mt.gradcheck(lambda x: x[rows, cols], [x])
    compare_with_torch(lambda x: x[rows, cols],
                       lambda x: x[torch.tensor(rows), torch.tensor(cols)], [x])
    # cross-entropy style pick: log_softmax rows at the labels
    compare_with_torch(lambda x: -mt.log_softmax(x, 1)[np.arange(3), cols[:3]].mean(),
                       lambda x: -torch.log_softmax(x, 1)[torch.arange(3), torch.tensor(
                           cols[:3])].mean(), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_indexing_a_lazy_value(device):
    pytest.importorskip("torch")
    x = leaf(values(np.random.default_rng(1), (3, 4)), device=device)
    compare_with_torch(lambda x: (x * 3 + 1)[1:, ::2].tanh(),
                       lambda x: (x * 3 + 1)[1:, ::2].tanh(), [x])


# ---- shape views -----------------------------------------------------------------

VIEWS = {
    "transpose": (lambda x: x.transpose(0, -1), lambda x: x.transpose(0, -1)),
    "transpose_fn": (lambda x: mt.transpose(x, 0, x.ndim - 1), lambda x: x.transpose(0, -1)),
    "T": (lambda x: x.T, lambda x: x.permute(*reversed(range(x.ndim)))),
    "permute": (lambda x: x.permute(*reversed(range(x.ndim))),
                lambda x: x.permute(*reversed(range(x.ndim)))),
    "permute_fn": (lambda x: mt.permute(x, *range(x.ndim)[1:], 0),
                   lambda x: x.permute(*range(x.ndim)[1:], 0)),
    "reshape": (lambda x: x.reshape(-1), lambda x: x.reshape(-1)),
    "reshape_2d": (lambda x: x.reshape(x.shape[0], -1), lambda x: x.reshape(x.shape[0], -1)),
    "reshape_fn": (lambda x: mt.reshape(x, (1, -1, 1)), lambda x: x.reshape(1, -1, 1)),
    "flatten": (lambda x: x.flatten(), lambda x: x.flatten()),
    "flatten_fn": (lambda x: mt.flatten(x, 1), lambda x: x.flatten(1)),
    "unsqueeze": (lambda x: x.unsqueeze(1), lambda x: x.unsqueeze(1)),
    "unsqueeze_neg": (lambda x: mt.unsqueeze(x, -1), lambda x: x.unsqueeze(-1)),
    "squeeze": (lambda x: x.unsqueeze(0).unsqueeze(-1).squeeze(),
                lambda x: x.unsqueeze(0).unsqueeze(-1).squeeze()),
    "squeeze_axis": (lambda x: mt.squeeze(x.unsqueeze(0), 0),
                     lambda x: x.unsqueeze(0).squeeze(0)),
    "expand": (lambda x: x.unsqueeze(0).expand(3, *x.shape),
               lambda x: x.unsqueeze(0).expand(3, *x.shape)),
    "expand_neg1": (lambda x: mt.expand(x.unsqueeze(1), -1, 2, *x.shape[1:]),
                    lambda x: x.unsqueeze(1).expand(-1, 2, *x.shape[1:])),
    "broadcast_to": (lambda x: x.broadcast_to((2,) + x.shape),
                     lambda x: x.broadcast_to((2,) + x.shape)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(VIEWS))
@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=2, max_size=3).map(tuple), layout=layouts,
       seed=seeds, lazy=st.booleans())
def test_view_gradcheck_and_torch(device, name, shape, layout, seed, lazy):
    fn, tfn = VIEWS[name]
    x = leaf(values(np.random.default_rng(seed), shape), layout, device=device)
    pre = (lambda x: x * 2 - 1) if lazy else (lambda x: x)  # the view of a leaf or of a lazy map
    assert mt.gradcheck(lambda x: fn(pre(x)) * 1.5, [x])
    pytest.importorskip("torch")
    compare_with_torch(lambda x: fn(pre(x)).exp(), lambda x: tfn(pre(x)).exp(), [x], seed=seed)


@pytest.mark.parametrize("device", DEVICES)
def test_view_of_contiguous_and_error_for_impossible_view(device):
    x = leaf(np.arange(6.0).reshape(2, 3), device=device)
    v = x.view(3, 2)
    np.testing.assert_array_equal(v.numpy(), np.arange(6.0).reshape(3, 2))
    v.sum().backward()
    assert x.grad.shape == (2, 3)
    with pytest.raises((RuntimeError, ValueError)):
        x.T.view(6)  # transposed strides cannot be viewed as 1-D without a copy
    np.testing.assert_array_equal(x.T.reshape(6).numpy(), np.arange(6.0).reshape(2, 3).T.ravel())


@pytest.mark.parametrize("device", DEVICES)
def test_leaf_views_share_memory_with_the_leaf(device):
    base = mt.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    t = base.T
    with mt.no_grad():
        base += 1
    np.testing.assert_array_equal(t.numpy(), [[2.0, 4.0], [3.0, 5.0]])


# ---- cat and stack -------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(shape=nonempty_shapes, layout=layouts, seed=seeds, n=st.integers(1, 3), data=st.data())
def test_cat_gradcheck_and_torch(device, shape, layout, seed, n, data):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    nodes = []
    for _ in range(n):
        s = list(shape)
        s[axis] = data.draw(st.integers(1, 3))
        nodes.append(leaf(values(rng, tuple(s)), layout, device=device))
    assert mt.gradcheck(lambda *xs: mt.cat(xs, axis), nodes)
    assert mt.gradcheck(lambda *xs: mt.cat([x * 2 for x in xs], axis=axis).tanh(), nodes)
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda *xs: mt.cat(list(xs), axis), lambda *xs: torch.cat(xs, axis),
                       nodes, seed=seed)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(shape=nonempty_shapes, layout=layouts, seed=seeds, n=st.integers(1, 3), data=st.data())
def test_stack_gradcheck_and_torch(device, shape, layout, seed, n, data):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    nodes = [leaf(values(rng, shape), layout, device=device) for _ in range(n)]
    assert mt.gradcheck(lambda *xs: mt.stack(xs, axis), nodes)
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda *xs: mt.stack([x.exp() for x in xs], axis),
                       lambda *xs: torch.stack([x.exp() for x in xs], axis), nodes, seed=seed)


@pytest.mark.parametrize("device", DEVICES)
def test_cat_mixed_requires_grad(device):
    a = leaf([1.0, 2.0], device=device)
    b = leaf([3.0], requires_grad=False, device=device)
    out = mt.cat([a, b])
    assert out.requires_grad
    (out * mt.tensor([1.0, 2.0, 3.0], dtype=mt.float64, device=device)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 2.0])
    assert b.grad is None


def test_cat_shape_errors():
    with pytest.raises(ValueError, match="cat"):
        mt.cat([mt.zeros(2, 3), mt.zeros(3, 2)], axis=0)
    with pytest.raises(ValueError):
        mt.cat([])

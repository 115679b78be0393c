"""Reductions (sum, mean, max, min, argmax) and the ops built from them (logsumexp,
softmax, log_softmax): finite differences and PyTorch over drawn shapes, axes and layouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt

from ..devices import DEVICES, tolerance
from ._helpers import (
    compare_with_torch,
    layouts,
    leaf,
    nonempty_shapes,
    seeds,
    values,
)


@st.composite
def shape_and_axis(draw, allow_none=True, allow_tuple=True):
    """A shape and an axis spec for it: None, one (maybe negative) axis, or a tuple."""
    shape = draw(nonempty_shapes)
    nd = len(shape)
    kinds = ["int"] + (["none"] if allow_none else []) + (["tuple"] if allow_tuple else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return shape, None
    if kind == "int":
        return shape, draw(st.integers(-nd, nd - 1))
    axes = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
    return shape, tuple(axes)


def _torch_dim(axis, ndim):
    return tuple(range(ndim)) if axis is None else axis


REDUCTIONS = {
    # name: (minitorch(x, axis, keepdims), torch(x, dim, keepdim))
    "sum": (lambda x, a, k: x.sum(a, keepdims=k), lambda x, d, k: x.sum(dim=d, keepdim=k)),
    "sum_fn": (lambda x, a, k: mt.sum(x, a, k), lambda x, d, k: x.sum(dim=d, keepdim=k)),
    "mean": (lambda x, a, k: x.mean(a, keepdims=k), lambda x, d, k: x.mean(dim=d, keepdim=k)),
    "max": (lambda x, a, k: x.amax(a, keepdims=k), lambda x, d, k: x.amax(dim=d, keepdim=k)),
    "min": (lambda x, a, k: mt.amin(x, a, k), lambda x, d, k: x.amin(dim=d, keepdim=k)),
    "logsumexp": (lambda x, a, k: mt.logsumexp(x, a, k),
                  lambda x, d, k: x.logsumexp(dim=d, keepdim=k)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@settings(max_examples=25, deadline=None)
@given(sa=shape_and_axis(), keepdims=st.booleans(), layout=layouts, seed=seeds)
def test_reduction_gradcheck(device, name, sa, keepdims, layout, seed):
    shape, axis = sa
    fn = REDUCTIONS[name][0]
    # distinct values: no ties
    x = leaf(values(np.random.default_rng(seed), shape), layout, device=device)
    assert mt.gradcheck(lambda x: fn(x, axis, keepdims), [x])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@settings(max_examples=25, deadline=None)
@given(sa=shape_and_axis(), keepdims=st.booleans(), layout=layouts, seed=seeds)
def test_reduction_matches_torch(device, name, sa, keepdims, layout, seed):
    pytest.importorskip("torch")
    shape, axis = sa
    fn, tfn = REDUCTIONS[name]
    x = leaf(values(np.random.default_rng(seed), shape), layout, device=device)
    compare_with_torch(lambda x: fn(x, axis, keepdims),
                       lambda x: tfn(x, _torch_dim(axis, len(shape)), keepdims), [x], seed=seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["max", "min"])
@settings(max_examples=25, deadline=None)
@given(sa=shape_and_axis(), keepdims=st.booleans(), seed=seeds)
def test_max_min_share_ties_evenly_like_torch_amax(device, name, sa, keepdims, seed):
    pytest.importorskip("torch")
    shape, axis = sa
    fn, tfn = REDUCTIONS[name]
    ties = np.random.default_rng(seed).integers(0, 3, shape).astype(np.float64)  # many ties
    x = leaf(ties, device=device)
    compare_with_torch(lambda x: fn(x, axis, keepdims),
                       lambda x: tfn(x, _torch_dim(axis, len(shape)), keepdims), [x], seed=seed)


@pytest.mark.parametrize("device", DEVICES)
def test_max_tie_gradient_is_split(device):
    x = leaf([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], device=device)
    x.amax(1).sum().backward()
    rtol, _ = tolerance(device, 1e-7, 0.0)
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], rtol=rtol)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(sa=shape_and_axis(allow_tuple=False), keepdims=st.booleans(), layout=layouts, seed=seeds)
def test_argmax_is_not_differentiable(device, sa, keepdims, layout, seed):
    shape, axis = sa
    arr = values(np.random.default_rng(seed), shape)
    x = leaf(arr, layout, device=device)
    out = mt.argmax(x, axis, keepdims)
    assert not out.requires_grad and out.grad_fn is None and out.is_leaf
    np.testing.assert_array_equal(out.numpy(), np.argmax(arr, axis, keepdims=keepdims))
    np.testing.assert_array_equal(x.argmax(axis).numpy(), np.argmax(arr, axis))
    # an argmax used as an index still lets the values' gradient through
    if axis is None and not keepdims:
        picked = x.reshape(-1)[out.item()]
        picked.backward()
        expected = np.zeros(arr.size)
        expected[np.argmax(arr)] = 1
        np.testing.assert_array_equal(x.grad.numpy().reshape(-1), expected)


# ---- softmax family ------------------------------------------------------------

SOFTMAXES = {
    "softmax": (mt.softmax, lambda x, d: x.softmax(d)),
    "log_softmax": (mt.log_softmax, lambda x, d: x.log_softmax(d)),
    "softmax_method": (lambda x, a: x.softmax(a), lambda x, d: x.softmax(d)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(SOFTMAXES))
@settings(max_examples=25, deadline=None)
@given(sa=shape_and_axis(allow_none=False, allow_tuple=False), layout=layouts, seed=seeds)
def test_softmax_gradcheck_and_torch(device, name, sa, layout, seed):
    shape, axis = sa
    fn, tfn = SOFTMAXES[name]
    x = leaf(values(np.random.default_rng(seed), shape) * 3, layout, device=device)
    assert mt.gradcheck(lambda x: fn(x, axis), [x])
    pytest.importorskip("torch")
    compare_with_torch(lambda x: fn(x, axis), lambda x: tfn(x, axis), [x], seed=seed)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_is_stable_for_large_inputs(device):
    torch = pytest.importorskip("torch")
    x = leaf([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]], device=device)
    for fn, tfn in [(mt.softmax, torch.softmax), (mt.log_softmax, torch.log_softmax)]:
        compare_with_torch(lambda x, fn=fn: fn(x, 1), lambda x, tfn=tfn: tfn(x, 1), [x])
        assert np.all(np.isfinite(x.grad.numpy()))
    compare_with_torch(lambda x: mt.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_rows_sum_to_one(device):
    x = mt.randn(4, 5, dtype=mt.float64, requires_grad=True, device=device)
    s = mt.softmax(x, axis=1)
    np.testing.assert_allclose(s.sum(1).numpy(), np.ones(4))
    # d(sum softmax)/dx == 0
    s.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 0, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_full_mean_is_a_scalar(device):
    x = leaf(np.arange(6.0).reshape(2, 3), device=device)
    m = x.mean()
    assert m.shape == () and m.item() == 2.5
    m.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 1 / 6))


@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_and_log_softmax_with_minus_inf_entries_match_torch(device):
    """Masked entries (-inf) get zero gradient; a fully masked row's logsumexp is -inf."""
    torch = pytest.importorskip("torch")
    x = leaf([[-np.inf, 0.0, 1.0], [2.0, -np.inf, -np.inf]], device=device)
    compare_with_torch(lambda x: mt.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1), [x])
    compare_with_torch(lambda x: mt.softmax(x, 1), lambda x: torch.softmax(x, 1), [x])
    masked = leaf([[-np.inf, -np.inf], [0.5, 1.0]], device=device)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = mt.logsumexp(masked, 1).numpy()
    np.testing.assert_array_equal(out[0], -np.inf)
    np.testing.assert_allclose(out[1], np.log(np.exp(0.5) + np.exp(1.0)))

"""``prod``, ``any`` and ``all`` as rows of ``REDUCTIONS`` (tensor/ops.py).

A row is the whole reduction on every surface and evaluator, so these check what a
row brings beyond tests/test_op_surface.py's generic checks: that the Node-level
functions are the rows' (one fused reduction kernel over an expression), PyTorch's
dtypes and edge cases (NaN, empty axes, integer products), products exact at zeros
to the second derivative, and ``dtype=`` on every reduction -- on hypothesis-drawn
shapes and layouts, on both sides of the eager/fused policy, and against PyTorch
when it is installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.node import ops as node_ops
from minitorch_exp.node.node import Node
from minitorch_exp.tensor.ops import REDUCTIONS

from ._helpers import assert_hessians_match_torch, leaf, nonempty_shapes
from .test_new_elementwise import POLICIES, policy


def test_the_functions_and_methods_are_the_rows():
    x = leaf(np.arange(1.0, 7.0).reshape(2, 3))
    y = x.prod(1)
    assert y.grad_fn.fn.reduction is REDUCTIONS["prod"]
    for name in ("prod", "any", "all"):
        assert getattr(mt, name) is node_ops.FUNCTIONS[name] is getattr(Node, name)


def test_a_product_of_an_expression_is_one_fused_reduction():
    """Above the fusion threshold ``(x * 0.5 + 1).prod(1)`` is one reduction kernel that
    reads ``x``: the product folds the expression's values as they are computed."""
    a = np.random.default_rng(0).uniform(-0.1, 0.1, (40, 3000))
    with policy("threshold 0"):
        x = mt.tensor(a)
        with mt.count_kernels() as k:
            y = (x * 0.5 + 1).prod(1).numpy()
    assert k.counts == {"reduce": 1, "total": 1}
    np.testing.assert_allclose(y, np.prod(a * 0.5 + 1, axis=1), rtol=1e-12)


def in_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """``a`` (its dtype kept) with its memory in ``layout``."""
    if layout == "transposed":
        return np.ascontiguousarray(a.T).T
    return np.ascontiguousarray(a[..., ::-1])[..., ::-1] if layout == "reversed" else a


@settings(max_examples=40, deadline=None)
@given(shape=nonempty_shapes, layout=st.sampled_from(["contiguous", "transposed", "reversed"]),
       dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_]),
       seed=st.integers(0, 2**16), side=st.sampled_from(POLICIES), data=st.data())
def test_values_and_dtypes_match_numpy_and_pytorchs_rules(shape, layout, dtype, seed, side,
                                                          data):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, shape).astype(dtype)
    if np.dtype(dtype).kind == "f":  # NaN is truthy
        a = (a * np.where(rng.random(shape) < 0.1, np.nan, 0.7)).astype(dtype)
    a = in_layout(a, layout)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    keep = data.draw(st.booleans())
    wide = np.int64 if np.dtype(dtype).kind in "bi" else dtype  # PyTorch's integer product
    with policy(side):
        x = mt.tensor(a)
        for got, want in [(x.prod(dim, keep), np.prod(a, dim, dtype=wide, keepdims=keep)),
                          (mt.prod(x), np.prod(a, dtype=wide)),
                          (x.any(dim, keep), np.any(a, dim, keepdims=keep)),
                          (mt.all(x, dim=dim, keepdim=keep), np.all(a, dim, keepdims=keep)),
                          (x.any(), np.any(a)), (x.all(), np.all(a))]:
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got.numpy(), want, rtol=2e-6)


@pytest.mark.parametrize("side", POLICIES)
def test_empty_axes_give_each_rows_identity(side):
    with policy(side):
        x = mt.zeros((3, 0))
        assert x.prod(1).tolist() == [1.0, 1.0, 1.0]
        assert x.any(1).tolist() == [False] * 3 and x.all(1).tolist() == [True] * 3
        assert not mt.any(x).item() and mt.all(x).item()


def test_any_and_all_give_values_without_a_graph():
    x = leaf([0.0, 2.0])
    for y in (x.any(), mt.all(x, 0)):
        assert y.dtype == mt.bool and not y.requires_grad and y.grad_fn is None


#: ``prod`` and the running product ``cumprod`` (a library row): the two products whose
#: rules divide by no zero, and are exact at zeros to the second derivative.
PRODUCTS = {"prod": lambda m, x, dim: x.prod(dim),
            "cumprod": lambda m, x, dim: m.cumprod(x, dim)}


@pytest.mark.parametrize("zeros", [[], [(0, 1)], [(0, 1), (0, 3)], [(1, 0), (1, 2), (1, 3)],
                                   [(0, 0), (1, 3)]])
@pytest.mark.parametrize("name, dim", [("prod", 0), ("prod", 1), ("prod", None),
                                       ("cumprod", 0), ("cumprod", 1)])  # a scan: one dim
def test_products_pass_gradgradcheck_with_zeros(name, dim, zeros):
    """One zero in a slice, two, three, at either end."""
    a = np.random.default_rng(3).uniform(0.5, 1.5, (2, 4))
    for z in zeros:
        a[z] = 0.0
    fn = lambda t: PRODUCTS[name](mt, t * 1.5, dim).sin()  # noqa: E731
    assert mt.autograd.gradcheck(fn, [leaf(a)])
    assert mt.autograd.gradgradcheck(fn, [leaf(a)])


@pytest.mark.parametrize("name", sorted(PRODUCTS))
@settings(max_examples=15, deadline=None)
@given(shape=nonempty_shapes, seed=st.integers(0, 2**16), data=st.data())
def test_product_hessians_match_pytorch(name, shape, seed, data):
    pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.5, 1.5, shape) * (rng.random(shape) > 0.25)  # zeros too
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    # x ** 3 keeps the gradient a function of x where a product is of one entry
    # (PyTorch refuses a second grad of a constant)
    assert_hessians_match_torch(
        lambda m, x: (PRODUCTS[name](m, x, dim) ** 2).sum() + (x ** 3).sum(), a,
        rng.standard_normal(shape))


def test_every_reduction_takes_pytorchs_dtype():
    x = mt.tensor(np.array([[1, 2], [3, 4]], np.int32))
    assert mt.sum(x, dtype=mt.float64).dtype == mt.float64
    assert x.prod(1, dtype=mt.float32).tolist() == [2.0, 12.0]
    assert x.mean(dtype=mt.float64).item() == 2.5
    y = leaf([1.0, 2.0])
    mt.sum(y, dtype=mt.float32).backward()
    assert y.grad.dtype == mt.float64 and y.grad.tolist() == [1.0, 1.0]

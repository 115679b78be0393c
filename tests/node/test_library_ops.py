"""Library ops (node/library_ops.py): gathers and scatters, sorts, scans, products, norms.

Values against NumPy references written here (loops, not the implementation's
fancy indices) on hypothesis-drawn shapes, dims, layouts and dtypes, on both
sides of the eager/fused policy; gradients by float64 finite differences
(zeros included where a product's gradient must not divide) and against PyTorch
when it is installed; index errors; and a captured step replaying them equal
to its eager twin.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt

from ._helpers import compare_with_torch, layouts, leaf, nonempty_shapes, seeds, strided_array
from .test_new_elementwise import POLICIES, policy

DTYPES = [np.float32, np.float64, np.int64]


def arr_of(shape, seed, dtype, layout="contiguous", distinct=False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.permutation(math.prod(shape)).reshape(shape) - 2.0 if distinct \
        else rng.uniform(-3, 3, shape)
    v = strided_array(v, layout)
    return v.astype(dtype) if np.dtype(dtype).kind == "f" else np.round(v).astype(dtype)


@st.composite
def shape_and_dim(draw):
    shape = draw(nonempty_shapes)
    return shape, draw(st.integers(-len(shape), len(shape) - 1))


def index_for(shape, dim, seed, smaller=True) -> np.ndarray:
    """An int64 index for gather/scatter: each dim at most the input's, values in range."""
    rng = np.random.default_rng(seed)
    ishape = tuple(rng.integers(1, n + 1) if smaller else n for n in shape)
    return rng.integers(0, shape[dim], ishape).astype(np.int64)


def ref_gather(a, dim, idx):
    out = np.empty(idx.shape, a.dtype)
    for pos in np.ndindex(idx.shape):
        src = list(pos)
        src[dim] = idx[pos]
        out[pos] = a[tuple(src)]
    return out


def ref_scatter_add(a, dim, idx, src, add=True):
    out = a.copy()
    for pos in np.ndindex(idx.shape):
        dst = list(pos)
        dst[dim] = idx[pos]
        out[tuple(dst)] = out[tuple(dst)] + src[pos] if add else src[pos]
    return out


# ---- values against NumPy ------------------------------------------------------------------

@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=20, deadline=None)
@given(sd=shape_and_dim(), layout=layouts, seed=seeds, dtype=st.sampled_from(DTYPES))
def test_gather_scatter_index_ops_match_loops(side, sd, layout, seed, dtype):
    shape, dim = sd
    d = dim % len(shape)
    a = arr_of(shape, seed, dtype, layout)
    idx = index_for(shape, d, seed)
    src = arr_of(idx.shape, seed + 1, dtype)
    unique = np.stack([np.random.default_rng(seed).permutation(shape[d])]
                      * 1)[0][: idx.shape[d]]  # no repeats: a scatter with one write each
    uidx = np.broadcast_to(unique.reshape([-1 if i == d else 1 for i in range(len(shape))]),
                           idx.shape).copy()
    vec = np.random.default_rng(seed).integers(0, shape[d], 4).astype(np.int64)
    source = arr_of(shape[:d] + (4,) + shape[d + 1:], seed + 2, dtype)
    with policy(side):
        x, i, s = mt.from_numpy(a), mt.from_numpy(idx), mt.from_numpy(src)
        np.testing.assert_array_equal(x.gather(dim, i).numpy(), ref_gather(a, d, idx))
        np.testing.assert_allclose(mt.scatter_add(x, dim, i, s).numpy(),
                                   ref_scatter_add(a, d, idx, src), rtol=1e-6)
        np.testing.assert_array_equal(x.scatter(dim, mt.from_numpy(uidx), s).numpy(),
                                      ref_scatter_add(a, d, uidx, src, add=False))
        np.testing.assert_array_equal(x.scatter(dim, i, value=7).numpy(),
                                      ref_scatter_add(a, d, idx, np.full(idx.shape, 7,
                                                                         a.dtype), False))
        np.testing.assert_array_equal(mt.index_select(x, dim, mt.from_numpy(vec)).numpy(),
                                      np.take(a, vec, axis=d))
        want = a.copy()
        np.add.at(want, (slice(None),) * d + (vec,), 2 * source)
        np.testing.assert_allclose(x.index_add(dim, mt.from_numpy(vec), mt.from_numpy(source),
                                               alpha=2).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=20, deadline=None)
@given(sd=shape_and_dim(), layout=layouts, seed=seeds, dtype=st.sampled_from(DTYPES),
       descending=st.booleans(), data=st.data())
def test_sort_argsort_topk_match_numpy(side, sd, layout, seed, dtype, descending, data):
    shape, dim = sd
    d = dim % len(shape)
    a = arr_of(shape, seed, dtype, layout)
    a = np.round(a) if a.dtype.kind == "f" else a  # ties: the order must be stable
    order = np.argsort(-a if descending else a, axis=d, kind="stable")
    k = data.draw(st.integers(0, shape[d]))
    with policy(side):
        x = mt.from_numpy(a)
        values, indices = mt.sort(x, dim, descending=descending)
        np.testing.assert_array_equal(indices.numpy(), order)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, d))
        np.testing.assert_array_equal(x.argsort(dim, descending).numpy(), order)
        top = x.topk(k, dim, largest=descending)
        keep = np.take(order, np.arange(k), axis=d)
        np.testing.assert_array_equal(top.indices.numpy(), keep)
        np.testing.assert_array_equal(top.values.numpy(), np.take_along_axis(a, keep, d))


def test_sort_puts_nan_last_ascending_and_first_descending():
    x = mt.tensor([2.0, float("nan"), -1.0])
    assert x.sort().indices.tolist() == [2, 0, 1]
    assert x.sort(descending=True).indices.tolist() == [1, 0, 2]


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=20, deadline=None)
@given(sd=shape_and_dim(), layout=layouts, seed=seeds, dtype=st.sampled_from(DTYPES),
       keepdim=st.booleans())
def test_scans_products_and_logic_match_numpy(side, sd, layout, seed, dtype, keepdim):
    shape, dim = sd
    d = dim % len(shape)
    a = arr_of(shape, seed, dtype, layout)
    a[(0,) * a.ndim] = 0  # a zero somewhere
    wide = a.dtype if a.dtype.kind == "f" else np.int64
    with policy(side):
        x = mt.from_numpy(a)
        for got, want in [(x.cumsum(dim), np.cumsum(a, d, dtype=wide)),
                          (mt.cumprod(x, dim), np.cumprod(a, d, dtype=wide)),
                          (x.prod(dim, keepdim), np.prod(a, d, dtype=wide, keepdims=keepdim)),
                          (mt.prod(x), np.prod(a, dtype=wide)),
                          (x.any(dim, keepdim), np.any(a, d, keepdims=keepdim)),
                          (mt.all(x, dim, keepdim), np.all(a, d, keepdims=keepdim)),
                          (x.any(), np.any(a)), (mt.all(x != 5), np.all(a != 5))]:
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


ORDS = [1, 2, 3, 0.5, math.inf, -math.inf, 0]


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("ord", ORDS)
@settings(max_examples=15, deadline=None)
@given(shape=nonempty_shapes, layout=layouts, seed=seeds, keepdim=st.booleans(), data=st.data())
def test_vector_norm_matches_numpy(side, ord, shape, layout, seed, keepdim, data):
    a = arr_of(shape, seed, np.float64, layout)
    dim = data.draw(st.sampled_from([None, -1, tuple(range(len(shape)))]))
    axes = None if dim is None else (dim if isinstance(dim, tuple) else (dim % len(shape),))
    m = np.abs(a)
    if ord == math.inf:
        want = m.max(axis=axes, keepdims=keepdim)
    elif ord == -math.inf:
        want = m.min(axis=axes, keepdims=keepdim)
    elif ord == 0:
        want = (m != 0).sum(axis=axes, keepdims=keepdim).astype(float)
    else:
        want = (m ** ord).sum(axis=axes, keepdims=keepdim) ** (1 / ord)
    with policy(side):
        got = mt.linalg.vector_norm(mt.from_numpy(a), ord, dim, keepdim)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)


# ---- gradients ------------------------------------------------------------------------------

def grad_cases():
    i = mt.tensor([[0, 0, 2], [2, 1, 1]])
    u = mt.tensor([[2, 0, 1], [1, 2, 0]])
    v = mt.tensor([2, 0, 2])
    return {
        "gather": (lambda x, s: x.gather(1, i), (2, 3)),
        "scatter": (lambda x, s: x.scatter(1, u, s), (2, 3)),
        "scatter value": (lambda x, s: x.scatter(0, mt.tensor([[1, 0, 1]]), value=1.5), (2, 3)),
        "scatter_add": (lambda x, s: mt.scatter_add(x, 1, i, s), (2, 3)),
        "scatter_add smaller index": (lambda x, s: x.scatter_add(0, mt.tensor([[1, 1]]), s),
                                      (2, 3)),
        "index_select": (lambda x, s: x.index_select(1, v), (2, 3)),
        "index_add": (lambda x, s: x.index_add(1, v, s, alpha=-2), (2, 3)),
        "sort": (lambda x, s: mt.sort(x, 0, descending=True).values * s, (2, 3)),
        "topk": (lambda x, s: x.topk(2).values, (2, 3)),
        "cumsum": (lambda x, s: x.cumsum(0) * s, (2, 3)),
        "cumprod": (lambda x, s: x.cumprod(1) * s, (2, 3)),
        "prod": (lambda x, s: x.prod(1), (2, 3)),
        "prod all": (lambda x, s: mt.prod(x), (2, 3)),
        "norm": (lambda x, s: x.norm(), (2, 3)),
        **{f"vector_norm {o}": (lambda x, s, o=o: mt.linalg.vector_norm(x, o, 1, True), (2, 3))
           for o in ORDS},
    }


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "reversed"])
@pytest.mark.parametrize("name", sorted(grad_cases()))
def test_gradients_by_finite_differences(name, layout, side):
    fn, shape = grad_cases()[name]
    rng = np.random.default_rng(1)
    a = rng.permutation(6).reshape(shape) * 0.4 + 0.3  # distinct, nonzero: no kinks
    with policy(side):
        x = leaf(a, layout)
        s = leaf(rng.uniform(0.5, 1.5, shape), layout)
        assert mt.gradcheck(fn, [x, s])


@pytest.mark.parametrize("name", ["cumprod", "prod", "prod all"])
def test_product_gradients_are_exact_at_zeros(name):
    fn, _ = grad_cases()[name]
    for zeros in ([(0, 1)], [(0, 1), (0, 2)], [(1, 0), (0, 0), (1, 2)]):
        a = np.random.default_rng(2).uniform(0.5, 1.5, (2, 3))
        for z in zeros:
            a[z] = 0.0
        x, s = leaf(a), leaf(np.ones((2, 3)))
        assert mt.gradcheck(fn, [x, s])


def test_a_zero_norm_has_a_zero_gradient_as_in_pytorch():
    x = mt.zeros(3, dtype=mt.float64, requires_grad=True)
    x.norm().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


TORCH_CASES = {
    "gather": (lambda m, x: m.gather(x, 1, m.tensor([[0, 0], [2, 1]])), None),
    "scatter_add": (lambda m, x: m.scatter_add(x, 0, m.tensor([[1, 0, 1]]),
                                               x[:1] * 2), None),
    "index_select": (lambda m, x: m.index_select(x, 1, m.tensor([2, 0, 2])), None),
    "index_add": (lambda m, x: x.index_add(0, m.tensor([1, 1]), x * 3, alpha=0.5), None),
    "sort": (lambda m, x: m.sort(x, 0, descending=True).values, None),
    "topk": (lambda m, x: m.topk(x, 2, largest=False).values, None),
    "cumsum": (lambda m, x: m.cumsum(x, 1), None),
    "cumprod": (lambda m, x: m.cumprod(x, 0), None),
    "prod": (lambda m, x: m.prod(x, 1, keepdim=True), None),
    "norm": (lambda m, x: m.norm(x, 3, 1), None),
    "vector_norm inf": (lambda m, x: m.linalg.vector_norm(x, float("inf"), dim=0), None),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_values_and_gradients_match_pytorch(name):
    torch = pytest.importorskip("torch")
    fn, _ = TORCH_CASES[name]
    a = np.array([[0.3, -1.2, 2.0], [0.0, 1.5, -0.7]])
    compare_with_torch(lambda x: fn(mt, x), lambda x: fn(torch, x), [leaf(a, "transposed")])


# ---- errors, capture -----------------------------------------------------------------------

def test_indices_out_of_range_are_refused_not_wrapped():
    x = mt.ones(2, 3)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x.gather(1, mt.tensor([[3]]))
    with pytest.raises(IndexError, match="index -1"):
        x.index_select(0, mt.tensor([-1]))
    with pytest.raises(ValueError, match="int64"):
        x.gather(1, mt.tensor([[0.0]]))
    with pytest.raises(TypeError, match="src is float64"):
        x.scatter(1, mt.tensor([[0]]), mt.ones(1, 1, dtype=mt.float64))
    with pytest.raises(RuntimeError, match="k \\(4\\) out of range"):
        x.topk(4)


def test_a_captured_step_replays_them_equal_to_its_eager_twin(fuse_all):
    w0 = np.random.default_rng(0).standard_normal((4, 6))

    def make():
        return mt.tensor(w0, requires_grad=True)

    def step(w, x, idx):
        w.grad = None
        y = x @ w
        loss = (y.topk(3).values ** 2).sum() + y.cumsum(1).prod(1).sum() \
            + y.gather(1, idx).sum() + y.norm() + y.index_select(1, idx[0]).sum()
        loss.backward()
        return loss

    w_eager, w_cap = make(), make()
    captured = mt.capture(lambda x, idx: step(w_cap, x, idx))
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = mt.tensor(rng.standard_normal((3, 4)))
        idx = mt.tensor(rng.integers(0, 6, (3, 2)))
        want = step(w_eager, x, idx).item()
        assert captured(x, idx).item() == pytest.approx(want, rel=1e-12)
        np.testing.assert_allclose(w_cap.grad.numpy(), w_eager.grad.numpy(), rtol=1e-12)

"""Masks: ``masked_fill`` (a select against a broadcast mask), ``tril``/``triu`` (an index
predicate) and ``F.one_hot`` (a compare against an arange), at both levels.

Values against NumPy on hypothesis-drawn shapes, layouts, dtypes and diagonals,
on both sides of the eager/fused policy and both CPU evaluators; gradients by
float64 finite differences and against PyTorch. The kernel counts show that a
causal mask costs a softmax no kernel of its own.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.nn import functional as F

from ._helpers import compare_with_torch, layouts, leaf, seeds, strided_array
from .test_new_elementwise import BACKENDS, POLICIES, policy

DTYPES = [np.float32, np.float64, np.int64]
matrices = st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple)
diagonals = st.integers(-4, 4)


@st.composite
def mask_shapes(draw, shape):
    """A shape that broadcasts to ``shape``: leading dims dropped, some set to 1."""
    lead = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.booleans()) else n for n in shape[lead:])


def values(shape, seed, dtype) -> np.ndarray:
    v = np.random.default_rng(seed).uniform(-3, 3, shape)
    return v.astype(dtype) if np.dtype(dtype).kind == "f" else np.round(v).astype(dtype)


# ---- masked_fill ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=10)
@given(shape=matrices, layout=layouts, seed=seeds, dtype=st.sampled_from(DTYPES),
       data=st.data(), value=st.sampled_from([-np.inf, 0.0, 2.5, 7]))
def test_masked_fill_matches_numpy(side, backend, shape, layout, seed, dtype, data, value):
    if np.dtype(dtype).kind == "i" and np.isinf(value):
        value = -1
    arr = strided_array(values(shape, seed, dtype), layout).astype(dtype)
    mask = np.asarray(np.random.default_rng(seed + 1).random(data.draw(mask_shapes(shape))) < 0.5)
    want = np.where(mask, np.array(value).astype(dtype), arr)  # x's dtype, as PyTorch
    with T.using_cpu_backend(backend), policy(side):
        x, m = mt.from_numpy(arr), mt.from_numpy(mask)
        results = {"method": x.masked_fill(m, value), "mt": mt.masked_fill(x, m, value),
                   "T": T.masked_fill(T.from_numpy(arr), T.from_numpy(mask), value),
                   "Exp method": (T.from_numpy(arr) + 0).masked_fill(T.from_numpy(mask), value)}
        for surface, y in results.items():
            assert y.dtype == want.dtype, surface
            np.testing.assert_array_equal(y.numpy(), want, err_msg=surface)


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=8)
@given(shape=matrices, layout=layouts, seed=seeds, data=st.data())
def test_masked_fill_gradients(side, shape, layout, seed, data):
    """``x`` gets the gradient where the mask is False; a 0-d tensor value the sum of
    it where True: by finite differences and against PyTorch."""
    mask = np.asarray(np.random.default_rng(seed).random(data.draw(mask_shapes(shape))) < 0.5)
    with policy(side):
        x, v = leaf(values(shape, seed, np.float64), layout), leaf(np.array(0.7))
        m = mt.from_numpy(mask)
        assert mt.gradcheck(lambda x, v: x.masked_fill(m, v) * x, [x, v])
        try:
            import torch
        except ImportError:
            return
        tm = torch.from_numpy(mask)
        compare_with_torch(lambda x, v: x.masked_fill(m, v), lambda x, v: x.masked_fill(tm, v),
                           [x, v], seed=seed)


def test_masked_fill_in_place_writes_the_tensor():
    x = mt.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.masked_fill_(mt.tensor([True, False]), -1.0) is x
    np.testing.assert_array_equal(x.numpy(), [[-1.0, 2.0], [-1.0, 4.0]])
    y = mt.ones(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place"):
        y.masked_fill_(mt.tensor([True, False]), 0.0)


def test_masked_fill_refuses_a_mask_that_is_not_bool():
    with pytest.raises(TypeError, match="must be a bool"):
        mt.ones(3).masked_fill(mt.tensor([1, 0, 1]), 0.0)
    with pytest.raises(TypeError, match="must be bool"):
        T.masked_fill(T.ones(3), T.tensor([1, 0, 1]), 0.0)


# ---- tril and triu -----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("name", ["tril", "triu"])
@settings(max_examples=10)
@given(shape=matrices, layout=layouts, seed=seeds, diagonal=diagonals,
       dtype=st.sampled_from(DTYPES + [np.bool_]))
def test_triangles_match_numpy(name, side, backend, shape, layout, seed, diagonal, dtype):
    arr = strided_array(values(shape, seed, np.float64), layout).astype(dtype)
    want = getattr(np, name)(arr, diagonal)
    with T.using_cpu_backend(backend), policy(side):
        x = mt.from_numpy(arr)
        results = {"method": getattr(x, name)(diagonal),
                   "mt": getattr(mt, name)(x, diagonal=diagonal),
                   "T": getattr(T, name)(T.from_numpy(arr), diagonal),
                   "Exp method": getattr(T.from_numpy(arr) + False, name)(diagonal)
                   if dtype == np.bool_ else getattr(T.from_numpy(arr) * 1, name)(diagonal)}
        for surface, y in results.items():
            assert y.dtype == want.dtype, surface
            np.testing.assert_array_equal(y.numpy(), want, err_msg=surface)
        inplace = mt.from_numpy(arr.copy())
        assert getattr(inplace, f"{name}_")(diagonal) is inplace
        np.testing.assert_array_equal(inplace.numpy(), want)


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("name", ["tril", "triu"])
@settings(max_examples=6)
@given(shape=matrices, layout=layouts, seed=seeds, diagonal=diagonals)
def test_triangle_gradients(name, side, shape, layout, seed, diagonal):
    with policy(side):
        x = leaf(values(shape, seed, np.float64), layout)
        assert mt.gradcheck(lambda x: getattr(x, name)(diagonal) * x, [x])
        try:
            import torch
        except ImportError:
            return
        compare_with_torch(lambda x: getattr(mt, name)(x, diagonal),
                           lambda t: getattr(torch, name)(t, diagonal), [x], seed=seed)


def test_a_triangle_reads_two_aranges_not_a_full_size_mask():
    """Besides ``x``, the select reads a column and a row of indices (broadcast, stride
    0): buffers of n and m elements."""
    with mt.fusion(threshold=0):
        x = mt.randn(3, 50, 40)
        e = mt.tril(x, 1).__exp__()
    others = [t for t in _leaves(e) if t.storage is not x.value.storage]
    assert sorted(len(t.storage) for t in others) == [40, 50]


def _leaves(e):
    stack, found = [e], []
    while stack:
        node = stack.pop()
        children = node.children()
        if isinstance(node, T.Tensor):
            found.append(node)
        stack.extend(children)
    return found


def test_triangles_need_two_dims():
    with pytest.raises(ValueError, match="2 or more dims"):
        mt.tril(mt.ones(3))
    with pytest.raises(ValueError, match="2 or more dims"):
        T.triu(T.ones(3))


# ---- a causal mask before a softmax ----------------------------------------------------

CAUSAL = {
    # GPT scripts: a tril buffer made once, compared at every step
    "buffer == 0": lambda att, buf: att.masked_fill(buf == 0, float("-inf")),
    # the mask made at every step from a triangle of ones
    "triu of ones": lambda att, buf: att.masked_fill(
        mt.triu(mt.ones(att.shape[-2:], dtype=mt.bool_), 1), float("-inf")),
    # a triangle of the scores themselves
    "tril of x": lambda att, buf: mt.tril(att),
}


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("mask", sorted(CAUSAL))
def test_a_causal_mask_adds_no_kernel_to_softmax(mask, size, side):
    """The softmax runs its own three kernels -- the row maxima (a reduction whose read
    includes the mask), the row sums of exp(masked - max) (another) and the division
    writing the result (fused) -- and the mask, recomputed inside each, adds none:
    forward and backward. Below the fusion threshold (default, small) no kernel runs."""
    batch, n = (2, 8) if size == "small" else (32, 64)  # 128 or 131072 scores
    with policy(side):
        att = mt.randn(batch, n, n, requires_grad=True)
        buf = mt.tril(mt.ones(n, n)).realize()
        plain, masked = _counts(lambda a: a, att), _counts(lambda a: CAUSAL[mask](a, buf), att)
    assert masked == plain
    eager = side == "default threshold" and size == "small"
    assert plain[0]["total"] == (0 if eager else 3)
    assert masked[0].get("reduce", 0) == (0 if eager else 2)


def _counts(mask, att) -> tuple[dict, dict]:
    """Kernels of the softmax of ``mask(att)`` forward, and of its backward."""
    weights = mt.randn(*att.shape)
    with mt.count_kernels() as forward:
        probs = mt.softmax(mask(att), -1).realize()
    loss = (probs * weights).sum()
    att.grad = None
    with mt.count_kernels() as backward:
        loss.backward()
    return forward.counts, backward.counts


def test_a_causally_masked_softmax_matches_torch():
    torch = pytest.importorskip("torch")
    x = leaf(np.random.default_rng(0).standard_normal((2, 5, 5)))
    keep = mt.tril(mt.ones(5, 5))
    compare_with_torch(lambda a: mt.softmax(a.masked_fill(keep == 0, float("-inf")), -1),
                       lambda a: torch.softmax(a.masked_fill(
                           torch.tril(torch.ones(5, 5)) == 0, float("-inf")), -1), [x])


# ---- one_hot -------------------------------------------------------------------------

@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=10)
@given(shape=st.lists(st.integers(0, 4), max_size=3).map(tuple), seed=seeds,
       extra=st.integers(0, 3))
def test_one_hot_matches_numpy(side, shape, seed, extra):
    classes = np.random.default_rng(seed).integers(0, 5, shape)
    n = (int(classes.max()) + 1 if classes.size else 1) + extra
    want = np.eye(n, dtype=np.int64)[classes]
    with policy(side):
        got = F.one_hot(mt.from_numpy(classes), n)
        assert got.dtype == np.int64 and not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), want)
        if classes.size:
            np.testing.assert_array_equal(F.one_hot(mt.from_numpy(classes)).numpy(),
                                          np.eye(classes.max() + 1, dtype=np.int64)[classes])


def test_one_hot_matches_torch_and_refuses_what_it_refuses():
    torch = pytest.importorskip("torch")
    t = torch.tensor([[0, 3], [2, 2]])
    np.testing.assert_array_equal(F.one_hot(mt.tensor(t.numpy())).numpy(),
                                  torch.nn.functional.one_hot(t).numpy())
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        F.one_hot(mt.tensor([0, 3]), 3)
    with pytest.raises(TypeError, match="int64"):
        F.one_hot(mt.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="empty"):
        F.one_hot(mt.tensor(np.zeros(0, np.int64)))

"""Reductions computed at once (``eager.fold``), including short rows reduced across.

NumPy reduces the last axis of a C-ordered array with one short inner loop per row;
for many short rows (a softmax's or a cross-entropy's logits: 128 rows of 10) the
eager path reduces a transposed copy instead, one vector loop per column
(``eager.short_rows``). Each test here compares ``fold`` with NumPy's own reduction
over the same axes, on shapes on both sides of that choice, and checks which way
each shape goes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.tensor import eager
from minitorch_exp.tensor.ops import REDUCTIONS

SHORT, MANY = eager.SHORT_ROW, eager.MANY_ROWS
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 1e-45]

#: The NumPy reduction each row of ``REDUCTIONS`` folds with, and its accumulator.
NUMPY = {"sum": (np.add, "wide"), "mean": (np.add, "wide"), "max": (np.maximum, None),
         "min": (np.minimum, None)}


def numpy_fold(name: str, x: np.ndarray, axes, keepdims: bool) -> np.ndarray:
    ufunc, acc = NUMPY[name]
    wide = REDUCTIONS[name].accumulator_dtype(x.dtype) if acc else None
    out = ufunc.reduce(x, axis=axes, dtype=wide, keepdims=keepdims)
    if name == "mean":
        out = out / np.prod([x.shape[a] for a in axes])
    return np.asarray(out, REDUCTIONS[name].result_dtype(x.dtype))


@st.composite
def short_row_arrays(draw):
    """C-ordered arrays of 2-3 dims whose last axis straddles ``SHORT`` and whose rows
    straddle ``MANY``, some with special values."""
    n = draw(st.integers(1, SHORT + 3))
    rows = draw(st.sampled_from([1, 3, MANY // 2, MANY - 1, MANY, MANY + 5, 3 * MANY]))
    lead = (rows,) if draw(st.booleans()) or rows % 3 else (3, rows // 3)
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal(lead + (n,)).astype(dtype)
    for _ in range(draw(st.integers(0, 4))):
        x.flat[rng.integers(x.size)] = draw(st.sampled_from(SPECIALS))
    return x


@settings(max_examples=150, deadline=None)
@given(x=short_row_arrays(), name=st.sampled_from(sorted(NUMPY)), keepdims=st.booleans())
def test_a_fold_over_the_last_axis_equals_numpy_s_reduction(x, name, keepdims):
    axes = (x.ndim - 1,)
    with np.errstate(all="ignore"):
        got = eager.fold(name, x, axes, keepdims)
        want = numpy_fold(name, x, axes, keepdims)
    assert got.shape == want.shape and got.dtype == want.dtype
    if name in ("max", "min"):  # exact: no rounding, the same NaNs
        np.testing.assert_array_equal(got, want)
    else:  # the same terms in another order: apart by rounding, bounded by sum |x|
        scale = numpy_fold(name, np.abs(x), axes, keepdims).astype(np.float64)
        finite = np.isfinite(scale)
        np.testing.assert_array_equal(got[~finite], want[~finite])
        bound = 4 * np.finfo(x.dtype).eps * scale[finite]
        assert np.all(np.abs(got[finite].astype(np.float64) - want[finite]) <= bound)


@pytest.mark.parametrize("shape, axes, c_order, across", [
    ((128, 10), (1,), True, True),        # cross-entropy's logits
    ((4, 32, 16), (2,), True, True),      # leading dims are rows too
    ((128, 10), (0,), True, False),       # not the last axis: NumPy's column loop is fast
    ((128, 10), (0, 1), True, False),
    ((128, 10), (1,), False, False),      # a transposed view: the copy would reorder twice
    ((MANY - 1, 10), (1,), True, False),  # too few rows to pay for the copy
    ((128, SHORT + 1), (1,), True, False),
    ((128, 1), (1,), True, False),        # nothing to fold
    ((10,), (0,), True, False),
])
def test_which_reductions_go_across_a_transposed_copy(shape, axes, c_order, across):
    assert eager.short_rows(shape, axes, c_order) is across


def test_a_softmax_cross_entropy_below_the_threshold_matches_the_fused_one():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((MANY, 10)).astype(np.float32) * 4
    target = rng.integers(0, 10, MANY)
    losses, grads = [], []
    for threshold in (0, 1 << 20):
        with mt.fusion(threshold=threshold):
            z = mt.tensor(logits, requires_grad=True)
            loss = mt.nn.functional.cross_entropy(z, mt.tensor(target))
            loss.backward()
            losses.append(loss.item())
            grads.append(z.grad.numpy().copy())
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-8)


# ---- a bias's gradient: column sums by the engine's own reduction kernel -------------

@st.composite
def bias_gradients(draw):
    """C-ordered (rows, columns) float arrays, a linear layer's upstream gradient, some
    with special values."""
    rows, cols = draw(st.integers(1, 300)), draw(st.integers(1, 700))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = (rng.standard_normal((rows, cols)) * draw(st.sampled_from([1e-3, 1, 1e4]))).astype(dtype)
    for _ in range(draw(st.integers(0, 4))):
        g.flat[rng.integers(g.size)] = draw(st.sampled_from(SPECIALS))
    return g


def assert_same_sums(got, want):
    """The same bits, NaN where NaN (whatever its payload)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = f"u{got.itemsize}"
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


@settings(max_examples=120, deadline=None)
@given(g=bias_gradients())
def test_a_bias_gradient_is_numpy_s_wide_column_sum_bit_for_bit(g):
    with np.errstate(all="ignore"):
        want = np.add.reduce(g, axis=0, dtype=np.float64).astype(g.dtype)
        assert_same_sums(eager.sum_to_array(g, g.shape[1:]), want)


def test_a_bias_gradient_is_summed_by_the_compiled_kernel_where_it_can_be(monkeypatch):
    from minitorch_exp.tensor import cpu_numba
    from minitorch_exp.tensor.backends import cpu_backend

    calls = []
    column_sums = cpu_numba.column_sums

    def counted(g, plan):
        calls.append(g.shape)
        return column_sums(g, plan)

    monkeypatch.setattr(cpu_numba.NumbaBackend, "column_sums", staticmethod(counted))
    g = np.random.default_rng(0).standard_normal((64, 100)).astype(np.float32)
    before = cpu_backend()
    try:
        mt.set_cpu_backend("numba")
        eager.sum_to_array(g, (100,))
        assert calls == [(64, 100)]
        eager.sum_to_array(np.asfortranarray(g), (100,))   # strided rows: NumPy's reduce
        eager.sum_to_array(g.astype(np.int32), (100,))     # no float accumulators to widen
        eager.sum_to_array(g.astype(np.float16), (100,))
        eager.sum_to_array(g[:, :1], (1,))                 # one column: NumPy's pairwise whole sum
        mt.set_cpu_backend("numpy")
        eager.sum_to_array(g, (100,))                      # the NumPy evaluator: no compiled code
    finally:
        mt.set_cpu_backend(before)
    assert calls == [(64, 100)]

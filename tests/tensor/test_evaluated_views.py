"""Evaluating a view that cannot be pushed down gives a tensor of its own.

A view of a boundary (a reduction, a product) is computed by evaluating the base
into a temporary and viewing it (``lower.evaluated``). Only where that view is
contiguous may it be the result as it is; otherwise the result must be a new
contiguous tensor, or it would share memory with the base's remembered value (a
write into it would change what the base reads) and a broadcast would come back
with stride 0, refusing in-place writes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp.tensor as T


def _is_c_contiguous(t) -> bool:
    return t.is_contiguous() and t.numpy().flags.c_contiguous


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 5), st.integers(2, 6), st.integers(1, 7))  # both sides >= 2: not contiguous
def test_the_transpose_of_a_reduction_evaluates_to_a_tensor_of_its_own(a, b, c):
    values = np.arange(a * b * c, dtype=np.float64).reshape(a, b, c)
    reduced = T.from_numpy(values).sum(axis=2)          # (a, b), a boundary
    want = values.sum(axis=2)
    T.engine.realize(reduced)                           # the base's value, remembered
    got = T.evaluate(reduced.T)
    np.testing.assert_array_equal(got.numpy(), want.T)
    assert got.shape == (b, a) and _is_c_contiguous(got)
    got[...] = got + 100.0                              # an in-place write into the result
    np.testing.assert_array_equal(got.numpy(), want.T + 100.0)
    np.testing.assert_array_equal(T.evaluate(reduced).numpy(), want)
    np.testing.assert_array_equal(T.evaluate(reduced.T).numpy(), want.T)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(2, 6))
def test_a_broadcast_reduced_column_evaluates_to_a_writable_tensor(rows, cols):
    values = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
    column = T.from_numpy(values).sum(axis=1, keepdims=True)   # (rows, 1)
    got = T.evaluate(column.broadcast_to((rows, cols)))
    want = np.broadcast_to(values.sum(axis=1, keepdims=True), (rows, cols))
    np.testing.assert_array_equal(got.numpy(), want)
    assert _is_c_contiguous(got) and 0 not in got.layout.strides
    got[...] = got * 2.0                                 # refused with a stride of 0
    np.testing.assert_array_equal(got.numpy(), 2 * want)
    np.testing.assert_array_equal(T.evaluate(column).numpy(), want[:, :1])


def test_a_contiguous_view_of_a_computed_base_is_still_the_base_s_memory():
    """What the rule keeps: a view laid out as the base already is needs no copy."""
    x = T.from_numpy(np.arange(12.0).reshape(3, 4))
    flat = (x.sum(axis=1, keepdims=True)).reshape(3)
    with T.count_kernels() as ran:
        got = T.evaluate(flat)
    assert ran.total == 1
    np.testing.assert_array_equal(got.numpy(), np.arange(12.0).reshape(3, 4).sum(axis=1))

"""``blas.add_product``: ``out += a @ b`` as one GEMM with ``beta = 1``.

Against NumPy on hypothesis-drawn shapes and layouts (operands stored as they are,
transposed, or rows of a wider buffer; ``out`` a block of a larger array), and the
cases it must leave to the caller: ``out`` sharing memory with an operand, a
column-major ``out``, integers, mixed dtypes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import blas

pytestmark = pytest.mark.skipif(blas._gemm() is None, reason="no OpenBLAS GEMM found here")


def laid_out(m: np.ndarray, layout: str) -> np.ndarray:
    if layout == "transposed":
        return np.ascontiguousarray(m.T).T
    if layout == "rows of a wider buffer":
        wide = np.zeros((m.shape[0], m.shape[1] + 3), m.dtype)
        wide[:, :m.shape[1]] = m
        return wide[:, :m.shape[1]]
    return m.copy()


LAYOUTS = st.sampled_from(["stored", "transposed", "rows of a wider buffer"])


@settings(max_examples=40, deadline=None)
@given(m=st.integers(2, 9), k=st.integers(1, 9), n=st.integers(2, 9), la=LAYOUTS, lb=LAYOUTS,
       dtype=st.sampled_from([np.float32, np.float64]), in_block=st.booleans(),
       seed=st.integers(0, 2**16))
def test_adds_the_product_into_out(m, k, n, la, lb, dtype, in_block, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(s).astype(dtype) for s in ((m, k), (k, n)))
    base = rng.standard_normal((m + 2, n + 2) if in_block else (m, n)).astype(dtype)
    out = base[1:m + 1, 2:n + 2] if in_block else base
    want = out + a.astype(np.float64) @ b
    before = base.copy()
    assert blas.add_product(out, laid_out(a, la), laid_out(b, lb))
    np.testing.assert_allclose(out, want, rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)
    if in_block:  # nothing outside the block is written
        outside = np.ones(base.shape, bool)
        outside[1:m + 1, 2:n + 2] = False
        np.testing.assert_array_equal(base[outside], before[outside])


def test_leaves_to_the_caller_what_blas_cannot_write_in_place():
    a = np.ones((3, 3))
    untouched = a.copy()
    assert not blas.add_product(a, a, np.ones((3, 3)))  # out is an operand
    assert not blas.add_product(np.zeros((3, 3), order="F"), a, a)  # columns of unit stride
    assert not blas.add_product(np.zeros((3, 3), np.int64), a.astype(np.int64),
                                a.astype(np.int64))
    assert not blas.add_product(np.zeros((3, 3)), a.astype(np.float32), a)
    np.testing.assert_array_equal(a, untouched)

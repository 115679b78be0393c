"""``Backend.add_rows``: rows scattered back with repeats, as ``numpy.add.at`` adds them.

The CPU backends must give ``np.add.at``'s bits (the same additions in the same
order): the NumPy evaluator calls it, the numba one runs a compiled loop over
C-ordered float rows and hands anything else to the NumPy evaluator.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.tensor.cpu_numpy import NumpyBackend


def _cpu_backends():
    backends = [NumpyBackend()]
    try:
        from minitorch_exp.tensor.cpu_numba import NumbaBackend
    except ImportError:
        return backends
    return [*backends, NumbaBackend()]


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 9), tail=st.lists(st.integers(1, 4), max_size=2),
       n=st.integers(0, 30), dtype=st.sampled_from(["float32", "float64", "int64"]),
       layout=st.sampled_from(["C", "F", "every other row"]),
       seed=st.integers(0, 2**31))
def test_each_cpu_backend_adds_rows_as_numpy_add_at(rows, tail, n, dtype, layout, seed):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((rows, *tail)).astype(dtype)
    index = rng.integers(0, rows, n)  # repeats: rows sums of several
    src = rng.standard_normal((n, *tail)).astype(dtype)
    if layout == "F":
        src = np.asfortranarray(src)
    elif layout == "every other row":
        wide = np.repeat(src, 2, axis=0)
        src = wide[::2]
    want = base.copy()
    np.add.at(want, index, src)
    for backend in _cpu_backends():
        out = base.copy()
        backend.add_rows(out, index, src)
        np.testing.assert_array_equal(out, want, err_msg=backend.name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_embedding_s_gradient_sums_repeated_rows(dtype):
    """The bigram's case: a table's rows picked by a batch, repeats included; the
    gradient is ``np.add.at``'s, bit for bit."""
    rng = np.random.default_rng(0)
    table = mt.tensor(rng.standard_normal((65, 65)).astype(dtype), requires_grad=True)
    idx = rng.integers(0, 65, (32, 8))
    out = mt.nn.functional.embedding(mt.tensor(idx), table)
    g = rng.standard_normal(out.shape).astype(dtype)
    (out * mt.tensor(g)).sum().backward()
    want = np.zeros((65, 65), dtype)
    np.add.at(want, idx.reshape(-1), g.reshape(-1, 65))
    np.testing.assert_array_equal(table.grad.numpy(), want)

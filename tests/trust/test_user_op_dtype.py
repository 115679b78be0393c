"""A user op's result has the registry's dtype on both sides of the fusion threshold.

Every built-in row gets its dtype from NumPy already, so only a user op whose NumPy
form widens reaches the cast computed-at-once results go through: a float32 input
times a NumPy float64 scalar is float64 under NumPy 2's promotion rules (a NumPy
scalar is not weak), where the registry says ``promote``: float32.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.tensor import register_op, unregister_op

TWO = np.float64(2.0)


def _widening_double(x, out=None):
    result = x * TWO                  # float64 for a float32 x
    if out is not None:
        out[...] = result
        return out
    return result


@pytest.fixture(scope="module")
def widening():
    name = "widening_double_44"
    register_op(name, _widening_double, "({0} * 2)")
    yield name
    unregister_op(name)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=8))
def test_computed_at_once_it_keeps_the_registry_s_dtype(widening, values):
    x = np.asarray(values, np.float32)
    assert (x * TWO).dtype == np.float64            # what NumPy alone would give
    now = mt.op(widening, mt.tensor(x))              # a few elements: computed at once
    with mt.fusion(threshold=0):                     # the same op kept lazy, then fused
        lazy = mt.op(widening, mt.tensor(x))
        lazy_value = lazy.numpy()
    assert now.dtype == lazy.dtype == mt.float32
    assert now.numpy().dtype == np.float32
    np.testing.assert_array_equal(now.numpy(), lazy_value)
    np.testing.assert_array_equal(now.numpy(), x * np.float32(2))
    total = now + mt.tensor(x)                       # a float32 tensor added to it
    assert total.dtype == mt.float32 and total.numpy().dtype == np.float32
    np.testing.assert_array_equal(total.numpy(), x * np.float32(2) + x)

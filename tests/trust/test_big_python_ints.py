"""Python ints beyond int64 follow NumPy: a float tensor takes them as floats,
an integer tensor refuses them -- the same answer whatever ran before."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor import from_numpy


@pytest.mark.parametrize("big", [2**63, 2**64, -(2**63) - 1, 3**50])
@pytest.mark.parametrize("before", [None, 1])  # the same statement ran with a small int first
def test_float_tensor_plus_a_huge_int_is_numpys_answer(big, before):
    x = np.ones(3, np.float32)
    if before is not None:
        (from_numpy(x) + before).numpy()
    got = (from_numpy(x) + big).numpy()
    want = x + big
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal((big * from_numpy(x)).numpy(), big * x)


def test_node_level_follows_the_same_rule():
    np.testing.assert_array_equal((mt.ones(2) + 2**64).numpy(), np.ones(2, np.float32) + 2**64)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_an_integer_tensor_refuses_a_huge_int(dtype):
    with pytest.raises(OverflowError, match="out of bounds"):
        (from_numpy(np.ones(3, dtype)) + 2**64).numpy()

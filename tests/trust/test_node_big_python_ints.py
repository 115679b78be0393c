"""A Python int beyond int64 meets an integer or bool Node as it meets an integer Tensor:
an OverflowError naming the op, the number and the dtype -- not a float64 approximation.

The Tensor level's operators already refused (test_big_python_ints.py); the Node level
and ``apply_op`` / ``T.add`` built the expression with the number as it was, and the
result came out float64. PyTorch raises OverflowError from 2**64 on (at 2**63 it wraps
an int64 through uint64); NumPy refuses from 2**63, and so do we.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import tensor as T

BIG = [2**63, 2**64, -(2**63) - 1, 3**50]
OPS = [operator.add, operator.sub, operator.mul, lambda x, n: n + x, lambda x, n: n * x]


@pytest.mark.parametrize("big", BIG)
@pytest.mark.parametrize("dtype", [mt.int64, mt.int32, mt.bool_])
@pytest.mark.parametrize("op", OPS)
def test_an_integer_or_bool_node_refuses_a_huge_int(big, dtype, op):
    x = mt.tensor([1, 0, 1]).to(dtype)
    message = rf"^(add|sub|mul): Python integer {big} is out of bounds for (int\d+|bool) "
    with pytest.raises(OverflowError, match=message):
        op(x, big).numpy()


@pytest.mark.parametrize("big", BIG)
def test_apply_op_and_the_functions_refuse_it_too(big):
    x = T.from_numpy(np.ones(3, np.int64))
    for make in (lambda: T.apply_op("add", x, big), lambda: T.add(x, big),
                 lambda: T.maximum(big, x)):
        with pytest.raises(OverflowError, match="out of bounds for int64"):
            make().numpy()


@pytest.mark.parametrize("big", BIG)
def test_a_float_node_still_takes_it_as_a_float(big):
    x = mt.tensor([1.0, 2.0])
    np.testing.assert_array_equal((x + big).numpy(), np.float32([1.0, 2.0]) + big)
    np.testing.assert_array_equal(T.apply_op("mul", T.from_numpy(np.ones(2)), big).numpy(),
                                  np.ones(2) * big)


def test_the_int64_edges_are_still_ints():
    x = mt.tensor([0, -1])
    got = (x + (2**63 - 1)).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.array([0, -1]) + (2**63 - 1))
    np.testing.assert_array_equal((x * -(2**63)).numpy(), np.array([0, -1]) * -(2**63))


@pytest.mark.parametrize("big", [2**64, -(2**63) - 1])
def test_pytorch_refuses_them_too(big):
    torch = pytest.importorskip("torch")
    with pytest.raises(OverflowError):
        torch.tensor([1, 2]) + big

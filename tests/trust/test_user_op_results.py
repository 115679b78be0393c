"""A user op's numpy_fn gives the right answer however it returns its result.

The NumPy evaluator calls ``fn(*arrays, out=buffer)``. A function may fill
``out``, return a new array and ignore ``out``, do both, or not take ``out`` at
all; every form must give the same values (before the fix, a function that
ignored ``out`` left uninitialised memory in the result).
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor import apply_op, from_numpy, using_cpu_backend


def _ignores_out(x, out=None):
    return x * 2


def _fills_out(x, out=None):
    if out is None:
        return x * 2
    np.multiply(x, 2, out=out)
    return out


def _fills_and_returns_none(x, out=None):
    if out is None:
        return x * 2
    out[...] = x * 2


def _no_out_parameter(x):
    return x * 2


def _returns_wrong_shape(x, out=None):
    return np.zeros(3)


@pytest.mark.parametrize("fn", [_ignores_out, _fills_out, _fills_and_returns_none,
                                _no_out_parameter])
@pytest.mark.parametrize("n", [7, 20000, 300_000])  # one block, NumPy-preferred, many blocks
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_result_is_right_however_numpy_fn_returns(user_op, fn, n, backend):
    name = user_op(fn)
    x = np.arange(n, dtype=np.float64)
    with using_cpu_backend(backend):
        got = apply_op(name, from_numpy(x)).numpy()
        fused = (apply_op(name, from_numpy(x)) + 1).numpy()  # the op feeds another step
    np.testing.assert_array_equal(got, x * 2)
    np.testing.assert_array_equal(fused, x * 2 + 1)


def test_the_node_level_op_uses_the_same_rule(user_op):
    name = user_op(_ignores_out)
    with using_cpu_backend("numpy"):
        got = mt.op(name, mt.arange(20000.0)).numpy()
    np.testing.assert_array_equal(got, np.arange(20000.0) * 2)


def test_a_result_of_the_wrong_shape_is_an_error_naming_the_op(user_op):
    name = user_op(_returns_wrong_shape)
    with using_cpu_backend("numpy"), pytest.raises(ValueError, match=name):
        apply_op(name, from_numpy(np.arange(8.0))).numpy()

"""A user op's ``numpy_fn`` result must broadcast to the shape of its operands, on every
path: else a ValueError naming the op, the shape expected and the shape found.

The NumPy evaluator checked a result written into ``out`` only; the Node level's
computed-at-once path took a result of any shape as the Node's value (a (3,) result
of an (8,) operand made a (3,) Node), and a plain number broke it. A result that
broadcasts (one element, a number) is broadcast, as NumPy's ``out=`` would.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor import apply_op, from_numpy, using_cpu_backend

# ---- a user op's result -----------------------------------------------------------------

def _wrong_shape(x, out=None):
    return np.zeros(3)


def _one_element(x, out=None):
    return np.full(1, 5.0)


def _a_number(x, out=None):
    return 5.0


def _wrong_shape_message(name: str, n: int) -> str:
    return re.escape(f"user op {name!r}: numpy_fn returned shape (3,), expected ({n},)")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("level", ["node", "node, then + 1", "tensor, then + 1"])
def test_a_result_of_the_wrong_shape_is_refused_on_every_path(user_op, backend, level):
    name = user_op(_wrong_shape)
    x = np.arange(8.0)
    run = {"node": lambda: mt.op(name, mt.tensor(x)),
           "node, then + 1": lambda: mt.op(name, mt.tensor(x)) + 1,
           "tensor, then + 1": lambda: apply_op(name, from_numpy(x)) + 1}[level]
    with using_cpu_backend(backend), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's: it cannot compile the op for scalars
        with pytest.raises(ValueError, match=_wrong_shape_message(name, 8)):
            run().numpy()


@pytest.mark.parametrize("fn", [_one_element, _a_number])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_result_that_broadcasts_is_broadcast_on_every_path(user_op, fn, backend):
    name = user_op(fn)
    x = np.arange(8.0)
    with using_cpu_backend(backend), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node = mt.op(name, mt.tensor(x))
        tensor = apply_op(name, from_numpy(x)).numpy()
        assert node.shape == (8,)
        np.testing.assert_array_equal(node.numpy(), np.full(8, 5.0))
        np.testing.assert_array_equal(tensor, np.full(8, 5.0))
        node.numpy()[0] = 1.0  # the Node's own memory, not a broadcast view

"""A Node's value never depends on writes made outside the framework after it was built.

Elementwise Nodes stay lazy so chains fuse, and writes made through the
framework realize pending readers first. Memory the user can also reach --
an array passed to ``from_numpy``, or one handed out by ``.numpy()`` -- can be
written behind the framework's back, so a value reading it is computed when
it is built (PyTorch computes every op at once and gives these answers).
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor import count_kernels


def test_writes_to_a_from_numpy_array_do_not_reach_a_built_value():
    buf = np.ones(4, np.float32)
    y = mt.from_numpy(buf) * 2 + 1
    buf[:] = 5
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])


def test_writes_through_an_array_from_numpy_method_do_not_reach_a_built_value():
    x = mt.ones(4)
    handed_out = x.numpy()
    y = x * 2 + 1
    handed_out[:] = 5
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])


def test_a_value_built_before_the_array_was_handed_out_is_also_kept():
    x = mt.ones(4)
    y = x * 2 + 1          # lazy: x's memory is not reachable yet
    x.numpy()[:] = 5       # now it is, and it is written
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])


def test_views_of_a_handed_out_buffer_count_too():
    buf = np.ones((2, 4), np.float32)
    x = mt.from_numpy(buf)
    y = x[:, 1:].T * 3
    buf[:] = 0
    np.testing.assert_array_equal(y.numpy(), np.full((3, 2), 3, np.float32))


def test_gradients_use_the_values_at_build_time():
    buf = np.array([1.0, 2.0, 3.0])
    x = mt.from_numpy(buf).requires_grad_()
    loss = (x * x).sum()
    buf[:] = 10.0
    loss.backward()
    np.testing.assert_array_equal(loss.item(), 14.0)


@pytest.mark.usefixtures("fuse_all")  # kernels counted on a small tensor: kept lazy
def test_the_cost_is_one_kernel_where_the_chain_meets_user_memory():
    """Only the op that reads the user's array runs at once; what follows still fuses."""
    x = mt.from_numpy(np.ones(1000, np.float32))
    with count_kernels() as k:
        y = ((x * 2 + 1) * 3 - 4).exp()
        y.numpy()
    assert k["fused"] == 2

"""Type promotion at the Node level is PyTorch's (category first); the Tensor level keeps
NumPy's. Each case states the PyTorch dtype and, where PyTorch is installed, asks it."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.node.promotion import result_dtype

#: (case, the dtype PyTorch gives): each written once for both libraries (``L``).
CASES = [
    ("float32 tensor + int64 tensor", lambda L: L.ones(2) + L.tensor([1, 2]), "float32"),
    ("int64 / int64", lambda L: L.tensor([1, 3]) / L.tensor([2, 2]), "float32"),
    ("int64 * Python float", lambda L: L.tensor([1, 2]) * 2.5, "float32"),
    ("exp(int64)", lambda L: L.exp(L.tensor([1, 2])), "float32"),
    ("int64 ** 0.5", lambda L: L.tensor([1, 2]) ** 0.5, "float32"),
    ("float32 * Python float", lambda L: L.ones(2) * 0.1, "float32"),
    ("float32 * NumPy float64 scalar", lambda L: L.ones(2) * np.float64(2.0), "float32"),
    ("float32 + 0-d float64", lambda L: L.ones(2) + L.tensor(1.5, dtype=L.float64), "float32"),
    ("int64 + 0-d float64", lambda L: L.tensor([1, 2]) + L.tensor(1.5, dtype=L.float64),
     "float64"),
    ("float64 + float32", lambda L: L.ones(2, dtype=L.float64) + L.ones(2), "float64"),
    ("int32 + 0-d int64", lambda L: L.ones(2, dtype=L.int32) + L.tensor(1), "int32"),
    ("int32 + int64", lambda L: L.ones(2, dtype=L.int32) + L.tensor([1, 2]), "int64"),
    ("bool + Python int", lambda L: L.tensor([True, False]) + 1, "int64"),
    ("bool + Python float", lambda L: L.tensor([True, False]) + 1.5, "float32"),
    ("where(c, int64, 2.5)", lambda L: L.where(L.tensor([True, False]), L.tensor([1, 2]), 2.5),
     "float32"),
    ("clamp(int64, 0.5)", lambda L: L.clamp(L.tensor([0, 2]), 0.5, 1.5), "float32"),
    ("cat(float32, int64)", lambda L: L.cat([L.ones(2), L.tensor([1, 2])]), "float32"),
    ("int64 > 1.5", lambda L: L.tensor([1, 2]) > 1.5, "bool"),
    ("int32 + float16", lambda L: L.ones(2, dtype=L.int32) + L.ones(2, dtype=L.float16),
     "float16"),
    ("float16 * Python float", lambda L: L.ones(2, dtype=L.float16) * 0.5, "float16"),
    ("float16 + float32", lambda L: L.ones(2, dtype=L.float16) + L.ones(2), "float32"),
    ("float16 + 0-d float64", lambda L: L.ones(2, dtype=L.float16) + L.tensor(1.5,
                                                                           dtype=L.float64),
     "float16"),
]


@pytest.mark.parametrize("fn, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_node_level_promotion_is_pytorchs(fn, expected):
    got = fn(mt)
    assert got.dtype == np.dtype(expected)
    # the values are those of the promoted computation in NumPy
    np.testing.assert_allclose(got.numpy(), np.asarray(fn(_NumpyTwin), dtype=expected),
                               rtol=1e-6)


@pytest.mark.parametrize("fn, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_cases_are_what_pytorch_does(fn, expected):
    torch = pytest.importorskip("torch")
    got = fn(mt)
    ref = fn(torch)
    assert str(ref.dtype) == f"torch.{expected}"
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6)


class _NumpyTwin:
    """Just enough of the namespace for the cases, computing in float64 NumPy."""

    float16, float64, int32 = np.float16, np.float64, np.int32
    exp, where, cat = staticmethod(np.exp), staticmethod(np.where), staticmethod(np.concatenate)

    @staticmethod
    def ones(n, dtype=np.float32):
        return np.ones(n, dtype)

    @staticmethod
    def tensor(data, dtype=None):
        return np.array(data, dtype=dtype)

    @staticmethod
    def clamp(x, lo, hi):
        return np.clip(x, lo, hi)


def test_the_tensor_level_keeps_numpys_promotion():
    a, i = T.ones(2), T.tensor([1, 2])
    assert (a + i).dtype == np.float64  # NumPy's rule, documented in docs/pytorch.md
    assert (i * 2.5).dtype == np.float64


def test_gradients_flow_through_a_promoting_cast():
    w = mt.tensor([0.5, -1.0], requires_grad=True)
    k = mt.tensor([2, 3])
    y = (w * k).sum()  # int64 operand converted to float32, not w to float64
    y.backward()
    assert y.dtype == np.float32 and w.grad.dtype == np.float32
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 3.0])


def test_result_dtype_rules():
    f32, i64 = np.zeros(3, np.float32), np.zeros(3, np.int64)
    assert result_dtype([f32, i64]) == np.float32
    assert result_dtype([i64, 1.5]) == np.float32
    assert result_dtype([np.zeros((), np.float64), 2]) == np.float64
    assert result_dtype([True, 2]) == np.int64
    with pytest.raises(TypeError, match="at least one operand"):
        result_dtype([])

"""Small names scripts use: ``new_zeros``/``new_ones``/``new_full``/``new_empty``/
``new_tensor``, ``full_like``, ``narrow`` (a view), ``randn(size=...)``, ``is_xpu`` --
as PyTorch's, compared with it where it is installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt

from ..node._helpers import compare_with_torch, leaf, values

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("dtype", [mt.float32, mt.float64, mt.int64])
def test_new_factories_take_the_dtype_and_device_of_self(dtype):
    x = mt.zeros(2, dtype=dtype)
    for made in (x.new_zeros(2, 3), x.new_zeros((2, 3)), x.new_ones([2, 3]), x.new_empty(2, 3),
                 x.new_full((2, 3), 7)):
        assert made.shape == (2, 3) and made.dtype == dtype and made.device == x.device
    assert x.new_zeros(2, 3).tolist() == [[0, 0, 0]] * 2
    assert x.new_ones(2).tolist() == [1, 1] and x.new_full((1,), 7).tolist() == [7]
    assert x.new_tensor([1, 2]).dtype == dtype and x.new_tensor([1, 2]).tolist() == [1, 2]
    assert x.new_zeros(2, dtype=mt.float64).dtype == mt.float64
    assert x.new_ones(2, requires_grad=dtype.kind == "f").requires_grad == (dtype.kind == "f")


def test_new_factories_match_torch():
    torch = pytest.importorskip("torch")
    for lib in (mt, torch):
        x = lib.ones(2, dtype=lib.float64)
        got = [x.new_zeros(3).dtype, x.new_full((2,), 1.5).tolist(), x.new_tensor([1]).dtype,
               lib.full_like(x, 4.0).tolist(), lib.randn(size=(2, 3)).shape]
        assert str(got[0]).endswith("float64") and got[1] == [1.5, 1.5]
        assert str(got[2]).endswith("float64") and got[3] == [4.0, 4.0]
        assert tuple(got[4]) == (2, 3)
    assert not mt.zeros(1).is_xpu and mt.zeros(1).is_cpu


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), data=st.data())
def test_narrow_is_a_view_with_torch_s_values_and_gradients(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[dim]
    start = data.draw(st.integers(-size, size - 1))
    length = data.draw(st.integers(0, size - (start % size)))
    x = leaf(values(np.random.default_rng(0), shape), data.draw(st.sampled_from(
        ["contiguous", "transposed", "reversed"])))
    view = x.narrow(dim, start, length)
    want = np.take(x.numpy(), range(start % size, start % size + length), axis=dim)
    np.testing.assert_array_equal(view.numpy(), want)
    assert view.numel() == 0 or np.shares_memory(view.numpy(), x.numpy())
    if HAS_TORCH and length:
        compare_with_torch(lambda t: mt.narrow(t, dim, start, length) * 2,
                           lambda t: t.narrow(dim, start, length) * 2, [x])


def test_narrow_out_of_range_is_an_index_error():
    with pytest.raises(IndexError, match="narrow"):
        mt.zeros(3, 4).narrow(1, 2, 3)

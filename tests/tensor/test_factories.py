"""Making tensors and getting data out: from_numpy, tensor, factories, numpy(), repr."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import (
    Device,
    Tensor,
    arange,
    as_device,
    bool_,
    default_generator,
    empty,
    empty_like,
    float32,
    float64,
    from_numpy,
    full,
    full_like,
    int32,
    int64,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)

from ..devices import DEVICES
from .strategies import ALL_DTYPES, arrays, assert_matches, shapes

# ---- from_numpy: zero-copy -----------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(shape=shapes(), dtype=st.sampled_from(ALL_DTYPES), data=st.data())
def test_from_numpy_shares_memory_for_any_strides(shape, dtype, data):
    arr = data.draw(arrays(shape, dtype))
    t = from_numpy(arr)
    assert t.shape == arr.shape and t.dtype == arr.dtype
    np.testing.assert_array_equal(t.numpy(), arr)
    if arr.size:
        assert np.shares_memory(t.numpy(), arr)
        assert [s for n, s in zip(t.shape, t.strides) if n > 1] == \
            [s // arr.itemsize for n, s in zip(arr.shape, arr.strides) if n > 1]
        # A write through the tensor is seen by the array, and back.
        flat_index = tuple(n - 1 for n in arr.shape)
        t[flat_index] = 1
        assert arr[flat_index] == 1
        arr[flat_index] = 0
        assert t[flat_index].item() == 0


def test_from_numpy_of_views_and_broadcasts():
    base = np.arange(24.0).reshape(2, 3, 4)
    for arr in [base[:, ::-1, 1::2], base.transpose(2, 0, 1), base[1], base[..., 0],
                np.broadcast_to(base[0, 0], (5, 4)), base[::2, ::-2, ::3]]:
        t = from_numpy(arr)
        assert np.shares_memory(t.numpy(), base)
        np.testing.assert_array_equal(t.numpy(), arr)
        assert t.strides == tuple(s // 8 for s in arr.strides)


def test_from_numpy_converts_unsupported_dtypes_and_rejects_non_arrays():
    t = from_numpy(np.arange(3, dtype=np.uint8))
    assert t.dtype == int64 and t.numpy().tolist() == [0, 1, 2]
    t = from_numpy(np.ones(2, dtype=np.longdouble))
    assert t.dtype == float32
    with pytest.raises(TypeError, match="ndarray"):
        from_numpy([1, 2, 3])


# ---- tensor(): always a copy; dtype defaults -----------------------------------------

@pytest.mark.parametrize("data", [[1.5, 2.0], 0.5, [[1, 2], [3, 4]], 3, [True, False], True,
                                  [], [[1.0], [2.5]]])
def test_tensor_from_python_data(data):
    t = tensor(data)
    ref = np.array(data)
    assert t.shape == ref.shape
    expected_dtype = {"f": float32, "i": int64, "b": bool_}[ref.dtype.kind]
    assert t.dtype == expected_dtype
    np.testing.assert_array_equal(t.numpy(), ref.astype(expected_dtype))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_tensor_copies_arrays_and_keeps_or_sets_dtype(dtype):
    arr = np.arange(6).reshape(2, 3).astype(dtype)
    t = tensor(arr)
    assert t.dtype == arr.dtype and t.is_contiguous()
    assert not np.shares_memory(t.numpy(), arr)
    np.testing.assert_array_equal(t.numpy(), arr)
    u = tensor([[1, 0, 2]], dtype=dtype)
    assert u.dtype == dtype
    np.testing.assert_array_equal(u.numpy(), np.array([[1, 0, 2]], dtype=dtype))
    assert tensor(arr.T).strides == (2, 1)  # copies come out contiguous


@pytest.mark.parametrize("name,dtype", [("float32", float32), ("float64", float64),
                                        ("int32", int32), ("int64", int64), ("bool", bool_),
                                        (np.float64, float64), (float, float32), (int, int64),
                                        (bool, bool_), ("double", float64), ("long", int64),
                                        ("f4", float32), ("<f8", float64), ("i4", int32),
                                        ("?", bool_), (np.dtype("int64"), int64)])
def test_dtype_spellings(name, dtype):
    assert zeros(2, dtype=name).dtype == dtype
    assert tensor([1], dtype=name).dtype == dtype


def test_tensor_from_an_expression_evaluates_it():
    a = np.array([1.0, 2.0])
    t = tensor(from_numpy(a) * 2)
    np.testing.assert_array_equal(t.numpy(), a * 2)


# ---- factories ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (2, 0, 4)], ids=str)
def test_filled_factories_match_numpy(shape, dtype):
    for ours, ref in [(zeros(shape, dtype=dtype), np.zeros(shape, dtype)),
                      (ones(shape, dtype=dtype), np.ones(shape, dtype)),
                      (full(shape, 7, dtype=dtype), np.full(shape, 7, dtype)),
                      (empty(shape, dtype=dtype), np.empty(shape, dtype))]:
        assert isinstance(ours, Tensor) and ours.is_contiguous()
        assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert_matches(zeros(shape, dtype=dtype), np.zeros(shape, dtype))
    assert_matches(ones(shape, dtype=dtype), np.ones(shape, dtype))
    assert_matches(full(shape, 1, dtype=dtype), np.full(shape, 1, dtype))


def test_shape_spellings_and_defaults():
    assert zeros(2, 3).shape == zeros((2, 3)).shape == zeros([2, 3]).shape == (2, 3)
    assert zeros(2).dtype == float32 and ones(2).dtype == float32 and empty(2).dtype == float32
    assert full((2,), 0.5).dtype == float32
    assert full((2,), 3).dtype == int64
    assert full((2,), True).dtype == bool_
    assert full(3, 2.5).shape == (3,)
    with pytest.raises(ValueError, match="negative"):
        zeros(2, -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (5, 0, -1), (0.0, 1.0, 0.25),
                                  (1, 2.5, 0.5), (-3,)])
def test_arange_matches_numpy(args, device):
    ref = np.arange(*args)
    t = arange(*args, device=device)
    assert t.device == as_device(device)
    np.testing.assert_allclose(t.numpy(), ref, rtol=1e-6)
    # Python floats default to float32 (as everywhere else), ints to int64.
    assert t.dtype == (float32 if ref.dtype.kind == "f" else int64)
    assert arange(*args, dtype="float64", device=device).dtype == float64
    np.testing.assert_array_equal(arange(*args, dtype="int32", device=device).numpy(),
                                  np.arange(*args, dtype=np.int32))


def test_rand_and_randn_are_seeded():
    manual_seed(123)
    a1, b1 = rand(3, 4), randn(5)
    manual_seed(123)
    a2, b2 = rand(3, 4), randn(5)
    np.testing.assert_array_equal(a1.numpy(), a2.numpy())
    np.testing.assert_array_equal(b1.numpy(), b2.numpy())
    assert a1.dtype == float32 and a1.shape == (3, 4)
    assert np.all((a1.numpy() >= 0) & (a1.numpy() < 1))
    # A generator argument is used instead of the default one.
    g1, g2 = np.random.default_rng(7), np.random.default_rng(7)
    np.testing.assert_array_equal(rand(4, generator=g1).numpy(), rand(4, generator=g2).numpy())
    np.testing.assert_array_equal(randn(4, dtype="float64", generator=g1).numpy(),
                                  randn(4, dtype="float64", generator=g2).numpy())
    # Same stream as NumPy's generator with the same seed.
    ref = np.random.default_rng(9).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(randn(2, 3, generator=np.random.default_rng(9)).numpy(), ref)
    manual_seed(5)
    assert isinstance(default_generator(), np.random.Generator)


def test_random_statistics_are_plausible():
    manual_seed(0)
    u = rand(20000, dtype="float64").numpy()
    n = randn(20000, dtype="float64").numpy()
    assert abs(u.mean() - 0.5) < 0.02 and abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05


@pytest.mark.parametrize("dtype", [None, "float64", "int32"])
def test_like_factories(dtype):
    src = from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::-1])
    want = np.dtype(dtype) if dtype else src.dtype
    for t, ref in [(zeros_like(src, dtype=dtype), np.zeros((2, 3), want)),
                   (ones_like(src, dtype=dtype), np.ones((2, 3), want)),
                   (full_like(src, 3, dtype=dtype), np.full((2, 3), 3, want))]:
        assert_matches(t, ref)
        assert t.is_contiguous()
    for t in [empty_like(src, dtype=dtype), rand_like(src, dtype=dtype),
              randn_like(src, dtype=dtype, generator=np.random.default_rng(0))]:
        assert t.shape == src.shape and t.dtype == want and t.device == src.device


# ---- data out: numpy(), __array__, astype, item, to, repr ---------------------------------

def test_numpy_and_array_protocol():
    a = np.arange(6.0).reshape(2, 3)
    t = from_numpy(a)
    assert t.numpy() is not a and np.shares_memory(t.numpy(), a)
    assert np.shares_memory(np.asarray(t), a)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float32), a.astype(np.float32))
    assert not np.shares_memory(np.array(t), a)  # np.array copies by default
    assert t.tolist() == a.tolist()


@settings(max_examples=50, deadline=None)
@given(shape=shapes(), src=st.sampled_from(ALL_DTYPES), dst=st.sampled_from(ALL_DTYPES),
       data=st.data())
def test_astype_matches_numpy(shape, src, dst, data):
    arr = data.draw(arrays(shape, src))
    out = from_numpy(arr).astype(dst)
    assert out.dtype == dst
    assert_matches(np.asarray(out), arr.astype(dst))


def test_astype_to_the_same_dtype_is_free():
    t = zeros(3)
    assert t.astype("float32") is t


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_item_returns_a_python_scalar(dtype):
    arr = np.array([[3]], dtype=dtype)
    v = from_numpy(arr).item()
    assert type(v) is type(arr.item()) and v == arr.item()
    assert tensor(arr[0, 0]).item() == arr.item()


def test_to_cpu_and_devices():
    t = tensor([1.0, 2.0])
    assert t.to("cpu") is t and t.cpu() is t
    assert t.device == Device("cpu") and str(t.device) == "cpu"
    assert zeros(2, device="cpu").device == t.device


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_repr_shows_values_shape_dtype_device(dtype):
    arr = np.array([[1, 0, 1], [0, 1, 1]], dtype=dtype)
    text = repr(from_numpy(arr))
    assert text.startswith("tensor(")
    assert f"shape={arr.shape}" in text
    assert dtype.name in text
    assert "cpu" in text
    body = np.array2string(arr, separator=", ")
    assert body.split("\n")[0] in text

"""DLPack: zero-copy both ways with NumPy and PyTorch, at the Tensor and the Node level;
what crossed is user-reachable memory (never read late); and what autograd's in-place
check sees of writes through another library's view -- set beside what PyTorch sees."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.tensor.dlpack import from_dlpack as tensor_from_dlpack

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]


def sample(dtype, shape=(3, 4)) -> np.ndarray:
    return (np.arange(np.prod(shape)).reshape(shape) % 3).astype(dtype)


# ------------------------------------------------------------------ NumPy


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_reads_our_memory_without_a_copy(dtype) -> None:
    x = mt.tensor(sample(dtype))
    arr = np.from_dlpack(x)
    assert arr.dtype == dtype and arr.shape == (3, 4)
    assert np.shares_memory(arr, x.numpy())
    arr[0, 0] = 1
    assert x.numpy()[0, 0] == 1
    assert x.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_we_read_numpy_memory_without_a_copy(dtype) -> None:
    arr = sample(dtype)
    x = mt.from_dlpack(arr)
    assert isinstance(x, mt.Tensor) and x.dtype == dtype and x.shape == (3, 4)
    assert np.shares_memory(x.numpy(), arr)
    arr[1, 1] = 0
    assert x.numpy()[1, 1] == 0


@pytest.mark.parametrize("view", [lambda a: a.T, lambda a: a[::2, 1:], lambda a: a[:, ::-1],
                                  lambda a: a[1]])
def test_strided_views_cross_both_ways_as_views(view) -> None:
    base = T.tensor(sample(np.float64, (4, 6)))
    ours = view(base)
    arr = np.from_dlpack(ours)
    np.testing.assert_array_equal(arr, view(sample(np.float64, (4, 6))))
    assert np.shares_memory(arr, base.numpy())
    back = tensor_from_dlpack(view(np.arange(24.0).reshape(4, 6)))
    np.testing.assert_array_equal(back.numpy(), view(np.arange(24.0).reshape(4, 6)))


def test_read_only_memory_stays_read_only() -> None:
    arr = np.arange(3.0)
    arr.flags.writeable = False
    x = mt.from_dlpack(arr)
    with pytest.raises(ValueError, match="read-only"):
        x += 1


def test_refusals_name_what_was_found() -> None:
    with pytest.raises(TypeError, match="uint8"):
        mt.from_dlpack(np.zeros(2, np.uint8))
    with pytest.raises(TypeError, match="__dlpack__.*list"):
        mt.from_dlpack([1.0, 2.0])
    w = mt.ones(2, requires_grad=True)
    with pytest.raises(BufferError, match="detach"):
        np.from_dlpack(w)
    assert np.shares_memory(np.from_dlpack(w.detach()), w.detach().numpy())


# ------------------------------------------------------------------ laziness


@pytest.fixture
def lazy():
    """Every op kept lazy (none computed at once below the fusion threshold)."""
    mt.set_fusion_threshold(0)
    yield
    mt.set_fusion_threshold(None)


def test_a_value_built_before_the_export_does_not_see_later_writes(lazy) -> None:
    x = mt.ones(4)
    y = x * 2 + 1               # may stay lazy
    arr = np.from_dlpack(x)     # the export realizes it first
    arr[:] = 5
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])


def test_a_value_built_after_the_export_does_not_see_later_writes(lazy) -> None:
    x = mt.ones(4)
    arr = np.from_dlpack(x)
    y = x * 2 + 1               # computed now: x's memory is reachable from outside
    arr[:] = 5
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])


def test_a_value_built_on_imported_memory_does_not_see_later_writes(lazy) -> None:
    arr = np.ones(4, np.float32)
    y = mt.from_dlpack(arr) * 2 + 1
    arr[:] = 5
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])


# ------------------------------------------------------------------ PyTorch


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", DTYPES)
def test_pytorch_both_ways_without_a_copy(torch, dtype) -> None:
    x = mt.tensor(sample(dtype))
    t = torch.from_dlpack(x)
    assert t.shape == (3, 4) and t.data_ptr() == x.numpy().ctypes.data
    t[0, 1] = 1
    assert x.numpy()[0, 1] == 1
    u = torch.from_numpy(sample(dtype))
    y = mt.from_dlpack(u)
    assert y.numpy().ctypes.data == u.data_ptr()
    u[2, 2] = 0
    assert y.numpy()[2, 2] == 0
    z = mt.from_dlpack(torch.utils.dlpack.to_dlpack(u))  # a bare capsule, PyTorch's old API
    assert z.numpy().ctypes.data == u.data_ptr()
    assert torch.utils.dlpack.from_dlpack(x).data_ptr() == x.numpy().ctypes.data


def test_pytorch_refuses_what_we_refuse(torch) -> None:
    with pytest.raises(BufferError):
        torch.from_dlpack(mt.ones(2, requires_grad=True))
    with pytest.raises(BufferError):
        torch.ones(2, requires_grad=True).__dlpack__()


# ------------------------------------------------------------------ version counters


def saved_and_grad(lib, values):
    """``z = (w * a).sum()`` saves ``a``; returns (a, w, z)."""
    a = lib.tensor(values)
    w = lib.ones(3, requires_grad=True)
    return a, w, (w * a).sum()


def test_writes_through_our_own_reimported_view_are_detected(torch) -> None:
    a, w, z = saved_and_grad(mt, [1.0, 2.0, 3.0])
    for again in (mt.from_dlpack(a), mt.from_dlpack(np.from_dlpack(a)),
                  mt.from_dlpack(torch.from_dlpack(a))):
        assert again.value.storage is a.value.storage  # one Storage, one version counter
    b = mt.from_dlpack(torch.from_dlpack(a))
    b += 1
    with pytest.raises(RuntimeError, match="modified in place"):
        z.backward()


def test_writes_by_the_other_library_are_not_detected_in_pytorch_either(torch) -> None:
    """Nothing announces a write made through NumPy's or PyTorch's view, so the in-place
    check cannot see it: backward reads the new values. PyTorch behaves the same."""
    ours = saved_and_grad(mt, [1.0, 2.0, 3.0])
    theirs = saved_and_grad(torch, [1.0, 2.0, 3.0])
    for (a, w, z), lib in ((ours, "mt"), (theirs, "torch")):
        np.from_dlpack(a)[0] = 10             # through NumPy's view
        torch.from_dlpack(a)[1] = 20          # through PyTorch's view (a new counter)
        z.backward()                          # no error in either library
        np.testing.assert_array_equal(np.asarray(w.grad.detach()), [10, 20, 3], err_msg=lib)


def test_a_write_through_our_view_of_a_pytorch_tensor_is_ours_only(torch) -> None:
    """PyTorch's counter does not see our write into its memory, nor ours PyTorch's."""
    t = torch.ones(3)
    version = t._version
    x = mt.from_dlpack(t)
    x += 1
    assert t._version == version and t.tolist() == [2.0, 2.0, 2.0]
    before = x.value.storage.version
    t.add_(1)
    assert x.value.storage.version == before and x.tolist() == [3.0, 3.0, 3.0]

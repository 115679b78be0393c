"""Chains of views on a Tensor and on a NumPy array, side by side.

Values and shapes must match after every step; strides too where NumPy defines
them canonically; every view shares the Storage; writes through the final view
land where NumPy's land.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import Tensor, from_numpy, tensor

from ..devices import DEVICES, on_device
from .strategies import (
    assert_matches,
    basic_keys,
    elem_strides,
    np_index,
    numpy_can_view,
    reshape_targets,
    shapes,
    strided_copy,
)


class Step:
    """One view applied to both sides: ``mt(t)``, ``np_(a)``; ``kind`` for bookkeeping."""

    def __init__(self, kind, mt, np_, text):
        self.kind, self.mt, self.np_, self.text = kind, mt, np_, text

    def __repr__(self):
        return self.text


@st.composite
def view_steps(draw, shape):
    """A random view for an array of ``shape``."""
    ndim = len(shape)
    kinds = ["index", "index", "T", "permute", "expand", "reshape", "view", "squeeze",
             "unsqueeze", "flatten"]
    if ndim >= 2:
        kinds.append("transpose")
    if ndim > 4:
        kinds = ["index", "squeeze", "reshape"]
    kind = draw(st.sampled_from(kinds))
    if kind == "index":
        key = draw(basic_keys(shape))
        return Step("index", lambda t: t[key], lambda a: np_index(a, key), f"[{key!r}]")
    if kind == "T":
        return Step("T", lambda t: t.T, lambda a: a.T, ".T")
    if kind == "transpose":
        i, j = draw(st.integers(-ndim, ndim - 1)), draw(st.integers(-ndim, ndim - 1))
        return Step("transpose", lambda t: t.transpose(i, j), lambda a: np.swapaxes(a, i, j),
                    f".transpose({i}, {j})")
    if kind == "permute":
        perm = tuple(draw(st.permutations(range(ndim))))
        return Step("permute", lambda t: t.permute(*perm), lambda a: a.transpose(perm),
                    f".permute{perm}")
    if kind == "expand":
        lead = tuple(draw(st.lists(st.integers(0, 3), max_size=max(0, min(2, 4 - ndim)))))
        target = lead + tuple(draw(st.integers(0, 3)) if n == 1 else n for n in shape)
        spec = lead + tuple(-1 if t == n and draw(st.booleans()) else t
                            for t, n in zip(target[len(lead):], shape))
        if draw(st.booleans()):
            return Step("expand", lambda t: t.expand(*spec),
                        lambda a: np.broadcast_to(a, target), f".expand{spec}")
        return Step("expand", lambda t: t.broadcast_to(target),
                    lambda a: np.broadcast_to(a, target), f".broadcast_to{target}")
    if kind in ("reshape", "view"):
        new = draw(reshape_targets(shape))
        return Step(kind, lambda t: t.reshape(new) if kind == "reshape" else t.view(*new),
                    lambda a: a.reshape(new), f".{kind}{new}")
    if kind == "flatten":
        if ndim == 0:
            return Step("reshape", lambda t: t.flatten(), lambda a: a.reshape(-1), ".flatten()")
        s = draw(st.integers(0, ndim - 1))
        e = draw(st.integers(s, ndim - 1))
        new = shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]
        return Step("reshape", lambda t: t.flatten(s, e), lambda a: a.reshape(new),
                    f".flatten({s}, {e})")
    if kind == "squeeze":
        ones = [d for d, n in enumerate(shape) if n == 1]
        if ones and draw(st.booleans()):
            axis = draw(st.sampled_from(ones))
            return Step("squeeze", lambda t: t.squeeze(axis), lambda a: np.squeeze(a, axis),
                        f".squeeze({axis})")
        return Step("squeeze", lambda t: t.squeeze(), lambda a: np.squeeze(a), ".squeeze()")
    axis = draw(st.integers(-ndim - 1, ndim))
    return Step("unsqueeze", lambda t: t.unsqueeze(axis), lambda a: np.expand_dims(a, axis),
                f".unsqueeze({axis})")


def check_strides(v: Tensor, a: np.ndarray, steps):
    if a.size == 0:
        return
    ours = tuple(s for n, s in zip(v.shape, v.strides) if n != 1)
    theirs = tuple(s for n, s in zip(a.shape, elem_strides(a)) if n != 1)
    assert ours == theirs, f"strides {v.strides} vs NumPy {elem_strides(a)} after {steps}"


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=300, deadline=None)
@given(shape=shapes(), strided=st.booleans(), data=st.data())
def test_random_view_chains_match_numpy(device, shape, strided, data):
    values = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    if strided:
        perm = data.draw(st.permutations(range(len(shape))))
        steps = data.draw(st.lists(st.sampled_from([1, 2, -1, -2]), min_size=len(shape),
                                   max_size=len(shape)))
        base = strided_copy(values, perm, steps)
    else:
        base = values.copy()
    t0 = on_device(base, device)
    if device == "cpu":
        assert np.shares_memory(t0.numpy(), base) or base.size == 0
    t, a = t0, base
    done = []
    canonical = True  # NumPy's strides are comparable until a reshape step
    expanded = False
    for _ in range(data.draw(st.integers(1, 5))):
        step = data.draw(view_steps(a.shape))
        done.append(step)
        if step.kind in ("reshape", "view"):
            new = step.np_(a).shape
            viewable = a.size == 0 or numpy_can_view(a, new)
            if step.kind == "view" and not viewable:
                with pytest.raises(ValueError, match="reshape"):
                    step.mt(t)
                step = Step("reshape", lambda x, new=new: x.reshape(new), step.np_, step.text)
            canonical = False
        t, a = step.mt(t), step.np_(a)
        expanded = expanded or step.kind == "expand"
        assert isinstance(t, Tensor)
        assert t.shape == a.shape, f"shape {t.shape} vs NumPy {a.shape} after {done}"
        np.testing.assert_array_equal(t.numpy(), a, err_msg=f"after {done}")
        if a.size:
            assert (t.storage is t0.storage) == np.shares_memory(a, base), \
                f"copy/view mismatch after {done}"
        if canonical:
            check_strides(t, a, done)
        assert t.is_contiguous() == (a.flags.c_contiguous or a.size == 0), done
    if expanded or t.storage is not t0.storage or a.size == 0:
        return
    # Writes through the final view land where NumPy's land.
    kind = data.draw(st.sampled_from(["all", "index", "iadd", "mul_expr"]))
    rng = np.random.default_rng(0)
    if kind == "all":
        value = rng.normal(size=a.shape)
        a[...] = value
        t[...] = on_device(value, device)
    elif kind == "index":
        key = data.draw(basic_keys(a.shape))
        a[key] = -1.5
        t[key] = -1.5
    elif kind == "iadd":
        value = rng.normal(size=a.shape[1:])
        a += value
        t += on_device(value, device)
    else:
        a *= a + 1
        t *= t + 1
    np.testing.assert_array_equal(t0.numpy(), base, err_msg=f"write after {done}")


def test_views_share_storage_and_never_copy():
    t = tensor(np.arange(24.0).reshape(2, 3, 4))
    for v in [t[1], t[:, ::2], t[..., ::-1], t.T, t.permute(2, 0, 1), t.transpose(0, 2),
              t[:, None], t.unsqueeze(1), t[:, :1].squeeze(1), t.view(6, 4), t.reshape(-1),
              t.expand(5, 2, 3, 4), t[0:1].broadcast_to(3, 3, 4), t.flatten(1)]:
        assert v.storage is t.storage
        assert v.storage.data is t.storage.data


def test_contiguous_and_is_contiguous():
    a = np.arange(12.0).reshape(3, 4)
    t = from_numpy(a)
    assert t.is_contiguous() and t.contiguous() is t
    for v, ref in [(t.T, a.T), (t[:, ::2], a[:, ::2]), (t[::-1], a[::-1])]:
        assert v.is_contiguous() == ref.flags.c_contiguous
        c = v.contiguous()
        assert c.is_contiguous() and c.storage is not t.storage
        assert c.strides == tuple(s // 8 for s in np.ascontiguousarray(ref).strides)
        np.testing.assert_array_equal(c.numpy(), ref)
    for v, ref in [(t[1:2], a[1:2]), (t[:, 1:2].T, a[:, 1:2].T), (t[:, 1:2], a[:, 1:2]),
                   (t[1:2, ::-1], a[1:2, ::-1]), (t[:0, ::2], a[:0, ::2])]:
        assert v.is_contiguous() == ref.flags.c_contiguous


def test_view_versus_reshape():
    a = np.arange(12.0).reshape(3, 4)
    t = from_numpy(a)
    assert t.view(4, 3).storage is t.storage
    assert t.reshape(2, -1).storage is t.storage
    assert t.T.reshape(12).storage is not t.storage  # needs a copy, as in NumPy
    assert not np.shares_memory(a.T.reshape(12), a)
    np.testing.assert_array_equal(t.T.reshape(12).numpy(), a.T.reshape(12))
    with pytest.raises(ValueError, match="reshape"):
        t.T.view(12)
    assert t.T.view(4, 1, 3).storage is t.storage  # inserting a size-1 dim is always a view


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=100, deadline=None)
@given(shape=shapes(1, 3, 1, 4), data=st.data())
def test_advanced_indexing_returns_a_copy_equal_to_numpy(device, shape, data):
    a = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    t = on_device(a, device)
    kind = data.draw(st.sampled_from(["ints", "mask", "ints_and_slice", "neg", "tensor_mask"]))
    n = shape[0]
    if kind == "ints":
        key = data.draw(st.lists(st.integers(0, n - 1), max_size=5))
    elif kind == "neg":
        key = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)))
    elif kind == "ints_and_slice":
        key = (slice(None, None, -1), Ellipsis, np.array(data.draw(st.lists(
            st.integers(0, shape[-1] - 1), min_size=1, max_size=3)))) if len(shape) > 1 \
            else np.array([0, 0])
    else:
        mask = np.random.default_rng(0).random(shape) < 0.5
        key = on_device(mask, device) if kind == "tensor_mask" else mask
    np_key = key.numpy() if isinstance(key, Tensor) else key
    expected = a[np_key]
    out = t[key]
    assert isinstance(out, Tensor) and out.device == t.device
    np.testing.assert_array_equal(out.numpy(), expected)
    assert out.dtype == expected.dtype
    if out.numel():
        assert out.storage is not t.storage
        assert not np.shares_memory(out.numpy(), a)


def test_len_iter_and_item():
    a = np.arange(6.0).reshape(3, 2)
    t = from_numpy(a)
    assert len(t) == len(a)
    for row, ref in zip(t, a):
        np.testing.assert_array_equal(row.numpy(), ref)
    assert t[2, 1].item() == a[2, 1].item()
    with pytest.raises(TypeError, match="0-d"):
        len(t[0, 0])
    assert_matches(t[None, ..., None], a[None, ..., None])


def test_owning_makes_what_the_constructors_make():
    """``Tensor.owning`` writes out ``Storage.__init__`` and ``_init_layout`` for speed;
    every slot of both objects must come out as the constructors set it."""
    from minitorch_exp.tensor.device import CPU
    from minitorch_exp.tensor.layout import contiguous
    from minitorch_exp.tensor.storage import Storage
    from minitorch_exp.tensor.tensor import Tensor

    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    flat, layout = arr.ravel(), contiguous((2, 3))
    fast = Tensor.owning(flat, arr, layout)
    slow = Tensor(Storage(flat, CPU), layout)
    tensor_slots = {s for cls in Tensor.__mro__ for s in getattr(cls, "__slots__", ())}
    storage_slots = set(Storage.__slots__) - {"__weakref__"}
    for name in tensor_slots - {"storage", "_array"}:
        assert getattr(fast, name) == getattr(slow, name), name
    for name in storage_slots:
        assert getattr(fast.storage, name) is getattr(slow.storage, name) or (
            getattr(fast.storage, name) == getattr(slow.storage, name)), name
    assert fast.array is arr and np.shares_memory(fast.storage.data, arr)


def test_a_deep_copy_writes_into_its_own_buffer():
    """``copy.deepcopy`` of a tensor that had made its NumPy view (a module copied for
    a target network, layers cloned by ``nn.TransformerEncoder``): writes to the copy
    land in the copy's buffer -- not in a detached copy of the old view -- and the
    original is untouched; views copied together still share one buffer."""
    import copy

    import minitorch_exp as mt

    base = mt.arange(6.0).reshape(2, 3).value
    row = base[1]
    _ = base.array, row.array  # each caches its view of the buffer
    base_copy, row_copy = copy.deepcopy((base, row))
    assert base_copy.storage is row_copy.storage is not base.storage
    with mt.no_grad():
        node = mt.Node(base_copy)
        node += 1.0
    np.testing.assert_array_equal(base_copy.numpy(), np.arange(6.0).reshape(2, 3) + 1)
    np.testing.assert_array_equal(row_copy.numpy(), [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(base.numpy(), np.arange(6.0).reshape(2, 3))
    layer = mt.nn.Linear(3, 2)
    _ = layer.weight.value.array
    clone = copy.deepcopy(layer)
    with mt.no_grad():
        clone.weight -= 1.0
    np.testing.assert_allclose(clone.weight.numpy(), layer.weight.numpy() - 1.0)

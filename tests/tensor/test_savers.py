"""Savers -- ``dst[...] = e``, ``dst[idx] = e``, ``+=``, ``-=``, ``*=``, ``/=`` -- write into dst.

Each test does the same statement on a NumPy array and on a Tensor sharing a
copy of it, then compares the *whole* buffer, so a write outside the view fails.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import Tensor, tensor, zeros

from ..devices import DEVICES, on_device
from .strategies import (
    FLOATS,
    NUMERIC,
    assert_matches,
    basic_keys,
    block_size,
    case_on,
    expr_cases,
    np_index,
)

SAVERS = ["=", "+=", "-=", "*=", "/="]


IN_PLACE = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
            "/=": operator.itruediv}


def save(dst, value, saver: str) -> None:
    """``dst <saver> value``, written the same way for a NumPy array and a Tensor."""
    if saver == "=":
        dst[...] = value
    else:
        IN_PLACE[saver](dst, value)


@st.composite
def destinations(draw, shape, dtype):
    """(base array, index, permutation): ``base[index].transpose(permutation)`` is a
    view of ``shape`` -- the whole base, or a permuted, gapped, reversed piece of it."""
    kind = draw(st.sampled_from(["whole", "strided", "slice"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ndim = len(shape)
    if kind == "whole":
        return rng.integers(-3, 4, size=shape).astype(dtype), (Ellipsis,), tuple(range(ndim))
    if kind == "slice":
        base = rng.integers(-3, 4, size=tuple(2 * n + 1 for n in shape)).astype(dtype)
        return base, tuple(slice(2 * n, 0, -2) for n in shape), tuple(range(ndim))
    perm = draw(st.permutations(range(ndim)))
    steps = draw(st.lists(st.sampled_from([1, 2, -1, -3]), min_size=ndim, max_size=ndim))
    index = []
    for p in perm:
        n, s = shape[p], steps[p]
        index.append(slice(1, 1 + n * s, s) if s > 0 else slice(n * -s, 0, s))
    base = rng.integers(-3, 4, size=tuple(shape[p] * abs(steps[p]) + 1 for p in perm))
    return base.astype(dtype), tuple(index), tuple(int(i) for i in np.argsort(perm))


def dst_pair(base: np.ndarray, index, perm, device="cpu"):
    """(numpy base, numpy view, Tensor base, Tensor view) over copies of ``base``; the
    Tensors on ``device``."""
    ref_base = base.copy()
    t_base = on_device(base.copy(), device)
    ref = np_index(ref_base, index).transpose(perm)
    t = t_base[index].permute(*perm)
    assert ref.shape == t.shape
    return ref_base, ref, t_base, t


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=150, deadline=None)
@given(case=expr_cases(max_depth=3), saver=st.sampled_from(SAVERS), data=st.data())
def test_every_saver_into_every_kind_of_view(device, case, saver, data):
    e, ref, tree, _ = case_on(case, device)
    ref = np.asarray(ref)
    if saver == "/=":
        e, ref = abs(e) + 0.5, np.abs(ref) + 0.5
    dtype = data.draw(st.sampled_from([ref.dtype] + list(NUMERIC)))
    # dst shape: the expression's, or one it broadcasts to.
    dshape = tuple(data.draw(st.lists(st.integers(1, 2), max_size=1))) + ref.shape
    ref_base, ref_dst, t_base, t_dst = dst_pair(*data.draw(destinations(dshape, dtype)), device)
    try:
        with np.errstate(all="ignore"):
            save(ref_dst, ref, saver)
    except TypeError:
        with pytest.raises(TypeError):
            save(t_dst, e, saver)
        return
    if saver == "=" and not np.can_cast(ref.dtype, dtype, "same_kind"):
        # Stricter than NumPy's setitem on purpose: the engine wants an explicit astype.
        with pytest.raises(TypeError, match="astype"):
            save(t_dst, e, saver)
        return
    block = data.draw(st.sampled_from([None, 3]))
    with block_size(block):
        save(t_dst, e, saver)
    assert_matches(t_base, ref_base, scale=tree.scale * 4, f32=tree.f32, device=device)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_setitem_with_basic_index(device, data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    base = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    key = data.draw(basic_keys(shape))
    ref = base.copy()
    t = on_device(base.copy(), device)
    target = np_index(ref, key)
    kind = data.draw(st.sampled_from(["scalar", "array", "expr", "list"]))
    if kind == "scalar":
        value = data.draw(st.floats(-5, 5))
        ref[key] = value
        t[key] = value
    elif kind == "array":
        value = np.random.default_rng(0).normal(size=target.shape[1:])
        ref[key] = value
        t[key] = on_device(value, device)
    elif kind == "list":
        value = np.arange(target.shape[-1] if target.ndim else 1, dtype=np.float64) * -1
        if target.ndim == 0:
            value = value[0]
        ref[key] = value
        t[key] = value.tolist()
    else:
        other = on_device(ref.copy(), device)
        ref[key] = np.exp(-np.abs(target)) * 2 + target
        t[key] = (-abs(other[key])).exp() * 2 + other[key]
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("saver", SAVERS[1:])
def test_augmented_assignment_through_an_index(device, saver):
    """``t[1:3] += e`` is Python's get, in-place op, set: the write goes through the view."""
    a = np.arange(12.0).reshape(3, 4)
    ref, t = a.copy(), on_device(a.copy(), device)
    ops = {"+=": "__iadd__", "-=": "__isub__", "*=": "__imul__", "/=": "__itruediv__"}
    for key in [(slice(1, 3),), (0,), (slice(None), slice(None, None, -2)), (2, 3)]:
        r = np_index(ref, key)
        getattr(r, ops[saver])(1.5)
        ref[key] = r
        v = t[key]
        v = getattr(v, ops[saver])(1.5)
        t[key] = v
    assert_matches(t, ref, device=device)


def test_inplace_operator_returns_the_same_tensor():
    t = zeros(3, dtype="float64")
    storage = t.storage
    t += 1
    assert isinstance(t, Tensor) and t.storage is storage
    np.testing.assert_array_equal(t.numpy(), np.zeros(3) + 1)


def test_assignment_bumps_the_storage_version():
    t = zeros(3)
    before = t.storage.version
    t[1:] = 2.0
    t += 1
    assert t.storage.version == before + 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", NUMERIC + (np.dtype(np.bool_),), ids=lambda d: d.name)
@pytest.mark.parametrize("scalar", [2, 1.5, True, -1])
@pytest.mark.parametrize("saver", SAVERS)
def test_saver_with_python_scalar_follows_numpy(device, dtype, scalar, saver):
    """Weak scalars: ``int32 += 1.5`` is refused like NumPy; ``int32[...] = 1.5`` casts."""
    a = np.array([1, 2, 0], dtype=dtype)
    ref, t = a.copy(), on_device(a.copy(), device)
    try:
        with np.errstate(all="ignore"):
            save(ref, scalar, saver)
    except (TypeError, OverflowError):
        with pytest.raises((TypeError, OverflowError)):
            save(t, scalar, saver)
        return
    save(t, scalar, saver)
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_cast_into_a_wider_destination_rounds_through_the_cast_dtype(device):
    a = np.array([1.7, -2.2, 0.5, 3.99])
    ref = np.zeros(4)
    t = on_device(np.zeros(4), device)
    ref[...] = a.astype(np.int32)
    t[...] = on_device(a, device).astype("int32")
    assert_matches(t, ref, device=device)
    ref[...] = (a * 1e-9 + 1).astype(np.float32)
    t[...] = (on_device(a, device) * 1e-9 + 1).astype("float32")
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_saver_expression_broadcasts_into_destination(device, dtype):
    a = np.arange(6, dtype=dtype).reshape(2, 3)
    row = np.array([1.0, -2.0, 0.5], dtype=dtype)
    ref, t = a.copy(), on_device(a.copy(), device)
    ref += row * 2
    t += tensor(row, device=device) * 2
    ref[...] = row
    ref *= np.array([[2.0], [3.0]], dtype=dtype)
    t[...] = tensor(row, device=device)
    t *= tensor(np.array([[2.0], [3.0]], dtype=dtype), device=device)
    assert_matches(t, ref, device=device)

"""The pure layout functions, each on its own, against NumPy's own strides and rules."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import layout as L

from .strategies import (
    basic_keys,
    broadcastable_to,
    elem_strides,
    np_index,
    numpy_can_view,
    reshape_targets,
    resolve,
    shapes,
)

ITEM = 8  # every NumPy array below is int64/float64: byte strides / 8 = element strides


def offset_in(arr: np.ndarray, base: np.ndarray) -> int:
    """Element offset of ``arr[0, ..., 0]`` inside ``base`` (both views of one buffer)."""
    return (arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // ITEM


def view_of(buf: np.ndarray, lay: L.Layout) -> np.ndarray:
    """The elements a layout addresses in the flat buffer ``buf`` (by explicit index math)."""
    out = np.empty(lay.shape, buf.dtype)
    for idx in itertools.product(*(range(n) for n in lay.shape)):
        out[idx] = buf[lay.offset + sum(i * s for i, s in zip(idx, lay.strides))]
    return out


def nonunit(shape, strides):
    """Strides of the dims NumPy defines canonically (size > 1)."""
    return tuple(s for n, s in zip(shape, strides) if n != 1)


@st.composite
def numpy_views(draw, max_dims=4):
    """(base, view): a random basic-indexed, maybe transposed view of an arange buffer."""
    shape = draw(shapes(0, max_dims, 0, 4))
    base = np.arange(math.prod(shape), dtype=np.int64)
    arr = base.reshape(shape)
    arr = np_index(arr, draw(basic_keys(shape, allow_none=False)))
    if arr.ndim:
        arr = arr.transpose(draw(st.permutations(range(arr.ndim))))
    return base, arr


# ---- contiguity ----------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(shape=shapes())
def test_contiguous_strides_match_numpy(shape):
    ours = L.contiguous_strides(shape)
    assert len(ours) == len(shape)
    if math.prod(shape):
        assert ours == elem_strides(np.empty(shape, np.int64))
    lay = L.contiguous(shape, offset=3)
    assert lay.offset == 3 and lay.shape == tuple(shape)
    assert L.is_contiguous(shape, ours)


@settings(max_examples=150, deadline=None)
@given(pair=numpy_views())
def test_is_contiguous_matches_numpy_flag(pair):
    _, arr = pair
    assert L.is_contiguous(arr.shape, elem_strides(arr)) == arr.flags.c_contiguous


# ---- broadcasting ------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_broadcast_shapes_is_numpys_rule(data):
    n = data.draw(st.integers(0, 4))
    shape_list = [data.draw(shapes(0, 4, 0, 3)) for _ in range(n)]
    if shape_list and data.draw(st.booleans()):
        # Also draw compatible ones, not only (mostly incompatible) random shapes.
        target = shape_list[0]
        shape_list = [target] + [data.draw(broadcastable_to(target)) for _ in shape_list[1:]]
    try:
        expected = np.broadcast_shapes(*shape_list)
    except ValueError:
        with pytest.raises(ValueError) as err:
            L.broadcast_shapes(*shape_list)
        for s in shape_list:
            if s:
                assert str(tuple(s)) in str(err.value)
        return
    assert L.broadcast_shapes(*shape_list) == expected


@settings(max_examples=150, deadline=None)
@given(pair=numpy_views(max_dims=3), data=st.data())
def test_broadcast_layout_matches_broadcast_to(pair, data):
    base, arr = pair
    lead = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
    target = lead + tuple(data.draw(st.integers(0, 3)) if n == 1 else n for n in arr.shape)
    lay = L.Layout(arr.shape, elem_strides(arr), offset_in(arr, base))
    out = L.broadcast_layout(lay, target)
    ref = np.broadcast_to(arr, target)
    assert out.shape == ref.shape
    np.testing.assert_array_equal(view_of(base, out), ref)
    if ref.size:
        assert nonunit(out.shape, out.strides) == nonunit(ref.shape, elem_strides(ref))


def test_broadcast_layout_refuses_what_numpy_refuses():
    lay = L.contiguous((3, 1))
    for target in [(2, 1), (3,), (4, 2, 2)]:
        with pytest.raises(ValueError):
            np.broadcast_to(np.empty((3, 1)), target)
        with pytest.raises(ValueError, match=r"\(3, 1\)"):
            L.broadcast_layout(lay, target)


# ---- permute, transpose, expand, squeeze, unsqueeze -----------------------------------------

@settings(max_examples=100, deadline=None)
@given(pair=numpy_views(), data=st.data())
def test_permute_and_transpose_layouts(pair, data):
    base, arr = pair
    lay = L.Layout(arr.shape, elem_strides(arr), offset_in(arr, base))
    perm = tuple(data.draw(st.permutations(range(arr.ndim))))
    out = L.permute_layout(lay, perm)
    ref = arr.transpose(perm)
    assert (out.shape, out.strides) == (ref.shape, elem_strides(ref))
    np.testing.assert_array_equal(view_of(base, out), ref)
    if arr.ndim:
        i = data.draw(st.integers(-arr.ndim, arr.ndim - 1))
        j = data.draw(st.integers(-arr.ndim, arr.ndim - 1))
        out = L.transpose_layout(lay, i, j)
        ref = np.swapaxes(arr, i, j)
        assert (out.shape, out.strides) == (ref.shape, elem_strides(ref))
    with pytest.raises(ValueError, match="permutation"):
        L.permute_layout(lay, tuple(range(arr.ndim)) + (0,) if arr.ndim else (0, 0))


@settings(max_examples=100, deadline=None)
@given(pair=numpy_views(max_dims=3), data=st.data())
def test_expand_layout_with_minus_one(pair, data):
    base, arr = pair
    lay = L.Layout(arr.shape, elem_strides(arr), offset_in(arr, base))
    lead = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    target = lead + tuple(data.draw(st.integers(1, 3)) if n == 1 else n for n in arr.shape)
    spec = lead + tuple(-1 if t == n and data.draw(st.booleans()) else t
                        for t, n in zip(target[len(lead):], arr.shape))
    out = L.expand_layout(lay, spec)
    ref = np.broadcast_to(arr, target)
    assert out.shape == ref.shape
    np.testing.assert_array_equal(view_of(base, out), ref)
    assert L.has_overlap_with_self(out) == any(
        s == 0 and n > 1 for n, s in zip(ref.shape, elem_strides(ref)))


def test_expand_layout_rejects_minus_one_for_new_dims():
    with pytest.raises(ValueError, match="-1"):
        L.expand_layout(L.contiguous((3,)), (-1, 3))


@settings(max_examples=100, deadline=None)
@given(pair=numpy_views(), data=st.data())
def test_squeeze_and_unsqueeze_layouts(pair, data):
    base, arr = pair
    lay = L.Layout(arr.shape, elem_strides(arr), offset_in(arr, base))
    out = L.squeeze_layout(lay)
    ref = np.squeeze(arr)
    assert out.shape == ref.shape
    np.testing.assert_array_equal(view_of(base, out), ref)
    ones = [d for d, n in enumerate(arr.shape) if n == 1]
    if ones:
        axis = data.draw(st.sampled_from(ones))
        out = L.squeeze_layout(lay, axis)
        ref = np.squeeze(arr, axis)
        assert out.shape == ref.shape
        if ref.size:
            assert out.strides == elem_strides(ref)
    axis = data.draw(st.integers(-arr.ndim - 1, arr.ndim))
    out = L.unsqueeze_layout(lay, axis)
    ref = np.expand_dims(arr, axis)
    assert out.shape == ref.shape
    if ref.size:
        assert nonunit(out.shape, out.strides) == nonunit(ref.shape, elem_strides(ref))
    np.testing.assert_array_equal(view_of(base, out), ref)


# ---- reshape ------------------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(shape=shapes(), data=st.data())
def test_infer_shape_matches_numpy(shape, data):
    n = math.prod(shape)
    new = data.draw(reshape_targets(shape) | shapes(0, 3, 0, 4).map(
        lambda s: s if not s else s[:-1] + (-1,)))
    try:
        expected = np.empty(n, np.int8).reshape(new).shape
    except ValueError:
        with pytest.raises(ValueError, match=str(n)):
            L.infer_shape(new, n)
        return
    assert L.infer_shape(new, n) == expected


def test_infer_shape_errors():
    with pytest.raises(ValueError, match="only one"):
        L.infer_shape((-1, -1), 4)
    with pytest.raises(ValueError, match="invalid"):
        L.infer_shape((-2, 2), 4)


@settings(max_examples=300, deadline=None)
@given(pair=numpy_views(), data=st.data())
def test_reshape_strides_views_exactly_when_numpy_can(pair, data):
    base, arr = pair
    new = resolve(data.draw(reshape_targets(arr.shape, allow_infer=False)), arr.size)
    strides = L.reshape_strides(arr.shape, elem_strides(arr), new)
    if arr.size == 0:
        return  # any strides address no element
    expected_view = numpy_can_view(arr, new)
    assert (strides is not None) == expected_view, (arr.shape, elem_strides(arr), new)
    if strides is not None:
        lay = L.Layout(new, strides, offset_in(arr, base))
        np.testing.assert_array_equal(view_of(base, lay), arr.reshape(new))
        assert np.shares_memory(arr.reshape(new), arr)


@settings(max_examples=200, deadline=None)
@given(shape=shapes(), data=st.data())
def test_a_row_major_layout_reshapes_to_row_major_strides(shape, data):
    """Any shape of a row-major tensor is a view: row-major strides, 0 for a size-1 dim
    (what the run walk gives a contiguous run), whatever a size-1 dim's stride was."""
    new = resolve(data.draw(reshape_targets(shape, allow_infer=False)), math.prod(shape))
    odd = tuple(7 if n == 1 else s for n, s in zip(shape, L.contiguous_strides(shape)))
    for strides in (L.contiguous_strides(shape), odd):
        got = L.reshape_strides(shape, strides, new)
        if math.prod(shape) == 0:
            assert got == L.contiguous_strides(new)
        else:
            assert got == tuple(0 if n == 1 else s
                                for n, s in zip(new, L.contiguous_strides(new)))


def test_reshape_strides_examples_checked_by_numpy():
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    for arr, new in [(a.transpose(1, 0, 2), (3, 8)), (a.transpose(1, 0, 2), (6, 4)),
                     (a[:, ::2], (4, 4)), (a[:, :, ::2], (6, 2)), (a[:, :, ::2], (2, 6)),
                     (np.broadcast_to(np.arange(3), (4, 3)), (2, 2, 3)),
                     (np.broadcast_to(np.arange(3), (4, 3)), (12,))]:
        strides = L.reshape_strides(arr.shape, elem_strides(arr), new)
        assert (strides is not None) == numpy_can_view(arr, new)


# ---- indexing, extent, coalesce --------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(pair=numpy_views(max_dims=3), data=st.data())
def test_index_layout_matches_numpy_basic_indexing(pair, data):
    base, arr = pair
    lay = L.Layout(arr.shape, elem_strides(arr), offset_in(arr, base))
    key = data.draw(basic_keys(arr.shape))
    ref = np_index(arr, key)
    out = L.index_layout(lay, key)
    assert out.shape == ref.shape
    np.testing.assert_array_equal(view_of(base, out), ref)
    if ref.size:
        assert out.offset == offset_in(ref, base)
        assert nonunit(out.shape, out.strides) == nonunit(ref.shape, elem_strides(ref))


def test_index_layout_errors_say_what_was_wrong():
    lay = L.contiguous((3, 4))
    with pytest.raises(IndexError, match=r"index 3 .*dim 0.*size 3"):
        L.index_layout(lay, 3)
    with pytest.raises(IndexError, match=r"index -5 .*dim 1.*size 4"):
        L.index_layout(lay, (0, -5))
    with pytest.raises(IndexError, match=r"too many indices.*2 dims.*3"):
        L.index_layout(lay, (0, 0, 0))
    with pytest.raises(IndexError, match="ellipsis"):
        L.index_layout(lay, (Ellipsis, 0, Ellipsis))


@settings(max_examples=150, deadline=None)
@given(pair=numpy_views(), data=st.data())
def test_extent_is_the_lowest_and_highest_position(pair, data):
    base, arr = pair
    lay = L.Layout(arr.shape, elem_strides(arr), offset_in(arr, base))
    if data.draw(st.booleans()) and arr.ndim:
        lay = L.broadcast_layout(lay, (2,) + arr.shape)
    lo, hi = L.extent(lay)
    if lay.numel == 0:
        assert (lo, hi) == (0, -1)
        return
    positions = [lay.offset + sum(i * s for i, s in zip(idx, lay.strides))
                 for idx in itertools.product(*(range(n) for n in lay.shape))]
    assert (lo, hi) == (min(positions), max(positions))


@st.composite
def walk_operands(draw, shape):
    """(base, view) of ``shape`` over its own flat buffer: memory order permuted,
    dims reversed, gaps between elements, and maybe one broadcast (stride-0) dim."""
    n = math.prod(shape)
    perm = draw(st.permutations(range(len(shape))))
    gap = draw(st.sampled_from([1, 2]))
    base = np.arange(n * gap, dtype=np.int64)
    arr = base[::gap].reshape([shape[p] for p in perm])
    arr = arr[tuple(slice(None, None, draw(st.sampled_from([1, -1]))) for _ in perm) + (...,)]
    arr = arr.transpose(np.argsort(perm))
    if shape and draw(st.booleans()):
        d = draw(st.integers(0, len(shape) - 1))
        arr = np.broadcast_to(arr[(slice(None),) * d + (slice(0, 1),)], shape)
    return base, arr


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_coalesce_walks_the_same_elements_with_fewer_dims(data):
    """Merged dims must visit, for every operand, the same positions in the same order."""
    shape = data.draw(shapes(0, 4, 1, 4))
    operands = [data.draw(walk_operands(shape)) for _ in range(data.draw(st.integers(1, 3)))]
    cshape, cstrides = L.coalesce(shape, *[elem_strides(a) for _, a in operands])
    assert math.prod(cshape) == math.prod(shape)
    assert len(cshape) <= len(shape) and 1 not in cshape
    for (base, arr), strides in zip(operands, cstrides):
        lay = L.Layout(cshape, strides, offset_in(arr, base))
        np.testing.assert_array_equal(view_of(base, lay).reshape(-1), arr.reshape(-1))
    if len(operands) == 1 and operands[0][1].flags.c_contiguous:
        assert len(cshape) <= 1  # one contiguous operand walks as one flat run


def test_layout_value_and_normalize_shape():
    lay = L.Layout((2, 3), (3, 1), 4)
    assert lay.ndim == 2 and lay.numel == 6
    assert L.normalize_shape((2, 3)) == L.normalize_shape(((2, 3),)) == (2, 3)
    assert L.normalize_shape(([2, 3],)) == (2, 3)
    assert L.normalize_shape((np.int64(2),)) == (2,)
    with pytest.raises(TypeError, match="sequence of ints"):
        L.normalize_shape((2.5,))
    with pytest.raises(ValueError, match="negative"):
        L.check_shape((2, -1))

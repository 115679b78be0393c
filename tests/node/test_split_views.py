"""Pieces and rearrangements: ``split``, ``chunk``, ``unbind``, ``narrow``, ``flip`` (views,
no copy), ``repeat`` (an expand, copying only where it must) and ``roll`` (a cat).

Values against NumPy on hypothesis-drawn shapes, dims and layouts, on both sides of
the eager/fused policy; gradients by float64 finite differences and against
PyTorch; views share the input's memory and run no kernel.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.tensor as T

from ._helpers import compare_with_torch, layouts, leaf, seeds, strided_array
from .test_new_elementwise import POLICIES, policy

HAS_TORCH = importlib.util.find_spec("torch") is not None
shapes = st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple)


def arange_like(shape, layout="contiguous") -> np.ndarray:
    return strided_array(np.arange(np.prod(shape), dtype=np.float64).reshape(shape), layout)


def weighted_sum(pieces):
    """A scalar that weighs each piece differently, so gradients tell them apart."""
    total = 0.0
    for i, p in enumerate(pieces):
        total = total + (p * (i + 1.0)).sum()
    return total


@st.composite
def split_cases(draw):
    """(shape, dim, split_size_or_sections)."""
    shape = draw(shapes)
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[dim]
    if draw(st.booleans()):
        return shape, dim, draw(st.integers(1, 5)) if n else draw(st.integers(0, 2))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    return shape, dim, [b - a for a, b in zip([0] + cuts, cuts + [n])]


def numpy_pieces(arr, dim, sizes):
    bounds = np.cumsum([0] + list(sizes))
    return [np.take(arr, np.arange(a, b), axis=dim) for a, b in zip(bounds[:-1], bounds[1:])]


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=15)
@given(case=split_cases(), layout=layouts)
def test_split_gives_views_matching_numpy(side, case, layout):
    shape, dim, how = case
    arr = arange_like(shape, layout)
    n = shape[dim]
    sizes = how if isinstance(how, list) else \
        [min(how, n - s) for s in range(0, n, how)] if n else [0]
    with policy(side):
        x = mt.from_numpy(arr)
        with mt.count_kernels() as k:
            surfaces = {"method": x.split(how, dim), "mt": mt.split(x, how, dim=dim),
                        "T": T.split(x.value, how, dim)}
        assert k.total == 0
        for surface, pieces in surfaces.items():
            assert isinstance(pieces, tuple) and len(pieces) == len(sizes), surface
            for got, want in zip(pieces, numpy_pieces(arr, dim, sizes)):
                np.testing.assert_array_equal(got.numpy(), want, err_msg=surface)
                value = got if isinstance(got, T.Tensor) else got.value
                assert value.storage is x.value.storage, surface


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=15)
@given(shape=shapes, chunks=st.integers(1, 5), data=st.data())
def test_chunk_matches_torch_sizes_and_numpy_values(side, shape, chunks, data):
    dim = data.draw(st.integers(0, len(shape) - 1))
    arr = arange_like(shape)
    n = shape[dim]
    size = -(-n // chunks)
    sizes = [min(size, n - s) for s in range(0, n, size)] if n else [0] * chunks
    with policy(side):
        x = mt.from_numpy(arr)
        for pieces in (x.chunk(chunks, dim), mt.chunk(x, chunks, dim=dim),
                       T.chunk(x.value, chunks, dim)):
            assert [p.shape[dim] for p in pieces] == sizes
            for got, want in zip(pieces, numpy_pieces(arr, dim, sizes)):
                np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=15)
@given(shape=shapes, layout=layouts, data=st.data())
def test_unbind_and_narrow_are_views(side, shape, layout, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    arr = arange_like(shape, layout)
    with policy(side):
        x = mt.from_numpy(arr)
        for pieces in (x.unbind(dim), mt.unbind(x, dim=dim), T.unbind(x.value, dim)):
            assert len(pieces) == shape[dim]
            for i, p in enumerate(pieces):
                np.testing.assert_array_equal(p.numpy(), np.take(arr, i, axis=dim))
        n = shape[dim]
        start = data.draw(st.integers(0, n))
        length = data.draw(st.integers(0, n - start))
        piece = x.narrow(dim, start, length)
        assert piece.value.storage is x.value.storage
        np.testing.assert_array_equal(piece.numpy(),
                                      np.take(arr, np.arange(start, start + length), axis=dim))


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=8)
@given(case=split_cases(), layout=layouts, seed=seeds)
def test_gradients_through_pieces(side, case, layout, seed):
    shape, dim, how = case
    assume(0 not in shape)  # an empty input has no gradient to check
    values = np.random.default_rng(seed).standard_normal(shape)
    with policy(side):
        x = leaf(values, layout)
        assert mt.gradcheck(lambda x: weighted_sum(x.split(how, dim)), [x])
        assert mt.gradcheck(lambda x: weighted_sum(x.unbind(dim)), [x])
        assert mt.gradcheck(lambda x: weighted_sum(x.chunk(2, dim)), [x])


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=6)
@given(case=split_cases(), seed=seeds)
def test_pieces_match_torch(side, case, seed):
    torch = pytest.importorskip("torch")
    shape, dim, how = case
    assume(0 not in shape)
    x = leaf(np.random.default_rng(seed).standard_normal(shape))
    with policy(side):
        compare_with_torch(lambda x: weighted_sum(x.split(how, dim)),
                           lambda t: weighted_sum(torch.split(t, how, dim)), [x])
        compare_with_torch(lambda x: weighted_sum(mt.unbind(x, dim)),
                           lambda t: weighted_sum(torch.unbind(t, dim)), [x])
        compare_with_torch(lambda x: weighted_sum(mt.chunk(x, 3, dim)),
                           lambda t: weighted_sum(torch.chunk(t, 3, dim)), [x])


def test_split_refuses_what_torch_refuses():
    x = mt.ones(5)
    with pytest.raises(ValueError, match="add up to 5"):
        x.split([2, 2])
    with pytest.raises(ValueError, match="positive"):
        x.split(0)
    with pytest.raises(ValueError, match="positive"):
        x.chunk(0)


# ---- flip, repeat, roll ----------------------------------------------------------------

@st.composite
def dims_of(draw, shape):
    return draw(st.lists(st.integers(-len(shape), len(shape) - 1),
                         unique_by=lambda d: d % len(shape), max_size=len(shape)))


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=12)
@given(shape=shapes, layout=layouts, seed=seeds, data=st.data())
def test_flip_is_a_view_matching_numpy_and_torch(side, shape, layout, seed, data):
    dims = data.draw(dims_of(shape))
    values = np.random.default_rng(seed).standard_normal(shape)
    arr = strided_array(values, layout)
    with policy(side):
        x = mt.from_numpy(arr)
        with mt.count_kernels() as k:
            flipped = [x.flip(dims), x.flip(*dims) if dims else x.flip(dims),
                       mt.flip(x, dims=dims), T.flip(x.value, dims)]
        assert k.total == 0
        for y in flipped:
            np.testing.assert_array_equal(y.numpy(), np.flip(arr, tuple(dims)))
            assert (y if isinstance(y, T.Tensor) else y.value).storage is x.value.storage
        x = leaf(values, layout)
        assert mt.gradcheck(lambda x: x.flip(dims) * x, [x])
        if HAS_TORCH:
            compare_with_torch(lambda x: x.flip(dims) * x, lambda t: t.flip(dims) * t, [x])


@st.composite
def repeats(draw, shape):
    lead = draw(st.integers(0, 2))
    return tuple(draw(st.lists(st.integers(0, 3), min_size=len(shape) + lead,
                               max_size=len(shape) + lead)))


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=12)
@given(shape=shapes, layout=layouts, seed=seeds, data=st.data())
def test_repeat_matches_numpy_tile_and_torch(side, shape, layout, seed, data):
    sizes = data.draw(repeats(shape))
    values = np.random.default_rng(seed).standard_normal(shape)
    with policy(side):
        x = leaf(values, layout)
        np.testing.assert_array_equal(x.repeat(*sizes).numpy(), np.tile(values, sizes))
        np.testing.assert_array_equal(x.repeat(sizes).numpy(), np.tile(values, sizes))
        assert mt.gradcheck(lambda x: x.repeat(sizes) * 1.5, [x])
        if HAS_TORCH:
            compare_with_torch(lambda x: x.repeat(sizes), lambda t: t.repeat(sizes), [x], seed=seed)


def test_repeating_size_one_dims_is_a_view():
    """A repeat of size-1 dims is an expand whose reshape needs no copy."""
    x = mt.randn(1, 5, 1)
    with mt.count_kernels() as k:
        y = x.repeat(4, 1, 3)
    assert k.total == 0 and y.shape == (4, 5, 3) and y.value.storage is x.value.storage
    np.testing.assert_array_equal(y.numpy(), np.tile(x.numpy(), (4, 1, 3)))
    with pytest.raises(ValueError, match="one per dim"):
        x.repeat(2, 2)


@st.composite
def roll_cases(draw, shape):
    if draw(st.booleans()):
        return draw(st.integers(-7, 7)), None
    dims = draw(dims_of(shape).filter(bool))
    return tuple(draw(st.integers(-7, 7)) for _ in dims), tuple(dims)


@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=12)
@given(shape=shapes, layout=layouts, seed=seeds, data=st.data())
def test_roll_matches_numpy_and_torch(side, shape, layout, seed, data):
    shifts, dims = data.draw(roll_cases(shape))
    values = np.random.default_rng(seed).standard_normal(shape)
    with policy(side):
        x = leaf(values, layout)
        np.testing.assert_array_equal(mt.roll(x, shifts, dims).numpy(),
                                      np.roll(values, shifts, dims))
        assert mt.gradcheck(lambda x: x.roll(shifts, dims) * x, [x])
        try:
            import torch
        except ImportError:
            return
        compare_with_torch(lambda x: x.roll(shifts, dims) * x,
                           lambda t: torch.roll(t, shifts, dims) * t, [x], seed=seed)


def test_full_like_keeps_dtype_and_device_as_torch():
    x = mt.zeros(2, 3, dtype=mt.int64)
    y = mt.full_like(x, 7)
    assert y.dtype == np.int64 and y.shape == (2, 3) and (y.numpy() == 7).all()

"""Reductions (sum, mean, max, min, argmax, sum_to) against NumPy, plain and blocked."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import cpu_numpy, exp, from_numpy, maximum, relu, tensor

from ..devices import CUDA_ONLY, DEVICES, on_device
from .strategies import (
    ALL_DTYPES,
    FLOATS,
    assert_matches,
    block_size,
    broadcastable_to,
    case_on,
    expr_cases,
    shapes,
    tensor_pairs,
)

OPS = ["sum", "mean", "max", "min", "argmax"]


def np_reduce(op, a, axis, keepdims):
    a = np.asarray(a)
    if op == "argmax":
        return np.argmax(a, axis=axis, keepdims=keepdims)
    if op == "mean":
        with np.errstate(all="ignore"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return np.mean(a, axis=axis, keepdims=keepdims)
    return getattr(np, op)(a, axis=axis, keepdims=keepdims)


@st.composite
def axes_for(draw, ndim, op):
    """None, one axis (maybe negative) or, except for argmax, a tuple of axes."""
    kind = draw(st.sampled_from(["none", "int", "tuple"] if op != "argmax" else ["none", "int"]))
    if kind == "none" or ndim == 0:
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    picked = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in picked)


def _has_empty_reduced_axis(shape, axis):
    if axis is None:
        return math.prod(shape) == 0
    axes = (axis,) if isinstance(axis, int) else axis
    return any(shape[a] == 0 for a in axes)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=200, deadline=None)
@given(data=st.data(), op=st.sampled_from(OPS), keepdims=st.booleans(),
       dtype=st.sampled_from(ALL_DTYPES), fused=st.booleans(),
       block=st.sampled_from([None, 1, 4, 16]))
def test_reduction_matches_numpy(device, data, op, keepdims, dtype, fused, block):
    t, a = data.draw(tensor_pairs(shape=data.draw(shapes()), dtype=dtype, device=device))
    axis = data.draw(axes_for(a.ndim, op))
    if fused and dtype.kind != "b":
        t2, a2 = data.draw(tensor_pairs(shape=a.shape[1:], dtype=dtype, device=device))
        x, ref_x = t * t2 + 1, a * a2 + 1
    else:
        x, ref_x = t, a
    if op in ("max", "min", "argmax") and _has_empty_reduced_axis(a.shape, axis):
        with pytest.raises(ValueError):
            np_reduce(op, ref_x, axis, keepdims)
        with pytest.raises(ValueError, match=op):
            getattr(x, op)(axis=axis, keepdims=keepdims)
        return
    expected = np_reduce(op, ref_x, axis, keepdims)
    e = getattr(x, op)(axis=axis, keepdims=keepdims)
    assert e.shape == np.shape(expected)
    with block_size(block):
        out = e.eval()
    assert_matches(out, expected, scale=max(1, a.size) * 10, device=device)


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, (0, 2), (1, 2), (0, 1), (2, 0)])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", CUDA_ONLY)
def test_reduction_of_a_fused_strided_input(device, axis, op):
    """The device twin of the blocked test below: every split of kept/reduced dims."""
    if op == "argmax" and isinstance(axis, tuple):
        return
    rng = np.random.default_rng(7)
    a = rng.normal(size=(4, 5, 6))
    b = rng.normal(size=(6,))
    ta, tb = on_device(a, device)[:, ::-1], on_device(b, device)
    ref = a[:, ::-1] * b - 0.5
    for keepdims in (False, True):
        out = getattr(ta * tb - 0.5, op)(axis=axis, keepdims=keepdims).eval()
        assert out.device == ta.device
        assert_matches(out, np_reduce(op, ref, axis, keepdims), device=device)


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, (0, 2), (1, 2), (0, 1), (2, 0)])
@pytest.mark.parametrize("block", [1, 5, 7, 64])
@pytest.mark.parametrize("op", OPS)
def test_blocked_reduction_of_a_fused_input(monkeypatch, axis, block, op):
    """Inputs larger than BLOCK reduce block by block; every split of kept/reduced dims."""
    if op == "argmax" and isinstance(axis, tuple):
        return
    monkeypatch.setattr(cpu_numpy, "BLOCK", block)
    rng = np.random.default_rng(7)
    a = rng.normal(size=(4, 5, 6))
    b = rng.normal(size=(6,))
    ta, tb = from_numpy(a[:, ::-1]), from_numpy(b)
    ref = a[:, ::-1] * b - 0.5
    for keepdims in (False, True):
        out = getattr(ta * tb - 0.5, op)(axis=axis, keepdims=keepdims).eval()
        assert_matches(out, np_reduce(op, ref, axis, keepdims))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_blocked_reduction_keeps_numpy_dtypes(monkeypatch, device, dtype):
    monkeypatch.setattr(cpu_numpy, "BLOCK", 8)
    a = (np.arange(60).reshape(6, 10) % 3).astype(dtype)
    t = on_device(a, device)
    x, ref = maximum(t, t), np.maximum(a, a)  # a fused (non-tensor) input of a's dtype
    for op in ("sum", "mean", "max", "min"):
        for axis in (None, 0, 1):
            assert_matches(getattr(x, op)(axis=axis).eval(), np_reduce(op, ref, axis, False),
                           device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_large_inputs_use_the_default_blocks(device):
    """More elements than one default block: the blocked paths for real (on cuda: many
    blocks, and full reductions split over blocks)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(520, 521))
    assert a.size > cpu_numpy.BLOCK
    t = on_device(a, device)
    ref = a * 2 + 1

    def check(actual, expected, scale=1.0):
        assert_matches(actual, expected, scale=scale, device=device)

    check((t * 2 + 1).eval(), ref)
    check((t * 2 + 1).sum(axis=0).eval(), ref.sum(axis=0))
    check((t * 2 + 1).sum().eval(), ref.sum(), scale=a.size)
    check((t * 2 + 1).max(axis=1).eval(), ref.max(axis=1))
    check((t.T * 2 + 1).mean(axis=1, keepdims=True).eval(), ref.T.mean(axis=1, keepdims=True))
    f32 = on_device(a.astype(np.float32), device)
    check((f32 * 2 + 1).sum(axis=1).eval(), (a.astype(np.float32) * 2 + 1).sum(axis=1),
          scale=1000)


@pytest.mark.parametrize("device", DEVICES)
def test_small_block_elementwise_paths(monkeypatch, device):
    monkeypatch.setattr(cpu_numpy, "BLOCK", 7)
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5, 6, 7))
    b = rng.normal(size=(7,))
    ta, tb = on_device(a, device), on_device(b, device)
    assert_matches((exp(ta.permute(2, 0, 1)) * 2).eval(), np.exp(a.transpose(2, 0, 1)) * 2,
                   device=device)
    assert_matches(relu(ta - tb).eval(), np.maximum(a - b, 0), device=device)
    dst = on_device(np.zeros((5, 6, 7)), device)
    dst[::-1, :, ::-2] = ta[:, :, ::2] * tb[::2]
    ref = np.zeros((5, 6, 7))
    ref[::-1, :, ::-2] = a[:, :, ::2] * b[::2]
    assert_matches(dst, ref, device=device)


# ---- sum_to -------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=80, deadline=None)
@given(data=st.data(), block=st.sampled_from([None, 2]))
def test_sum_to_matches_numpy(device, data, block):
    shape = data.draw(shapes(0, 4, 1, 3))
    target = data.draw(broadcastable_to(shape))
    t, a = data.draw(tensor_pairs(shape=shape, dtype=np.dtype(np.float64), device=device))
    lead = len(shape) - len(target)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(target)
                                      if n == 1 and shape[lead + i] != 1)
    expected = a.sum(axis=axes).reshape(target) if axes else a
    with block_size(block):
        assert_matches(t.sum_to(target).eval(), expected, device=device)
        assert_matches((t * 2).sum_to(target).eval(), expected * 2, device=device)


def test_sum_to_refuses_a_shape_that_does_not_broadcast():
    t = from_numpy(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        t.sum_to((4,))


# ---- fused inputs and reductions inside bigger expressions ----------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_fused_reduce_inputs_and_reductions_feeding_maps(device):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    ta, tb = on_device(a, device), on_device(b, device)

    def check(actual, expected):
        assert_matches(actual, expected, device=device)

    check((ta * tb).sum(axis=1).eval(), (a * b).sum(axis=1))
    m = ta.max(axis=1, keepdims=True)
    softmax = exp(ta - m) / exp(ta - m).sum(axis=1, keepdims=True)
    ea = np.exp(a - a.max(axis=1, keepdims=True))
    check(softmax.eval(), ea / ea.sum(axis=1, keepdims=True))
    check(ta.sum(axis=0).max().eval(), a.sum(axis=0).max())
    check((ta @ tb.T).sum(axis=0).eval(), (a @ b.T).sum(axis=0))
    check((ta.sum(axis=1) * 2).argmax().eval(), np.argmax(a.sum(axis=1) * 2))
    check(ta.mean().eval(), a.mean())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("saver", ["=", "+=", "-=", "*="])
def test_reduction_into_strided_and_broadcast_destinations(device, saver):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(4, 3))
    ta = on_device(a, device)
    ref, t = np.ones((5, 6)), on_device(np.ones((5, 6)), device)
    cases = [
        (lambda x: x[:, ::2], ta.sum(axis=0), a.sum(axis=0)),  # broadcasts over 5 rows
        (lambda x: x[1:4, 1:5].T, (ta * 2).max(axis=0), (a * 2).max(axis=0)),  # into (4, 3)
        (lambda x: x[0, ::-2], ta.mean(axis=0), a.mean(axis=0)),
        (lambda x: x[2:3, :3], ta.sum(axis=0, keepdims=True), a.sum(axis=0, keepdims=True)),
    ]
    for view, e, expected in cases:
        r, v = view(ref), view(t)
        if saver == "=":
            r[...] = expected
            v[...] = e
        elif saver == "+=":
            r += expected
            v += e
        elif saver == "-=":
            r -= expected
            v -= e
        else:
            r *= expected
            v *= e
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_argmax_into_a_broadcast_destination(device):
    a = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 9.0]])
    ref = np.zeros((3, 2), dtype=np.int64)
    t = on_device(ref.copy(), device)
    ref[...] = np.argmax(a, axis=1)
    t[...] = on_device(a, device).argmax(axis=1)
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_mean_of_an_empty_axis_is_nan_like_numpy(device):
    a = np.zeros((0, 3))
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        expected = a.mean(axis=0)
    assert_matches(on_device(a, device).mean(axis=0).eval(), expected, device=device)
    assert_matches(on_device(a, device).sum(axis=0).eval(), a.sum(axis=0), device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_nan_propagates_through_max_and_sum(device, dtype):
    a = np.array([[1.0, np.nan, 2.0], [0.5, 0.25, -1.0]], dtype=dtype)
    t = tensor(a, device=device)
    for op in ("max", "min", "sum"):
        assert_matches(getattr(t, op)(axis=1).eval(), getattr(np, op)(a, axis=1),
                       device=device)


def test_reduction_errors_name_the_problem():
    t = from_numpy(np.ones((2, 0)))
    with pytest.raises(ValueError, match=r"max.*\(2, 0\)"):
        t.max(axis=1)
    with pytest.raises(ValueError, match="argmax"):
        from_numpy(np.ones((2, 3))).argmax(axis=(0, 1))
    with pytest.raises(IndexError, match="axis 2"):
        from_numpy(np.ones((2, 3))).sum(axis=2)
    with pytest.raises(ValueError, match="repeated"):
        from_numpy(np.ones((2, 3))).sum(axis=(0, -2))


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=40, deadline=None)
@given(case=expr_cases(max_depth=3, dtypes=FLOATS), keepdims=st.booleans(),
       block=st.sampled_from([None, 3]))
def test_reductions_of_random_trees(device, case, keepdims, block):
    e, ref, tree, _ = case_on(case, device)
    ref = np.asarray(ref)
    for op in ("sum", "max"):
        if op == "max" and ref.size == 0:
            continue
        with block_size(block):
            out = getattr(e, op)(axis=0 if ref.ndim else None, keepdims=keepdims).eval()
        expected = np_reduce(op, ref, 0 if ref.ndim else None, keepdims)
        assert_matches(out, expected, scale=tree.scale * max(1, ref.size), f32=tree.f32,
                       device=device)

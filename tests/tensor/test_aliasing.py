"""Aliasing: the destination shares storage with an input at another offset or layout.

NumPy evaluates the right-hand side completely before writing, so its result is
the reference; the engine must match it, with one pass and with small blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import cpu_numpy, relu, where

from ..devices import CUDA, DEVICES, on_device
from .strategies import assert_matches, block_size

BLOCKS = [None, 1, 3]

# The NumPy evaluator runs at every block size; cuda has no blocks, so it runs once.
DEVICE_BLOCKS = [pytest.param("cpu", b, id=f"cpu-{b}") for b in BLOCKS] + [
    pytest.param("cuda", None, marks=CUDA.marks, id="cuda")]


def both(a: np.ndarray, device="cpu"):
    return a.copy(), on_device(a.copy(), device)


@pytest.mark.parametrize("device,block", DEVICE_BLOCKS)
def test_shift_right_and_left(device, block):
    a = np.arange(10.0)
    ref, t = both(a, device)
    with block_size(block):
        ref[1:] = ref[:-1] + 1
        t[1:] = t[:-1] + 1
        ref[:-2] = ref[2:] * 2
        t[:-2] = t[2:] * 2
        ref[1:] += ref[:-1]
        t[1:] += t[:-1]
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device,block", DEVICE_BLOCKS)
def test_transpose_of_itself(device, block):
    a = np.arange(16.0).reshape(4, 4)
    ref, t = both(a, device)
    with block_size(block):
        ref[...] = ref.T + ref
        t[...] = t.T + t
        ref += ref.T
        t += t.T
        ref[...] = ref.T  # a plain copy from an overlapping layout
        t[...] = t.T
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device,block", DEVICE_BLOCKS)
def test_reversed_views(device, block):
    a = np.arange(12.0).reshape(3, 4)
    ref, t = both(a, device)
    with block_size(block):
        ref[...] = ref[::-1, ::-1] * 2 + ref
        t[...] = t[::-1, ::-1] * 2 + t
        ref[::-1] = ref + 1
        t[::-1] = t + 1
        ref[:, ::-2] = ref[:, :2] - ref[:, 1::2]
        t[:, ::-2] = t[:, :2] - t[:, 1::2]
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device,block", DEVICE_BLOCKS)
def test_where_and_casts_over_aliased_inputs(device, block):
    a = np.array([-1.0, 2.0, -3.0, 4.0, 0.5, -0.25])
    ref, t = both(a, device)
    with block_size(block):
        ref[...] = np.where(ref > 0, ref, 0)
        t[...] = where(t > 0, t, 0)
        ref[1:] = np.where(ref[:-1] > 0, ref[:-1], -ref[1:])
        t[1:] = where(t[:-1] > 0, t[:-1], -t[1:])
        ref[:-1] = ref[1:].astype(np.int64)
        t[:-1] = t[1:].astype("int64")
        ref[...] = np.maximum(ref[::-1], 0)
        t[...] = relu(t[::-1])
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_dot_and_reduce_writing_over_their_inputs(device):
    a = np.arange(9.0).reshape(3, 3) / 10
    ref, t = both(a, device)
    ref[...] = ref @ ref
    t[...] = t @ t
    ref[0] = ref.sum(axis=0)
    t[0] = t.sum(axis=0)
    ref[:, 1] += ref.max(axis=1)
    t[:, 1] += t.max(axis=1)
    ref[1:] = ref[:2] @ ref.T[::-1]
    t[1:] = t[:2] @ t.T[::-1]
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_blocked_overlap_makes_a_copy_only_when_needed(monkeypatch, device):
    from minitorch_exp.tensor import count_kernels

    monkeypatch.setattr(cpu_numpy, "BLOCK", 4)
    a = np.arange(20.0)
    ref, t = both(a, device)
    with count_kernels(device) as k:
        t[...] = t * 2 + 1  # same layout: element by element is safe
    assert k["copy"] == 0
    ref[...] = ref * 2 + 1
    with count_kernels(device) as k:
        t[1:] = t[:-1] * 2
    ref[1:] = ref[:-1] * 2
    assert k["copy"] == 1
    assert_matches(t, ref, device=device)


@st.composite
def same_size_windows(draw, shape, count):
    """``count`` index keys selecting equally shaped windows of ``shape``, each at
    its own offset and direction, so they overlap in every possible way."""
    lengths = [draw(st.integers(1, n)) for n in shape]
    keys = []
    for _ in range(count):
        key = []
        for n, length in zip(shape, lengths):
            start = draw(st.integers(0, n - length))
            if draw(st.booleans()):
                key.append(slice(start, start + length))
            else:
                key.append(slice(start + length - 1, start - 1 if start else None, -1))
        keys.append(tuple(key))
    return keys


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), block=st.sampled_from(BLOCKS), saver=st.sampled_from(["=", "+=", "*="]))
def test_random_overlapping_reads_and_writes(device, data, block, saver):
    """Write ``f(src1, src2)`` into ``dst``, all three overlapping windows of one tensor."""
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple))
    base = np.random.default_rng(data.draw(st.integers(0, 1000))).normal(size=shape)
    ref, t = both(base, device)
    keys = data.draw(same_size_windows(shape, 3))
    (r0, v0), (r1, v1), (r2, v2) = [(ref[k], t[k]) for k in keys]
    if r1.ndim >= 2 and len(set(r1.shape)) == 1 and data.draw(st.booleans()):
        r1, v1 = r1.T, v1.T  # square windows: read one transposed
    expected = r1 * 0.5 - np.tanh(r2)
    with block_size(block):
        if saver == "=":
            r0[...] = expected
            v0[...] = v1 * 0.5 - v2.tanh()
        elif saver == "+=":
            r0 += expected
            v0 += v1 * 0.5 - v2.tanh()
        else:
            r0 *= expected
            v0 *= v1 * 0.5 - v2.tanh()
    assert_matches(t, ref, device=device)

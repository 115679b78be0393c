"""Gradients of many slices of one tensor are summed into one buffer.

Each slice's gradient is the input's shape with the slice written in; summed as full
tensors, the pieces of an ``unbind`` into T would cost T full-size passes in backward
(quadratic in T: an RNN's time steps). Backward instead writes each slice's gradient
into one zero-filled buffer it owns, so T pieces cost about T piece-sized passes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.node.views import chunk, split, unbind


@pytest.mark.parametrize("threshold", [None, 0])
def test_unbinding_t_pieces_costs_t_kernels_in_backward(threshold):
    steps = 32
    x = mt.tensor(np.random.default_rng(0).random((steps, 3, 5)), requires_grad=True)
    with mt.fusion(threshold=threshold):
        loss = sum((piece * float(i)).sum() for i, piece in enumerate(unbind(x, 0)))
        with mt.count_kernels() as ran:
            loss.backward()
    want = np.broadcast_to(np.arange(steps, dtype=float)[:, None, None], x.shape)
    np.testing.assert_array_equal(x.grad.numpy(), want)
    if threshold == 0:  # was 2T + 2: a full-size zero fill and sum per piece
        assert ran.total <= steps + 3, ran.counts


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 4),
       st.sampled_from(["unbind", "split", "chunk", "overlapping"]), st.booleans(),
       st.sampled_from([None, 0]))
def test_slice_gradients_add_up_as_numpy_says(rows, cols, size, how, dense_too, threshold):
    rng = np.random.default_rng(rows * 10 + cols)
    values = rng.standard_normal((rows, cols))
    x = mt.tensor(values, requires_grad=True)
    with mt.fusion(threshold=threshold):
        if how == "unbind":
            pieces, keys = unbind(x, 1), [np.s_[:, j] for j in range(cols)]
        elif how == "split":
            pieces = split(x, size, 0)
            keys = [np.s_[i:i + size] for i in range(0, rows, size)]
        elif how == "chunk":
            pieces = chunk(x, size, 1)
            step = -(-cols // size)
            keys = [np.s_[:, j:j + step] for j in range(0, cols, step)]
        else:  # two views that share elements: both gradients land on them
            pieces, keys = (x[: rows // 2 + 1], x[rows // 2:]), [np.s_[: rows // 2 + 1],
                                                                 np.s_[rows // 2:]]
        weights = [rng.standard_normal(p.shape) for p in pieces]
        loss = sum((p * mt.tensor(w)).sum() for p, w in zip(pieces, weights))
        if dense_too:
            loss = loss + (x * x).sum()
        loss.backward()
    want = 2 * values if dense_too else np.zeros_like(values)
    for key, w in zip(keys, weights):
        want[key] += w
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12, atol=1e-12)

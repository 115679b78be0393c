"""A reduction of a reduction's 0-d result backpropagates (issue #39's bug).

``x.sum().mean().backward()`` raised ``Sum.backward returned a gradient of shape ()
for an input of shape (...)``: the mean's rule, run on a 0-d NumPy array, returned a
NumPy scalar, which backward took for a constant that broadcasts anywhere. Every
pair of reductions, over all axes or one, on both sides of the fusion threshold,
against the exact gradient (and PyTorch where it is installed).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt

from ._helpers import compare_with_torch, leaf, nonempty_shapes, seeds, values

REDUCTIONS = ["sum", "mean", "amax", "amin"]


def _exact_grad(first: str, x: np.ndarray) -> np.ndarray:
    """d second(first(x)) / dx where the second reduces a 0-d value (an identity)."""
    if first == "sum":
        return np.ones_like(x)
    if first == "mean":
        return np.full_like(x, 1.0 / x.size)
    hit = x == (x.max() if first == "amax" else x.min())
    return hit / hit.sum()


@pytest.mark.parametrize("threshold", [0, None], ids=["fused", "eager"])
@settings(max_examples=20, deadline=None)
@given(shape=nonempty_shapes, seed=seeds, first=st.sampled_from(REDUCTIONS),
       second=st.sampled_from(REDUCTIONS))
def test_a_reduction_of_a_0d_reduction(threshold, shape, seed, first, second):
    old = mt.get_fusion_threshold()
    mt.set_fusion_threshold(threshold)
    try:
        x = leaf(values(np.random.default_rng(seed), shape))
        out = getattr(getattr(x, first)(), second)()
        out.backward()
    finally:
        mt.set_fusion_threshold(old)
    assert out.shape == () and x.grad.shape == shape
    np.testing.assert_allclose(x.grad.numpy(), _exact_grad(first, x.numpy()), rtol=1e-12)


def test_the_issue_s_example_and_a_0d_leaf():
    x = mt.randn(1120, 27, requires_grad=True)
    x.sum().mean().backward()
    assert np.array_equal(x.grad.numpy(), np.ones((1120, 27), np.float32))
    s = mt.tensor(2.0, requires_grad=True)
    (s.mean(0) * 3).sum().backward()
    assert s.grad.item() == 3.0


@pytest.mark.parametrize("first, second", [("sum", "mean"), ("mean", "mean"), ("amax", "sum")])
def test_a_reduction_of_a_0d_reduction_against_torch(first, second):
    pytest.importorskip("torch")
    x = leaf(values(np.random.default_rng(0), (3, 4)))
    compare_with_torch(lambda t: getattr(getattr(t, first)(), second)(),
                       lambda t: getattr(getattr(t, first)(), second)(), [x])

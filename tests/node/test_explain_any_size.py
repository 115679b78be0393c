"""explain() at any size (issue 38): an op the engine's policy computed at once shows
the Plan of its expression and names the evaluator that ran it, without setting the
fusion threshold to 0; above the threshold the same op is a fused kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor import eager


def plan_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if re.match(r"\s+(t\d+|result) = ", line)]


def test_a_four_element_op_shows_its_plan_and_the_numpy_evaluator():
    x = mt.tensor([-1.0, 2.0, -3.0, 4.0], requires_grad=True)
    y = (x * 2).relu()
    text = y.explain(parts=["plan", "code"])
    assert "computed at once (4 elements, below the fusion threshold of " in text
    assert "by the numpy evaluator of small work (tensor/eager.py)" in text
    assert plan_lines(text) == ["t0 = relu(in0) -> float32", "result = t0"]
    assert "Code of K1: NumPy" in text
    np.testing.assert_array_equal(y.numpy(), [0.0, 4.0, 0.0, 8.0])


def test_a_small_and_a_large_op_have_one_plan():
    """The same op below and above the threshold: one Plan, two evaluators."""
    small = mt.randn(4, requires_grad=True)
    large = mt.randn(eager.threshold() + 1, requires_grad=True)
    texts = [(v.tanh() * 2).explain(parts=["plan"]) for v in (small, large)]
    assert "computed at once" in texts[0] and "computed at once" not in texts[1]
    assert "will run when it is realized" in texts[1]
    assert plan_lines(texts[0]) == ["t0 = mul(in0, s0) -> float32", "result = t0"]
    assert plan_lines(texts[1])[-2:] == ["t1 = mul(t0, s0) -> float32", "result = t1"]


def test_a_small_reduction_is_weighed_by_its_input():
    x = mt.randn(3, 5, requires_grad=True)
    text = (x * x).sum(1).explain(parts=["plan"])
    assert text.splitlines()[1].startswith("computed eagerly: 15 elements")
    assert "computed at once (15 elements" in text
    assert "then sum over axes (1,) in the same pass" in text


@pytest.mark.parametrize("threshold", [0, None])
def test_explaining_computes_nothing(threshold):
    with mt.fusion(threshold=threshold if threshold is not None else eager.threshold()):
        x = mt.randn(4, requires_grad=True)
        y = x.exp()
        with mt.count_kernels() as k:
            y.explain(parts=["plan", "code"])
        assert k.total == 0

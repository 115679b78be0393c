"""explain() on a Node honours ``parts=``: each fusion group's Plan and code (issue 25).

Every op is kept lazy (the ``fuse_all`` fixture: fusion threshold 0), so each
elementwise op fuses as it does on tensors above the threshold.
"""

from __future__ import annotations

import re

import pytest

import minitorch_exp as mt
from minitorch_exp.node.explain import NODE_SECTIONS
from minitorch_exp.tensor.explain import explain as explain_expression

pytestmark = pytest.mark.usefixtures("fuse_all")


def _chain():
    x = mt.randn(64, 96)
    W = mt.randn(96, 80, requires_grad=True)  # noqa: N806
    return x, W, (x @ W).tanh() * 2 + 1


def test_plan_and_code_of_a_lazy_group():
    x, W, y = _chain()
    with mt.count_kernels() as k:
        text = mt.explain(y, parts=["plan", "code"])
    assert k.total == 0 and y.is_lazy  # explaining computes nothing
    assert text.startswith("explain y: add -> (64, 80) float32, lazy")
    assert "Group n2, n3, y -> y (will run when it is realized): 1 kernel" in text
    assert "Plan of K1 (3 instructions, 1 tensor input" in text
    assert "inputs: in0 = n1 (64, 80) float32" in text  # the matmul's node, by name
    assert "Code of K1" in text
    assert "Graph (" not in text and "Fusion (" not in text and "Expression of" not in text
    assert y.explain(parts=["plan", "code"]) == text


def test_the_plan_is_the_one_the_expression_gets():
    x, W, y = _chain()
    def instructions(text: str) -> list[str]:
        return [line.strip() for line in text.splitlines()
                if re.match(r"\s+(t\d+|result) = ", line)]

    node_plan = instructions(mt.explain(y, parts=["plan"]))
    assert node_plan == instructions(explain_expression(y.__exp__(), parts=["plan"]))
    assert node_plan[0] == "t0 = tanh(in0) -> float32" and len(node_plan) == 4


def test_code_for_another_device():
    x, W, y = _chain()
    text = mt.explain(y, parts=["code"], device="cuda")
    assert "CUDA C++" in text and "__global__" in text and "tanh(" in text


def test_a_group_that_ran_inside_a_reduction_shows_that_reduction():
    x, W, _ = _chain()
    loss = ((x @ W).tanh() ** 2).sum()
    text = loss.explain(parts=["plan"])
    assert "Group n2, n3, loss -> loss (already ran): 1 kernel" in text
    assert "pow(t0, s0)" in text and "then sum over axes (0, 1) in the same pass" in text


def test_default_parts_are_unchanged_and_unknown_parts_refused():
    x, W, y = _chain()
    text = y.explain()
    assert "Graph (4 levels of inputs)" in text and "Fusion (each group" in text
    assert "Expression of y" in text and "Plan of" not in text
    assert mt.explain(y, parts=NODE_SECTIONS).count("Plan of K1") == 1
    with pytest.raises(ValueError, match="unknown part 'cost' for a Node"):
        y.explain(parts=["cost"])


def test_a_lazy_node_in_no_group_is_its_own_kernel():
    a = mt.randn(64, 80, requires_grad=True)
    b = a * 3
    text = b.explain(parts=["plan"])
    assert "Group b -> b (will run when it is realized): 1 kernel" in text
    assert "t0 = mul(in0, s0)" in text

"""Backward kernels in MINITORCH_DEBUG output name the rules they compute and the
gradients they write (issue 25): ``(backward of Sum, pow, tanh)``, ``W.grad``, ``x.T``."""

from __future__ import annotations

import re

import pytest

import minitorch_exp as mt

pytestmark = pytest.mark.usefixtures("fuse_all")  # kernels of small tensors: fused


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("[mt #")]


def test_backward_kernels_name_their_rules_and_gradients(debug_level, capsys):
    W = mt.randn(96, 80, requires_grad=True)  # noqa: N806
    x = mt.randn(64, 96)
    loss = ((x @ W).tanh() ** 2).sum()
    debug_level(1)
    loss.backward()
    fused, blas = _lines(capsys.readouterr().out)
    assert fused.endswith("(backward of Sum, pow, tanh)")
    assert fused.split("  ")[2].startswith("grad(loss).expand(64, 80) * 2 * ")
    assert blas.endswith("(backward of MatMul)")
    assert " W.grad = (96, 80) float32  x.T @ #" in blas


def test_names_hold_across_a_training_step(debug_level, capsys):
    W = mt.randn(96, 80, requires_grad=True)  # noqa: N806
    x = mt.randn(64, 96)
    debug_level(1)
    for _ in range(2):
        ((x @ W).tanh() ** 2).sum().backward()
        with mt.no_grad():
            W -= 0.1 * W.grad
    lines = _lines(capsys.readouterr().out)
    grads = [line for line in lines if "(backward of MatMul)" in line]
    assert " W.grad = " in grads[0] and " W.grad += " in grads[1]
    assert sum(" W -= (96, 80) float32  0.1 * W.grad" in line for line in lines) == 2
    ones = [re.search(r"(\S+)\.expand\(64, 80\) \* 2", line).group(1)
            for line in lines if "(backward of Sum, pow, tanh)" in line]
    assert len(ones) == 2 and ones[0] != ones[1]  # two ones-gradients: two names
    assert all(name.startswith("tensor#") for name in ones)  # the loss has no name here


def test_forward_kernels_carry_no_backward_note(debug_level, capsys):
    W = mt.randn(96, 80, requires_grad=True)  # noqa: N806
    x = mt.randn(64, 96)
    debug_level(1)
    ((x @ W).tanh() ** 2).sum().backward()
    forward = _lines(capsys.readouterr().out)[:2]
    assert not any("backward of" in line for line in forward)

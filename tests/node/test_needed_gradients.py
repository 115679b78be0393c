"""Backward computes only the gradients an input needs (PyTorch's ``needs_input_grad``):
``x * 2.0`` needs none for 2.0, ``w * x`` none for the data ``x``. Rows whose
gradients each cost a pass (mul, div, sub) give them one by one (``OpDef.partials``);
the rest of the registry gives all at once (``derivative``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor.ops import OPS


@pytest.fixture(params=["at once", "fused"])
def mode(request):
    """Below the fusion threshold (arrays) and with every op kept lazy (expressions)."""
    if request.param == "fused":
        request.getfixturevalue("fuse_all")
    return request.param


def _spy(monkeypatch, name: str) -> list:
    """Record which operand's partial ``name``'s backward computes."""
    row, calls = OPS[name], []

    def counted(i, partial):
        def run(*args):
            calls.append(i)
            return partial(*args)
        return run

    partials = tuple(counted(i, p) for i, p in enumerate(row.partials))
    monkeypatch.setitem(OPS, name, dataclasses.replace(row, partials=partials))
    return calls


@pytest.mark.parametrize(("name", "build", "want"), [
    ("mul", lambda x, d: x * d, lambda x, d: d),
    ("mul", lambda x, d: d * x, lambda x, d: d),
    ("mul", lambda x, d: x * 2.5, lambda x, d: np.full_like(x, 2.5)),
    ("div", lambda x, d: x / d, lambda x, d: 1 / d),
    ("div", lambda x, d: d / x, lambda x, d: -d / x ** 2),
    ("sub", lambda x, d: d - x, lambda x, d: -np.ones_like(x)),
    ("sub", lambda x, d: 1.0 - x, lambda x, d: -np.ones_like(x)),
])
def test_only_the_input_that_requires_grad_gets_one(name, build, want, mode, monkeypatch):
    calls = _spy(monkeypatch, name)
    rng = np.random.default_rng(0)
    xa, da = rng.uniform(0.5, 2, (3, 4)), rng.uniform(0.5, 2, (3, 4))
    x = mt.tensor(xa, requires_grad=True)
    build(x, mt.tensor(da)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), want(xa, da), rtol=1e-12)
    assert len(calls) == 1  # the data's (or number's) gradient was never computed


def test_two_inputs_that_require_grad_get_both(mode):
    rng = np.random.default_rng(1)
    xa, ya = rng.uniform(0.5, 2, 5), rng.uniform(0.5, 2, 5)
    x, y = mt.tensor(xa, requires_grad=True), mt.tensor(ya, requires_grad=True)
    (x / y - x * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 / ya - ya, rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), -xa / ya ** 2 - xa, rtol=1e-12)


def test_gradients_asks_the_partials_only_for_what_is_needed():
    g, a, b = np.array([2.0]), np.array([3.0]), np.array([5.0])
    mul = OPS["mul"]
    assert mul.gradients(g, a * b, (a, b), (True, False)) == (g * b, None)
    assert mul.gradients(g, a * b, (a, b), (False, True)) == (None, g * a)
    assert mul.gradients(g, a * b, (a, b), (True, True)) == (g * b, g * a)
    assert OPS["exp"].partials is None  # one gradient: nothing to leave out


@pytest.mark.parametrize("name", [n for n, row in sorted(OPS.items()) if row.partials])
def test_a_row_s_partials_agree_with_its_derivative(name):
    """Rows that give both keep them one rule: every partial is its derivative's part."""
    row, rng = OPS[name], np.random.default_rng(2)
    operands = [rng.uniform(0.5, 2, (2, 3)) for _ in range(row.arity)]
    g, out = rng.standard_normal((2, 3)), row.numpy(*operands)
    together = row.derivative(g, out, *operands)
    alone = [p(g, out, *operands) for p in row.partials]
    for a, b in zip(together, alone, strict=True):
        np.testing.assert_array_equal(a, b)

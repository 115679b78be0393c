"""A gradient has its input's dtype, for every differentiable op of the registry.

A derivative rule that turns a Python number into a typed int64 or float64 operand
(``a ** (b - 1)`` with ``b`` a scalar) promotes a float32 gradient to float64, and
every product downstream then runs in float64 at half speed. Scalars must stay weak
through the rules, as they are in forward.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor.ops import OPS, REDUCTIONS

DIFFERENTIABLE = sorted(name for name, op in OPS.items()
                        if op.builtin and op.derivative is not None and op.result != "bool")


def _inputs(op, dtype, rng):
    arrays = [rng.uniform(0.5, 2.0, (3, 4)).astype(dtype) for _ in range(op.arity)]
    if op.result == "where":
        arrays[0] = arrays[0] > 1.25
    return [mt.tensor(a, requires_grad=a.dtype != np.bool_) for a in arrays]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_every_gradient_has_its_inputs_dtype(name, dtype):
    rng = np.random.default_rng(0)
    op = OPS[name]
    nodes = _inputs(op, dtype, rng)
    out = getattr(mt, name)(*nodes)
    assert out.dtype == np.dtype(dtype)
    out.sum().backward()
    for i, node in enumerate(nodes):
        if node.requires_grad and node.grad is not None:
            assert node.grad.dtype == np.dtype(dtype), (name, i, node.grad.dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("exponent", [2, 3, 0.5, 2.0, -1])
def test_power_by_a_python_number_keeps_float32(dtype, exponent):
    """The case that went wrong: the rule's ``b - 1`` must stay a weak scalar, so the
    matmul after it runs in the input's dtype."""
    x = mt.tensor(np.linspace(0.5, 2.0, 6).reshape(2, 3).astype(dtype), requires_grad=True)
    W = mt.tensor(np.ones((3, 2), dtype), requires_grad=True)
    with mt.count_kernels():
        ((x ** exponent) @ W).sum().backward()
    assert x.grad.dtype == np.dtype(dtype) and W.grad.dtype == np.dtype(dtype)
    expected = exponent * x.numpy().astype(np.float64) ** (exponent - 1) * 2
    assert np.allclose(x.grad.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(r for r, row in REDUCTIONS.items() if row.derivative))
def test_reduction_gradients_keep_the_dtype(name, dtype):
    x = mt.tensor(np.random.default_rng(1).normal(size=(3, 4)).astype(dtype),
                  requires_grad=True)
    (getattr(x, REDUCTIONS[name].function)(1) * 2.0).sum().backward()  # x.amax: x.max(1) pairs
    assert x.grad.dtype == np.dtype(dtype)

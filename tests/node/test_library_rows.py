"""The library-op registry (``LIBRARY``, tensor/library.py) and its one-body rules.

Each row is the op on every surface (``T.<name>``, ``mt.<name>``, the method, the
in-place form it declares) and, where it has a rule, one Function whose backward
runs as written on Tensors and, with ``create_graph``, on Nodes. Every
differentiable row has a gradgradcheck case here (a new row without one fails).
Values and first gradients of each op are tests/node/test_library_ops.py's; the
running product's second derivatives at zeros, tests/node/test_reduction_rows.py's
(with ``prod``'s).
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.node import library_ops
from minitorch_exp.node.node import Node
from minitorch_exp.tensor.library import LIBRARY

from ._helpers import leaf


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_every_row_is_on_every_surface(name):
    row = LIBRARY[name]
    assert getattr(T, name) is row.forward
    assert getattr(mt, name) is getattr(Node, name) is library_ops.FUNCTIONS[name]
    assert hasattr(Node, f"{name}_") == row.in_place
    if row.derivative is not None:
        cls = library_ops.LIBRARY_FUNCTIONS[name]
        assert cls.row is row and cls.backward_on_nodes


def _cases():
    rng = np.random.default_rng(11)
    v, src = leaf(rng.standard_normal((4, 5))), leaf(rng.standard_normal((2, 5)))
    big = leaf(rng.standard_normal((3, 6)))  # a src larger than its index
    index = mt.tensor(np.array([[0, 2, 1, 3, 0], [3, 1, 0, 0, 2]]))  # no repeat per column
    rows = mt.tensor(np.array([2, 0, 2]))
    return {
        "gather": (lambda v: mt.gather(v * v, 0, index).sin(), [v]),
        "scatter": (lambda v, s: mt.scatter(v * v, 0, index, s.exp()).sin(), [v, src]),
        "scatter_add": (lambda v, s: mt.scatter_add(v * v, 0, index, s[:, :5] ** 3).sin(),
                        [v, big]),
        "index_select": (lambda v: mt.index_select(v * v, 1, rows).sin(), [v]),
        "index_add": (lambda v, s: v.index_add(0, rows[:2], s.exp(), alpha=0.5).sin(),
                      [v, src]),
        "cumsum": (lambda v: mt.cumsum(v * v, 0).sin(), [v]),
        "cumprod": (lambda v: (v * 1.3).cumprod(1).sin(), [v]),
    }


def test_every_differentiable_row_has_a_case():
    assert set(_cases()) == {n for n, row in LIBRARY.items() if row.derivative is not None}


@pytest.mark.parametrize("name", sorted(_cases()))
def test_every_differentiable_row_passes_gradgradcheck(name):
    fn, args = _cases()[name]
    assert mt.autograd.gradcheck(fn, args)
    assert mt.autograd.gradgradcheck(fn, args)


def test_scatter_of_a_number_has_no_src_gradient():
    x = leaf(np.arange(6.0).reshape(2, 3))
    assert mt.autograd.gradgradcheck(lambda x: mt.scatter(x * x, 1, mt.tensor([[0], [2]]),
                                                          value=-1.0).sin(), [x])
    x.grad = None
    mt.scatter(x * x, 1, mt.tensor([[0], [2]]), value=-1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 2, 4], [6, 8, 0]])

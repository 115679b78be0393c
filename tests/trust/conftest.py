"""Fixtures shared by the trust tests."""

from __future__ import annotations

import pytest

from minitorch_exp.tensor import register_op, unregister_op
from minitorch_exp.tensor.ops import OPS


@pytest.fixture
def user_op():
    """``user_op(fn)`` registers ``fn`` as a one-operand user op (its CUDA form
    ``{0} * 2``) under a fresh name, returned; every one is unregistered afterwards."""
    names = []

    def register(fn):
        name = f"user_{len(names)}_{fn.__name__.strip('_')}"
        register_op(name, fn, "({0} * 2)")
        names.append(name)
        return name

    yield register
    for name in names:
        if name in OPS:
            unregister_op(name)

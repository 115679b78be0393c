"""register_op refuses names and CUDA snippets that could change generated source."""

from __future__ import annotations

import numpy as np
import pytest

from minitorch_exp.tensor import register_op
from minitorch_exp.tensor.ops import OPS, validate_cuda_expr


def _twice(x, out=None):
    return np.multiply(x, 2, out=out)


@pytest.mark.parametrize("name", ["a\n", "dbl\n", "ok\r", " a", "a b", "A", "_a", "a" * 41])
def test_names_must_match_whole(name):
    with pytest.raises(ValueError, match="op name"):
        register_op(name, _twice, "({0} * 2)")
    assert name not in OPS


@pytest.mark.parametrize("snippet", [
    "{0} /* x */", "{0} // x", "{0} */ 2", "{0}++", "++{0}", "{0}--", "--{0}",
    "({0}, {0})", "{0}, 2", "fmax(({0}, 1), 2)",
])
def test_comments_increments_and_comma_operators_are_refused(snippet):
    with pytest.raises(ValueError, match="cuda expression"):
        validate_cuda_expr(snippet, 1)


@pytest.mark.parametrize("snippet", [
    "fmax({0}, {1})", "pow({0}, ({T})2)", "({0} - -{1})", "{0} / {1}", "fmin(fmax({0}, 0), {1})",
])
def test_ordinary_expressions_still_pass(snippet):
    assert validate_cuda_expr(snippet, 2) == snippet


SCALE = 2.0


def _scaled(x, out=None):
    return x * SCALE  # ignores out=: allowed (the result is copied in)


def _make_closure_op():
    factor = 2.0

    def scaled(x, out=None):
        return x * factor

    def change(value):
        nonlocal factor
        factor = value
    return scaled, change


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_a_user_op_sees_globals_as_they_were_at_registration(backend):
    """numba freezes a global's value when it compiles; NumPy would read it on every
    call. Both now use the value from registration time."""
    global SCALE
    from minitorch_exp.tensor import apply_op, from_numpy, unregister_op, using_cpu_backend
    register_op("scaled_global", _scaled, "({0} * 2)")
    scaled, change = _make_closure_op()
    register_op("scaled_closure", scaled, "({0} * 2)")
    x = from_numpy(np.arange(5.0))
    try:
        SCALE = 3.0
        change(3.0)
        with using_cpu_backend(backend):
            for name in ("scaled_global", "scaled_closure"):
                np.testing.assert_array_equal(apply_op(name, x).numpy(), np.arange(5.0) * 2)
    finally:
        SCALE = 2.0
        unregister_op("scaled_global")
        unregister_op("scaled_closure")

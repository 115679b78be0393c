"""User-defined elementwise ops: registered like built-ins, fused with them, validated."""

from __future__ import annotations

import numpy as np
import pytest

from minitorch_exp.tensor import (
    apply_op,
    count_kernels,
    cpu_numpy,
    from_numpy,
    register_op,
    relu,
    unregister_op,
)
from minitorch_exp.tensor.ops import OPS

from ..devices import DEVICES, on_device
from .strategies import assert_matches


@pytest.fixture
def user_ops():
    """Register ops through ``add(...)``; every one is unregistered after the test."""
    names = []

    def add(name, fn, cuda, **kw):
        op = register_op(name, fn, cuda, **kw)
        names.append(name)
        return op

    yield add
    for name in names:
        if name in OPS:
            unregister_op(name)


# User functions are written the way register_op asks: they honour ``out=`` for
# the NumPy evaluator, and on scalars (``out`` left out) they are plain
# arithmetic, so the compiled CPU evaluator can compile them too.

def _softplus(x, out=None):
    r = np.log1p(np.exp(x))
    if out is None:
        return r
    out[...] = r
    return out


def _sqdiff(a, b, out=None):
    r = (a - b) * (a - b)
    if out is None:
        return r
    out[...] = r
    return out


def _fma(a, b, c, out=None):
    r = a * b + c
    if out is None:
        return r
    out[...] = r
    return out


def _double(x, out=None):
    if out is None:
        return x * 2
    out[...] = x * 2
    return out


def _positive(x, out=None):
    if out is None:
        return x > 0
    out[...] = x > 0
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_user_ops_match_numpy_and_fuse_with_builtins(user_ops, device):
    user_ops("t_softplus", _softplus, "log1p(exp({0}))", result="float")
    user_ops("t_sqdiff", _sqdiff, "(({0} - {1}) * ({0} - {1}))", arity=2)
    user_ops("t_fma", _fma, "({0} * {1} + {2})", arity=3)
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 4)), rng.normal(size=(4,)), rng.normal(size=(3, 1))
    ta, tb, tc = (on_device(a, device), on_device(b[::-1].copy()[::-1], device),
                  on_device(c, device))
    e = apply_op("t_sqdiff", apply_op("t_softplus", ta), tb) * 2 + relu(tc)
    ref = np.square(np.log1p(np.exp(a)) - b) * 2 + np.maximum(c, 0)
    dst = on_device(np.zeros((3, 4)), device)
    with count_kernels(device) as k:
        dst[...] = e
    assert k["fused"] == 1 and k.total == 1
    assert_matches(dst, ref, device=device)
    assert_matches(apply_op("t_fma", ta, tb, 0.5), a * b + 0.5, device=device)
    assert_matches(apply_op("t_fma", ta.T, tc.T, tb[:, None]).eval(), a.T * c.T + b[:, None],
                   device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_user_op_result_dtypes(user_ops, device):
    user_ops("t_soft", _softplus, "log1p(exp({0}))", result="float")
    user_ops("t_double", _double, "({0} * 2)")
    user_ops("t_pos", _positive, "({0} > 0)", result="bool")
    i = np.arange(-2, 3, dtype=np.int32)
    ti = on_device(i, device)
    assert_matches(apply_op("t_soft", ti), np.log1p(np.exp(i)), device=device)
    assert_matches(apply_op("t_double", ti), i * 2, device=device)
    assert_matches(apply_op("t_pos", ti), i > 0, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_user_op_in_blocked_path_and_in_place(user_ops, monkeypatch, device):
    """A user function that is not safe to run in place (it writes ``out`` twice)."""

    def twice(x, out=None):
        if out is None:
            return x * 2
        out[...] = 0  # clears out before reading x: wrong if out were x
        out += x * 2
        return out

    user_ops("t_twice", twice, "({0} * 2)")
    monkeypatch.setattr(cpu_numpy, "BLOCK", 3)
    a = np.arange(10.0)
    t = on_device(a.copy(), device)
    t[...] = apply_op("t_twice", apply_op("t_twice", t) + 1)
    np.testing.assert_array_equal(t.numpy(), (a * 2 + 1) * 2)
    t[...] = apply_op("t_twice", t)  # its output is its own input
    np.testing.assert_array_equal(t.numpy(), (a * 2 + 1) * 4)
    monkeypatch.setattr(cpu_numpy, "BLOCK", 1 << 16)
    t[...] = apply_op("t_twice", t)
    np.testing.assert_array_equal(t.numpy(), (a * 2 + 1) * 8)


def _plus_one(x, out=None):
    if out is None:
        return x + 1
    out[...] = x + 1
    return out


def _minus_one(x, out=None):
    if out is None:
        return x - 1
    out[...] = x - 1
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_reregistering_a_name_uses_the_new_function(user_ops, device):
    a = np.arange(4.0)
    user_ops("t_changing", _plus_one, "({0} + 1)")
    assert_matches(apply_op("t_changing", on_device(a, device)) * 3, (a + 1) * 3, device=device)
    unregister_op("t_changing")
    user_ops("t_changing", _minus_one, "({0} - 1)")
    assert_matches(apply_op("t_changing", on_device(a, device)) * 3, (a - 1) * 3, device=device)


@pytest.mark.parametrize("name", ["Bad", "1x", "", "a-b", "x" * 41, "for", "with space",
                                  "add", "relu", "x;y", 5, None])
def test_invalid_names_are_refused(name):
    with pytest.raises(ValueError) as err:
        register_op(name, _softplus, "exp({0})")
    assert repr(name) in str(err.value)
    assert name not in OPS or OPS[name].builtin


@pytest.mark.parametrize("snippet", [
    'x); system("rm"); (',
    '{0}); system("rm -rf /"); (',
    "#include <stdlib.h>",
    "{0} }",
    "{ {0} }",
    "{0}; return",
    "{0} /* comment */",
    "{0} // comment",
    "printf({0})",
    "system({0})",
    "__syncthreads()",
    "{0} + x",
    "{1}",
    "'a'",
    '"s"',
    "({0}",
    "{0})",
    "{0} \\\n + 1",
    "{0}[1]",
    "*{0} = 1",
    "{0} = 1",
    "asm(\"trap;\")",
    "",
])
def test_injection_in_cuda_snippets_is_refused(snippet):
    with pytest.raises(ValueError, match="cuda expression"):
        register_op("t_evil", _softplus, snippet)
    assert "t_evil" not in OPS


@pytest.mark.parametrize("snippet", ["exp({0})", "({0} > ({T})0 ? {0} : ({T})0)",
                                     "fmaxf({0}, 1.5e-3f)", "pow({0}, 2.0)", "-{0} * .5"])
def test_ordinary_cuda_snippets_are_accepted(user_ops, snippet):
    op = user_ops("t_fine", _softplus, snippet)
    assert op.cuda == snippet and OPS["t_fine"] is op and not op.builtin


def test_other_registration_errors(user_ops):
    with pytest.raises(ValueError, match="arity"):
        register_op("t_bad", _softplus, "exp({0})", arity=4)
    with pytest.raises(ValueError, match="result"):
        register_op("t_bad", _softplus, "exp({0})", result="where")
    with pytest.raises(TypeError, match="callable"):
        register_op("t_bad", "np.exp", "exp({0})")
    with pytest.raises(ValueError, match="py templates"):
        register_op("t_bad", _softplus, "exp({0})", py="math.exp({0})")
    assert "t_bad" not in OPS
    with pytest.raises(ValueError, match="'add'"):
        unregister_op("add")
    with pytest.raises(ValueError, match="'t_never'"):
        unregister_op("t_never")
    user_ops("t_once", _softplus, "exp({0})")
    with pytest.raises(ValueError, match="already registered"):
        register_op("t_once", _softplus, "exp({0})")
    with pytest.raises(TypeError, match="t_once takes 1"):
        apply_op("t_once", from_numpy(np.ones(2)), from_numpy(np.ones(2)))

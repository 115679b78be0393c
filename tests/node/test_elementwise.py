"""Elementwise ops: finite differences (float64) and PyTorch, on broadcast and strided inputs.

One table lists every differentiable elementwise op with its domain; each entry
gets a gradcheck and a PyTorch comparison over hypothesis-drawn shapes and
layouts (contiguous, transposed, sliced with a gap, reversed).
"""

from __future__ import annotations

import contextlib
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.tensor.backends import cpu_backend

from ..devices import DEVICES, tolerance
from ._helpers import (
    broadcast_shapes,
    compare_with_torch,
    layouts,
    leaf,
    seeds,
    shapes,
    values,
)

# name -> (minitorch fn, torch fn, domain of each operand)
UNARY = {
    "neg": (lambda x: -x, lambda x: -x, "real"),
    "abs": (lambda x: abs(x), lambda x: abs(x), "real"),
    "abs_fn": (lambda x: mt.abs(x), lambda x: x.abs(), "real"),
    "exp": (lambda x: x.exp(), lambda x: x.exp(), "real"),
    "log": (lambda x: x.log(), lambda x: x.log(), "positive"),
    "sqrt": (lambda x: mt.sqrt(x), lambda x: x.sqrt(), "positive"),
    "tanh": (lambda x: x.tanh(), lambda x: x.tanh(), "real"),
    "sigmoid": (lambda x: mt.sigmoid(x), lambda x: x.sigmoid(), "real"),
    "relu": (lambda x: x.relu(), lambda x: x.relu(), "real"),
    "scalar_add": (lambda x: x + 2, lambda x: x + 2, "real"),
    "scalar_radd": (lambda x: 2.5 + x, lambda x: 2.5 + x, "real"),
    "scalar_rsub": (lambda x: 2 - x, lambda x: 2 - x, "real"),
    "scalar_mul": (lambda x: x * -1.5, lambda x: x * -1.5, "real"),
    "scalar_rdiv": (lambda x: 2 / x, lambda x: 2 / x, "real"),
    "scalar_div": (lambda x: x / 4, lambda x: x / 4, "real"),
    "square": (lambda x: x ** 2, lambda x: x ** 2, "real"),
    "cube": (lambda x: x ** 3.0, lambda x: x ** 3.0, "real"),
    "rpow": (lambda x: 2 ** x, lambda x: 2 ** x, "real"),
    "fractional_pow": (lambda x: x ** 0.5, lambda x: x ** 0.5, "positive"),
}

BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, "real", "real"),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, "real", "real"),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, "real", "real"),
    "div": (lambda a, b: a / b, lambda a, b: a / b, "real", "real"),
    "pow": (lambda a, b: a ** b, lambda a, b: a ** b, "positive", "real"),
    "maximum": (mt.maximum, lambda a, b: _torch().maximum(a, b), "real", "real"),
    "minimum": (mt.minimum, lambda a, b: _torch().minimum(a, b), "real", "real"),
}


def _torch():
    import torch
    return torch


def _gradcheck(fn, *nodes):
    assert mt.gradcheck(fn, nodes)


# ---- unary -------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=20, deadline=None)
@given(shape=shapes, layout=layouts, seed=seeds)
def test_unary_gradcheck(device, name, shape, layout, seed):
    fn, _, domain = UNARY[name]
    x = leaf(values(np.random.default_rng(seed), shape, domain), layout, device=device)
    _gradcheck(fn, x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=20, deadline=None)
@given(shape=shapes, layout=layouts, seed=seeds)
def test_unary_matches_torch(device, name, shape, layout, seed):
    pytest.importorskip("torch")
    fn, tfn, domain = UNARY[name]
    x = leaf(values(np.random.default_rng(seed), shape, domain), layout, device=device)
    compare_with_torch(fn, tfn, [x], seed=seed)


# ---- binary, with broadcasting -------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=25, deadline=None)
@given(shp=broadcast_shapes(), la=layouts, lb=layouts, seed=seeds)
def test_binary_gradcheck(device, name, shp, la, lb, seed):
    fn, _, da, db = BINARY[name]
    rng = np.random.default_rng(seed)
    a = leaf(values(rng, shp[0], da), la, device=device)
    b = leaf(values(rng, shp[1], db), lb, device=device)
    _gradcheck(fn, a, b)
    assert a.grad.shape == a.shape and b.grad.shape == b.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=25, deadline=None)
@given(shp=broadcast_shapes(), la=layouts, lb=layouts, seed=seeds)
def test_binary_matches_torch(device, name, shp, la, lb, seed):
    pytest.importorskip("torch")
    fn, tfn, da, db = BINARY[name]
    rng = np.random.default_rng(seed)
    a = leaf(values(rng, shp[0], da), la, device=device)
    b = leaf(values(rng, shp[1], db), lb, device=device)
    compare_with_torch(fn, tfn, [a, b], seed=seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_only_one_side_requires_grad(device, name):
    fn, _, da, db = BINARY[name]
    rng = np.random.default_rng(1)
    a = leaf(values(rng, (2, 3), da), device=device)
    b = leaf(values(rng, (3,), db), requires_grad=False, device=device)
    _gradcheck(fn, a, b)
    assert b.grad is None


@pytest.mark.parametrize("device", DEVICES)
def test_maximum_minimum_share_ties_evenly_like_torch(device):
    torch = pytest.importorskip("torch")
    a = leaf([1.0, 2.0, 3.0, -1.0], device=device)
    b = leaf([1.0, 0.0, 3.0, 5.0], device=device)
    compare_with_torch(mt.maximum, torch.maximum, [a, b])
    np.testing.assert_array_equal(a.grad.numpy() > 0, [True, True, True, False])
    compare_with_torch(mt.minimum, torch.minimum, [a, b])


# ---- where and clip ------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(shp=broadcast_shapes(3), la=layouts, lb=layouts, seed=seeds)
def test_where_gradcheck_and_torch(device, shp, la, lb, seed):
    rng = np.random.default_rng(seed)
    cond = mt.tensor(rng.random(shp[0]) < 0.5, device=device)
    a = leaf(values(rng, shp[1]), la, device=device)
    b = leaf(values(rng, shp[2]), lb, device=device)
    _gradcheck(lambda a, b: mt.where(cond, a, b), a, b)
    assert cond.grad is None
    torch = pytest.importorskip("torch")
    tcond = torch.tensor(cond.numpy())
    compare_with_torch(lambda a, b: mt.where(cond, a, b),
                       lambda a, b: torch.where(tcond, a, b), [a, b], seed=seed)


@pytest.mark.parametrize("device", DEVICES)
def test_where_condition_built_from_the_inputs(device):
    torch = pytest.importorskip("torch")
    x = leaf([-2.0, -0.5, 0.5, 2.0], device=device)
    compare_with_torch(lambda x: mt.where(x > 0, x * x, -x),
                       lambda x: torch.where(x > 0, x * x, -x), [x])


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(shape=shapes, layout=layouts, seed=seeds)
def test_clip_scalar_bounds(device, shape, layout, seed):
    x = leaf(values(np.random.default_rng(seed), shape), layout, device=device)
    _gradcheck(lambda x: mt.clip(x, -0.5, 0.7), x)
    _gradcheck(lambda x: x.clip(-0.5, 0.7), x)
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda x: mt.clip(x, -0.5, 0.7), lambda x: torch.clamp(x, -0.5, 0.7), [x])


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(shp=broadcast_shapes(3), seed=seeds)
def test_clip_tensor_bounds_get_gradients(device, shp, seed):
    """Bounds that require grad receive it where they bind, as in torch.clamp."""
    rng = np.random.default_rng(seed)
    x = leaf(values(rng, np.broadcast_shapes(*shp)) * 2, device=device)  # torch.clamp: x's shape
    lo = leaf(-values(rng, shp[1], "positive"), device=device)
    hi = leaf(values(rng, shp[2], "positive"), device=device)
    _gradcheck(mt.clip, x, lo, hi)
    torch = pytest.importorskip("torch")
    compare_with_torch(mt.clip, torch.clamp, [x, lo, hi], seed=seed)


@pytest.mark.parametrize("reverse", [False, True])
def test_numpy_operands_broadcast_and_are_copied(reverse):
    x = leaf([1.0, 2.0, 3.0])
    arr = np.array([[1.0], [2.0]])
    y = arr * x if reverse else x * arr
    assert y.shape == (2, 3)
    arr[...] = 100  # the lazy product must not see this
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [2, 4, 6]])
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0, 3.0])
    cond = np.array([[True], [False]])
    x.grad = None
    mt.where(cond, x, 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])


# ---- comparisons: values, but no gradient and no graph ---------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_record_no_graph(device, cmp):
    import operator
    f = getattr(operator, cmp)
    a = leaf([1.0, 2.0, 3.0], device=device)
    b = leaf([3.0, 2.0, 1.0], device=device)
    out = f(a, b)
    np.testing.assert_array_equal(out.numpy(), f(a.numpy(), b.numpy()))
    assert out.dtype == mt.bool_
    assert not out.requires_grad and out.grad_fn is None
    scalar = f(a, 2.0)
    assert not scalar.requires_grad and scalar.grad_fn is None
    np.testing.assert_array_equal(scalar.numpy(), f(a.numpy(), 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_sign_has_zero_gradient(device):
    x = leaf([-2.0, 0.5, 3.0], device=device)
    (mt.sign(x) * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, 1.0, 1.0])


def test_int_tensors_cannot_require_grad():
    with pytest.raises(TypeError, match="float"):
        mt.tensor([1, 2, 3], requires_grad=True)


# ---- user-defined ops --------------------------------------------------------------

@pytest.fixture(scope="module")
def user_ops():
    """Register a unary and a binary user op for one test, and remove them after."""
    mt.register_op("cube_u", lambda x, out=None: np.multiply(x * x, x, out=out),
                   "({0} * {0} * {0})", arity=1,
                   derivative=lambda g, out, a: (g * 3 * a * a,))
    mt.register_op("hypot_u", lambda a, b, out=None: np.sqrt(a * a + b * b, out=out),
                   "sqrt({0} * {0} + {1} * {1})", arity=2, result="float",
                   derivative=lambda g, out, a, b: (g * a / out, g * b / out))
    mt.register_op("noderiv_u", lambda x, out=None: np.multiply(x, 2, out=out), "({0} * 2)")
    yield
    for name in ("cube_u", "hypot_u", "noderiv_u"):
        mt.unregister_op(name)


def fallback_warning(name: str) -> str:
    """The warning of a NumPy-style user op (its numpy_fn takes ``out=``, which numba
    cannot compile for scalars): once per new Plan, which then runs on NumPy."""
    return rf"user op '{name}': numba could not compile its numpy_fn"


def warns_fallback(name: str):
    """``pytest.warns`` for a Plan with user op ``name`` built for the first time
    (only the numba evaluator compiles, so only it warns)."""
    if cpu_backend() != "numba":
        return contextlib.nullcontext()
    return pytest.warns(RuntimeWarning, match=fallback_warning(name))


@contextlib.contextmanager
def may_fall_back(*names: str):
    """Like ``warns_fallback`` for code that may or may not build a new Plan (one
    hypothesis example among many): the fallback warnings of ``names`` are expected
    any number of times; every other warning still reaches pytest."""
    expected = re.compile("|".join(fallback_warning(name) for name in names))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if not (issubclass(w.category, RuntimeWarning) and expected.match(str(w.message))):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=20, deadline=None)
@given(shp=broadcast_shapes(), la=layouts, lb=layouts, seed=seeds)
def test_user_op_gradcheck_and_torch(user_ops, device, shp, la, lb, seed):
    rng = np.random.default_rng(seed)
    a = leaf(values(rng, shp[0]), la, device=device)
    b = leaf(values(rng, shp[1]), lb, device=device)
    with may_fall_back("cube_u", "hypot_u"):
        _gradcheck(lambda a: mt.op("cube_u", a), a)
        _gradcheck(lambda a, b: mt.op("hypot_u", a, b), a, b)
        _gradcheck(lambda a, b: mt.op("cube_u", a * b).tanh() + a, a, b)  # fused with built-ins
    torch = pytest.importorskip("torch")
    with may_fall_back("cube_u", "hypot_u"):
        compare_with_torch(lambda a, b: mt.op("hypot_u", a, b) * mt.op("cube_u", a),
                           lambda a, b: torch.hypot(a, b) * a ** 3, [a, b], seed=seed)


@pytest.mark.usefixtures("fuse_all")  # numba compiles (and falls back on) fused ops only
@pytest.mark.parametrize("device", DEVICES)
def test_user_op_without_derivative_fails_at_backward(user_ops, device):
    x = leaf([1.0, 2.0], device=device)
    with warns_fallback("noderiv_u") if device == "cpu" else contextlib.nullcontext():
        y = mt.op("noderiv_u", x)
        np.testing.assert_allclose(y.numpy(), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="noderiv_u.*derivative"), may_fall_back("noderiv_u"):
        y.sum().backward()


@pytest.mark.usefixtures("fuse_all")  # numba compiles (and falls back on) fused ops only
def test_user_op_is_gone_after_unregister():
    mt.register_op("tmp_u", lambda x, out=None: np.add(x, 1, out=out), "({0} + 1)",
                   derivative=lambda g, out, a: (g,))
    try:
        x = leaf([1.0])
        with warns_fallback("tmp_u"):
            mt.op("tmp_u", x).sum().backward()
        assert x.grad.item() == 1.0
    finally:
        mt.unregister_op("tmp_u")
    with pytest.raises(KeyError):
        mt.op("tmp_u", leaf([1.0]))


# ---- dtypes ------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_float32_gradients_stay_float32(device):
    x = mt.tensor([1.0, 2.0], requires_grad=True, device=device)
    (x * 3).sum().backward()
    assert x.grad.dtype == mt.float32 and x.grad.device == x.device


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 100))
def test_float32_close_to_torch(device, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    a = mt.tensor(values(rng, (3, 4)), dtype=mt.float32, requires_grad=True, device=device)
    b = mt.tensor(values(rng, (4,)), dtype=mt.float32, requires_grad=True, device=device)
    ta = torch.tensor(a.numpy(), requires_grad=True)
    tb = torch.tensor(b.numpy(), requires_grad=True)
    out = ((a * b).tanh() + b.sigmoid() / a).sum()
    ref = ((ta * tb).tanh() + tb.sigmoid() / ta).sum()
    out.backward()
    ref.backward()
    value_rtol, _ = tolerance(device, 1e-5, 0.0)
    rtol, atol = tolerance(device, 1e-4, 1e-5)
    np.testing.assert_allclose(out.item(), ref.item(), rtol=value_rtol)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=rtol, atol=atol)

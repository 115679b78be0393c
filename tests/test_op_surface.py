"""The op surface comes from the registry, and only from it.

Every built-in row of ``OPS`` and every row of ``REDUCTIONS`` (tensor/ops.py) is an
Exp method, a ``T.<name>`` function, a Node method and an ``mt.<name>`` function; each
of the four computes what NumPy computes, on a strided operand and broadcast ones, and
where the row has a derivative, backward agrees with finite differences (float64).
A row added to the registry is checked here with no other edit (docs/adding_an_op.md).
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.tensor.ops import OPS, REDUCTIONS, define_builtin

BUILTINS = sorted(name for name, op in OPS.items() if op.builtin)
OPERATORS = sorted(name for name in BUILTINS if OPS[name].operator)
DIFFERENTIABLE = sorted(name for name in BUILTINS
                        if OPS[name].derivative is not None and OPS[name].result != "bool")


def operands(op, seed: int = 0) -> list[np.ndarray]:
    """float64 operands where every built-in is smooth (positive, distinct): the first
    (3, 4) seen through a transpose, the others rows (4,) that broadcast; a where's
    condition is bool."""
    rng = np.random.default_rng(seed)
    first = rng.uniform(0.5, 2.0, (4, 3)).T
    arrays = [first] + [rng.uniform(0.5, 2.0, 4) for _ in range(op.arity - 1)]
    if op.result == "where":
        arrays[0] = first > 1.25
    return arrays


def call_method(name: str, args):
    """``args[0].<name>(*args[1:])``; ``where`` is PyTorch's ``x.where(condition, y)``."""
    if name == "where":
        cond, x, y = args
        return x.where(cond, y)
    return getattr(args[0], name)(*args[1:])


def surfaces(name: str, arrays) -> dict:
    tensors = [T.from_numpy(a) for a in arrays]
    nodes = [mt.from_numpy(a) for a in arrays]
    return {
        "Exp method": call_method(name, tensors),
        "lazy Exp method": call_method(name, [tensors[0] * 1.0] + tensors[1:]),
        "T function": getattr(T, name)(*tensors),
        "Node method": call_method(name, nodes),
        "mt function": getattr(mt, name)(*nodes),
    }


def check_values(results: dict, expected) -> None:
    expected = np.asarray(expected)
    for surface, value in results.items():
        got = value.numpy()
        assert got.dtype == expected.dtype, surface
        np.testing.assert_allclose(got, expected, rtol=1e-12, err_msg=surface)


def test_abs_is_a_tensor_level_function():
    a = np.array([[-1.5, 0.0], [2.0, -3.0]])
    np.testing.assert_array_equal(T.abs(T.from_numpy(a)).numpy(), np.abs(a))
    assert "abs" in T.__all__


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_op_is_on_every_surface_and_matches_numpy(name):
    op = OPS[name]
    arrays = operands(op)
    check_values(surfaces(name, arrays), op.numpy(*arrays))
    assert name in T.__all__ and name in mt.__all__


@pytest.mark.parametrize("name", OPERATORS)
def test_python_operators_come_from_the_rows(name):
    op = OPS[name]
    arrays = operands(op)
    dunder = f"__{op.operator}__"
    for make in (T.from_numpy, mt.from_numpy):
        args = [make(a) for a in arrays]
        check_values({dunder: getattr(type(args[0]), dunder)(*args)}, op.numpy(*arrays))
        if op.reflected:
            x = args[0]
            check_values({f"__r{op.operator}__": getattr(type(x), f"__r{op.operator}__")(x, 1.5)},
                         op.numpy(1.5, arrays[0]))


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradients_of_every_differentiable_op_match_finite_differences(name):
    arrays = operands(OPS[name], seed=1)
    nodes = [mt.from_numpy(a.copy(), requires_grad=a.dtype.kind == "f") for a in arrays]
    assert mt.gradcheck(getattr(mt, name), nodes)
    assert mt.gradcheck(lambda *xs: call_method(name, xs), nodes)


def _axes(r):
    return [None, 1, -2] if r.one_axis else [None, 1, (0, 1)]


REDUCTION_CASES = [(name, axis) for name in sorted(REDUCTIONS) for axis in _axes(REDUCTIONS[name])]


@pytest.mark.parametrize(("name", "axis"), REDUCTION_CASES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_every_reduction_is_on_every_surface_and_matches_numpy(name, axis, keepdims):
    r = REDUCTIONS[name]
    a = np.random.default_rng(2).uniform(-2.0, 2.0, (4, 3)).T
    t, n = T.from_numpy(a), mt.from_numpy(a)
    results = {
        "Exp method": getattr(t, r.name)(axis, keepdims),
        "lazy Exp method": getattr(t * 1.0, r.name)(axis, keepdims=keepdims),
        "T function": getattr(T, r.function)(t, axis, keepdims),
        # x.max(dim) and x.min(dim) are PyTorch's (values, indices) (node/pytorch.py): the
        # row's Node method is under its function's name too (x.amax)
        "Node method": getattr(n, r.function)(axis, keepdims),
        "mt function": getattr(mt, r.function)(n, axis=axis, keepdims=keepdims),
    }
    check_values(results, r.numpy(a, axis=axis, keepdims=keepdims))
    assert r.function in T.__all__ and r.function in mt.__all__


@pytest.mark.parametrize("name", sorted(n for n, r in REDUCTIONS.items() if r.derivative))
def test_gradients_of_every_differentiable_reduction_match_finite_differences(name):
    r = REDUCTIONS[name]
    x = mt.from_numpy(np.random.default_rng(3).uniform(-2.0, 2.0, (4, 3)).T.copy(),
                      requires_grad=True)
    for axis in _axes(r):
        assert mt.gradcheck(lambda x, axis=axis: getattr(mt, r.function)(x, axis), [x])
        assert mt.gradcheck(lambda x, axis=axis: getattr(x, r.function)(axis, keepdims=True),
                            [x])


def test_reductions_without_a_derivative_give_values_without_a_graph():
    for r in REDUCTIONS.values():
        if r.derivative is None:
            x = mt.randn(3, 4, dtype=mt.float64, requires_grad=True)
            out = getattr(x, r.name)(1)
            assert out.grad_fn is None and not out.requires_grad


def test_generated_exp_methods_bind_their_row():
    """As cheap as the hand-written ``Map(OPS["exp"], (self,))``: no lookup by name."""
    for name in BUILTINS:
        names = getattr(T.Exp, name).__code__.co_names
        assert "OPS" not in names and "apply_op" not in names, name
    for r in REDUCTIONS.values():
        assert "REDUCTIONS" not in getattr(T.Exp, r.name).__code__.co_names


def test_generated_functions_keep_their_signatures():
    import inspect
    assert str(inspect.signature(T.where)) == "(cond, a, b) -> 'Exp'"
    assert str(inspect.signature(T.clip)) == "(x, lo, hi) -> 'Exp'"
    assert str(inspect.signature(mt.maximum)) == "(a, b) -> 'Node'"
    assert str(inspect.signature(mt.exp)) == "(x) -> 'Node'"
    assert T.where(cond=T.tensor([True, False]), a=1.0, b=2.0).tolist() == [1.0, 2.0]
    assert str(inspect.signature(mt.sum)) == \
        "(x: 'Node', axis=None, keepdims: 'bool' = False, *, dtype=None) -> 'Node'"


def test_a_row_defined_twice_is_refused():
    with pytest.raises(ValueError, match="already"):
        define_builtin("exp", 1, np.exp, "exp({0})", "math.exp({0})", result="float")


CALLS = ("math.", "np.", "_log(", "_sqrt(", "**")  # a kernel's call of a function


@pytest.mark.parametrize("name", BUILTINS)
def test_a_row_whose_kernel_calls_a_function_states_its_cost(name):
    """Which evaluator runs a Plan follows its rows' ``cost_ns``: a row whose compiled
    form is a function call per element (a libm call LLVM cannot vectorize here) must
    say what it costs, or it would silently get arithmetic's (docs/cpu_kernels.md)."""
    op = OPS[name]
    if any(call in op.py for call in CALLS):
        assert op.cost_ns is not None, f"{name}: state cost_ns (bench_update.py --ops)"
    if op.cost_ns is not None:
        kernel, numpy = op.cost_ns
        assert kernel > 0 and numpy > 0

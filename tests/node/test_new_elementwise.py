"""The registry rows log1p, expm1, rsqrt, floor, ceil, trunc and round (issue #39).

Values against NumPy on hypothesis-drawn shapes, layouts and dtypes, on both sides
of the eager/fused policy and on both CPU evaluators; gradients against float64
finite differences and PyTorch. Special values (NaN, +-inf, -0.0, subnormals) are
tests/trust/test_special_values.py's, which runs every row of the registry, and
the generated CUDA of every row compiles in tests/tensor/test_cuda_codegen.py: the
last tests here check that both reach these rows.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.tensor as T

from ._helpers import compare_with_torch, layouts, leaf, nonempty_shapes, seeds, strided_array

ROUNDING = ("floor", "ceil", "trunc", "round")
SMOOTH = ("log1p", "expm1", "rsqrt")
NEW_ROWS = SMOOTH + ROUNDING
REFERENCE = {"log1p": np.log1p, "expm1": np.expm1, "rsqrt": lambda a: 1 / np.sqrt(a),
             "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round}
DOMAIN = {"log1p": (-0.9, 3.0), "expm1": (-3.0, 3.0), "rsqrt": (0.1, 4.0)}
POLICIES = ("default threshold", "threshold 0")
BACKENDS = ("numba", "numpy")


def policy(name: str):
    """Either side of the eager/fused policy: ops below the threshold run at once."""
    return mt.fusion(threshold=0) if name == "threshold 0" else contextlib.nullcontext()


def draw_values(name: str, shape, seed: int) -> np.ndarray:
    """Values in the row's domain; for rounding, half of them exact halves (the ties)."""
    rng = np.random.default_rng(seed)
    lo, hi = DOMAIN.get(name, (-4.0, 4.0))
    v = rng.uniform(lo, hi, shape)
    if name in ROUNDING:
        v = np.where(rng.random(shape) < 0.5, np.round(v * 2) / 2, v)
    return v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("name", NEW_ROWS)
@settings(max_examples=8)
@given(shape=nonempty_shapes, layout=layouts, seed=seeds,
       dtype=st.sampled_from([np.float32, np.float64]))
def test_values_match_numpy_on_every_surface(name, side, backend, shape, layout, seed, dtype):
    arr = strided_array(draw_values(name, shape, seed), layout).astype(dtype)
    want = REFERENCE[name](arr)
    with T.using_cpu_backend(backend), policy(side):
        x = mt.from_numpy(arr)
        results = {"method": getattr(x, name)(), "mt function": getattr(mt, name)(x),
                   "T function": getattr(T, name)(T.from_numpy(arr)),
                   "fused with a neighbour": getattr(x * 1.0, name)()}
        for surface, y in results.items():
            got = y.numpy()
            assert got.dtype == want.dtype, surface
            np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=0,
                                       err_msg=surface)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("name", ROUNDING)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_rounding_keeps_integers_exactly(name, dtype, side, backend):
    """NumPy 2 and PyTorch give an integer back as it is; an int64 beyond 2**53 too,
    which a round trip through a double would change."""
    big = np.iinfo(dtype).max - 2
    arr = np.array([big, -big, 3, -3, 0], dtype=dtype)
    with T.using_cpu_backend(backend), policy(side):
        got = getattr(mt.from_numpy(arr) + 0, name)().numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, arr)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("side", POLICIES)
def test_round_takes_halves_to_even_and_keeps_the_sign_of_zero(side, backend):
    arr = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.0, -0.25])
    with T.using_cpu_backend(backend), policy(side):
        got = mt.from_numpy(arr).round().numpy()
    np.testing.assert_array_equal(got, [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, -0.0, -0.0])
    assert np.signbit(got[[3, 6, 7]]).all()


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("name", SMOOTH)
@settings(max_examples=6)
@given(shape=nonempty_shapes, layout=layouts, seed=seeds)
def test_gradients_match_finite_differences(name, side, shape, layout, seed):
    with policy(side):
        x = leaf(draw_values(name, shape, seed), layout)
        assert mt.gradcheck(lambda x: getattr(x, name)() * x, [x])


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("name", ROUNDING)
def test_rounding_has_a_zero_gradient_not_none(name, side):
    """As PyTorch: ``x.grad`` is zeros, even where the incoming gradient is infinite."""
    with policy(side):
        x = mt.tensor([0.3, -1.7, 2.2], dtype=mt.float64, requires_grad=True)
        getattr(x, name)().backward(mt.tensor([1.0, float("inf"), -2.0], dtype=mt.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("name", NEW_ROWS)
@settings(max_examples=5)
@given(shape=nonempty_shapes, layout=layouts, seed=seeds)
def test_values_and_gradients_match_torch(name, side, shape, layout, seed):
    pytest.importorskip("torch")
    with policy(side):
        x = leaf(draw_values(name, shape, seed) + 0.01 * (name in ROUNDING), layout)
        compare_with_torch(lambda x: getattr(x, name)(), lambda t: getattr(t, name)(), [x],
                           seed=seed)


@pytest.mark.parametrize("decimals", [-1, 0, 1, 2])
def test_round_with_decimals_matches_torch(decimals):
    torch = pytest.importorskip("torch")
    arr = np.array([1.2345, -2.5, 125.0, 0.05, -0.0, 987.654])
    got = mt.round(mt.from_numpy(arr), decimals=decimals)
    want = torch.round(torch.from_numpy(arr), decimals=decimals)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(mt.from_numpy(arr).round(decimals=decimals).numpy(),
                                  want.numpy())


def test_a_chain_of_the_new_rows_is_one_kernel():
    with mt.fusion(threshold=0):
        x = mt.rand(5, 6) + 0.5
        with mt.count_kernels() as k:
            y = (x.log1p().expm1().rsqrt() * 4).floor().ceil().trunc().round().sum()
            y.realize()
    assert k.total == 1
    expected = np.round(np.trunc(np.ceil(np.floor(
        4 / np.sqrt(np.expm1(np.log1p(x.numpy()))))))).sum()
    assert y.item() == pytest.approx(expected)


def test_special_values_and_cuda_compile_tests_reach_the_new_rows():
    """Both walk the registry; a hand-written list there would have to name these."""
    from ..tensor import test_cuda_codegen
    from ..trust import test_special_values
    assert set(NEW_ROWS) <= set(test_special_values.BUILTINS)
    labels = {case[0] for case in test_cuda_codegen.elementwise_cases()}
    for name in NEW_ROWS:
        for dtype in ("float32", "float64", "int32", "int64"):
            assert f"{name}_{dtype}" in labels

"""Every registered op agrees with NumPy on special values, on every CPU backend.

NaN, +-inf, -0.0, huge and tiny (subnormal) values are where hand-written
kernels drift from NumPy (a ``min(max(x, lo), hi)`` drops a NaN bound, for
example). Each op runs over every combination of these values; the compiled
result must match the op's NumPy function: NaN where NumPy gives NaN, the
same infinities, the same sign of zero, and the same finite values up to a
few ulps (numba's libm and NumPy's may round the last bit differently).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from minitorch_exp.tensor import apply_op, from_numpy, using_cpu_backend
from minitorch_exp.tensor.ops import OPS

from ..devices import CUDA_ONLY, on_device

BUILTINS = sorted(name for name, op in OPS.items() if op.builtin)


def special_values(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    return np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 0.5, -2.5, 3.0,
                     info.max / 2, -info.max / 2, info.smallest_subnormal, info.tiny],
                    dtype=dtype)


def operands(name: str, dtype) -> list[np.ndarray]:
    values = special_values(dtype)
    arity = OPS[name].arity
    columns = np.array(list(itertools.product(values, repeat=arity)), dtype=dtype).T
    arrays = [np.ascontiguousarray(c) for c in columns]
    if name == "where":
        arrays[0] = arrays[0] > 0  # the condition is boolean
    return arrays


def reference(name: str, arrays) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(OPS[name].numpy(*arrays))


def flush_subnormals(a: np.ndarray) -> np.ndarray:
    """``a`` as a CUDA kernel sees and writes float32: subnormals become zeros of
    the same sign. CuPy compiles every kernel with ``-ftz=true`` (its own ufuncs
    too); float64 keeps its subnormals."""
    if a.dtype != np.float32:
        return a
    tiny = (a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny)
    return np.where(tiny, np.copysign(np.float32(0), a), a)


def test_flush_subnormals_keeps_the_sign_and_leaves_other_values():
    a = np.array([1e-45, -1e-45, -0.0, np.nan, 1.2e-38, -3.0], dtype=np.float32)
    got = flush_subnormals(a)
    np.testing.assert_array_equal(got, np.array([0, 0, 0, np.nan, 1.2e-38, -3.0], np.float32))
    assert list(np.signbit(got)) == [False, True, True, False, False, True]
    assert flush_subnormals(a.astype(np.float64))[0] == np.float64(np.float32(1e-45))


def assert_same_values(got: np.ndarray, want: np.ndarray, arrays, name: str) -> None:
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, NumPy gives {want.dtype}"
    if want.dtype.kind != "f":
        bad = got != want
    else:
        ulps = 4 * np.finfo(want.dtype).eps
        same_nan = np.isnan(got) == np.isnan(want)
        close = np.isclose(got, want, rtol=ulps, atol=0) | (np.isnan(got) & np.isnan(want))
        same_zero_sign = ~((got == 0) & (want == 0)) | (np.signbit(got) == np.signbit(want))
        bad = ~(same_nan & close & same_zero_sign)
    if bad.any():
        rows = [f"  {tuple(a[i].item() for a in arrays)} -> {got[i]!r}, NumPy {want[i]!r}"
                for i in np.flatnonzero(bad)[:8]]
        pytest.fail(f"{name}: {bad.sum()} of {bad.size} differ from NumPy:\n" + "\n".join(rows))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", BUILTINS)
def test_op_matches_numpy_on_special_values(name, dtype, backend):
    arrays = operands(name, dtype)
    want = reference(name, arrays)
    with using_cpu_backend(backend), np.errstate(all="ignore"):
        got = apply_op(name, *[from_numpy(a) for a in arrays]).numpy()
    assert_same_values(got, want, arrays, name)


@pytest.mark.parametrize("device", CUDA_ONLY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", BUILTINS)
def test_generated_cuda_matches_numpy_on_special_values(name, dtype, device):
    """As on the CPU, except that a float32 subnormal counts as a zero of its sign:
    CUDA's arithmetic and comparisons flush them (see flush_subnormals), while a
    select may pass one through (min(0, 1e-45) is a tie), so the result is
    compared with subnormals flushed on both sides."""
    arrays = operands(name, dtype)
    want = flush_subnormals(reference(name, [flush_subnormals(a) for a in arrays]))
    got = flush_subnormals(apply_op(name, *[on_device(a, device) for a in arrays]).numpy())
    ulps = 64 * np.finfo(dtype).eps  # CUDA's libm: a few ulps, more for tanh/erf
    nan_or_close = np.isclose(got, want, rtol=ulps, atol=0) | (np.isnan(got) & np.isnan(want))
    assert nan_or_close.all(), (name, [a[~nan_or_close][:4] for a in arrays])


def test_clip_with_a_nan_bound_gives_nan_as_numpy_does():
    """The reported case: numba gave [1, 3], NumPy and PyTorch give [nan, nan]."""
    for backend in ("numba", "numpy"):
        with using_cpu_backend(backend):
            got = from_numpy(np.array([1.0, 5.0])).clip(float("nan"), 3.0).numpy()
        assert np.isnan(got).all(), (backend, got)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("exponent", ["number", "NumPy scalar", "0-d", "one element"])
def test_pow_by_a_scalar_half_is_pow_not_a_square_root(exponent, dtype):
    """NumPy takes a square root for a scalar exponent of 0.5, which gives nan at -inf and
    -0.0 at -0.0; pow -- NumPy's with an array exponent, and the compiled kernels' --
    gives inf and 0.0. The op's NumPy form (the at-once path below the fusion threshold)
    follows pow whatever the exponent's form."""
    bases = special_values(dtype)
    half = {"number": 0.5, "NumPy scalar": dtype(0.5), "0-d": np.asarray(0.5, dtype),
            "one element": np.full(1, 0.5, dtype)}[exponent]
    want = reference("pow", [bases, np.full(bases.shape, 0.5, dtype)])
    with np.errstate(all="ignore"):
        got = np.asarray(OPS["pow"].numpy(bases, half))
    assert_same_values(got, want, [bases], "pow")
    assert got[2] == np.inf and got[3] == 0 and not np.signbit(got[3])  # -inf, -0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("form", ["contiguous", "strided", "0-d", "into out"])
def test_relu_s_numpy_form_is_the_maximum_against_zero_bit_for_bit(form, dtype):
    """relu's NumPy form takes the maximum against an array of zeros (NumPy's SIMD loop,
    2-3x faster than against a scalar 0): the same values, NaNs and signs of zero as
    ``np.maximum(x, 0)``, the same dtype, and ``out`` is written."""
    values = (special_values(dtype) if dtype != np.int32
              else np.array([0, -1, 1, np.iinfo(np.int32).min, np.iinfo(np.int32).max], dtype))
    x = np.repeat(values, 700)  # long enough for the SIMD loop's blocks and its tail
    if form == "strided":
        x = x[::3]
    elif form == "0-d":
        x = np.asarray(x[3])
    out = np.empty_like(x) if form == "into out" else None
    got = OPS["relu"].numpy(x, out=out)
    want = np.maximum(x, 0)
    if out is not None:
        assert got is out
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if dtype != np.int32:
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))

"""Backend conformance: every registry row and reduction, values and gradients, special
values included, on each evaluator the engine's policy can choose (issue 38).

The evaluators:

* ``at once``: the evaluator of small work (tensor/eager.py), below the fusion
  threshold -- each op its row's NumPy form, each gradient its rule on arrays;
* ``numpy kernels`` and ``numba kernels``: the fused path (threshold 0) on each CPU
  backend;
* ``cuda``: the fused path on a GPU, where one is lent (skipped elsewhere;
  tests/tensor/test_cuda_codegen.py compiles every generated source with nvcc).

The reference is NumPy itself: a row's values are its NumPy form's on the same
operands (float16's: float32's, rounded, as float16 computes in float32), and its
gradients the registry's rule run on NumPy arrays in float64
(checked against finite differences by ``test_every_rule_matches_finite_differences``).
Values agree to a few ulps (libm against the kernels' math), NaN where NaN and zeros
of one sign; gradients to a tolerance of the dtype.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor import backends
from minitorch_exp.tensor.ops import OPS, REDUCTIONS

from .devices import CUDA

#: Every differentiable built-in row (sign's derivative is 0 everywhere it is defined)
ROWS = sorted(name for name, op in OPS.items()
              if op.builtin and op.result != "bool" and name != "sign")
REDUCE_ROWS = sorted(name for name, r in REDUCTIONS.items() if r.derivative is not None)
EVALUATORS = ["at once", "numpy kernels", "numba kernels", CUDA]
SPECIAL = np.array([1.5, 0.5, -0.0, 0.0, 3e-8, -2.0, 6e4, 1e300, -1e300, np.inf, -np.inf,
                    np.nan, 1e-45])
#: Values and ulps: how far a kernel's math library may be from NumPy's
ULPS = {"float16": 8, "float32": 8, "float64": 8}
#: float16 computes in float32 and rounds (tensor/dtypes.py): its reference is float32's
#: rounded, its gradients (float16 ops one after another in the rules) to a few ulps
#: and subnormals (6e-8) of float16.
GRAD_TOL = {"float16": dict(rtol=1e-2, atol=3e-7), "float32": dict(rtol=3e-5, atol=1e-30),
            "float64": dict(rtol=1e-12, atol=1e-300)}


def evaluator(name: str):
    """``(device, context manager)`` running code under evaluator ``name``."""
    if name == "at once":
        return "cpu", mt.fusion(threshold=1 << 30)
    if name == "cuda":
        return "cuda", mt.fusion(threshold=0)
    backend = name.split()[0]
    if backend == "numba":
        pytest.importorskip("numba")
    return "cpu", _both(mt.fusion(threshold=0), backends.using_cpu_backend(backend))


class _both:
    def __init__(self, *managers):
        self.managers = managers

    def __enter__(self):
        for m in self.managers:
            m.__enter__()

    def __exit__(self, *exc):
        for m in reversed(self.managers):
            m.__exit__(*exc)


def grid(name: str, dtype: str) -> list[np.ndarray]:
    """Operands of ``name`` covering every pair of special values (a condition for
    ``where``), as arrays of ``dtype`` (1e300 is inf in float32); pow's base and clip's
    bounds kept to what the kernels define alike."""
    with np.errstate(over="ignore"):
        return _grid(name, dtype)


def _grid(name: str, dtype: str) -> list[np.ndarray]:
    op = OPS[name]
    if op.arity == 1:
        return [SPECIAL.astype(dtype)]
    a, b = (x.ravel() for x in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))
    if name == "where":
        return [a > 0, a.astype(dtype), b.astype(dtype)]
    if name == "clip":
        return [a.astype(dtype), np.full_like(a, -1.0, dtype), np.full_like(a, 2.0, dtype)]
    if name == "pow":  # a finite positive base: libm's pow differs at the edges
        a = np.abs(a[np.isfinite(a)]) + 0.25
        b = np.clip(b[: a.size], -4, 4)
        b = np.where(np.isnan(b), 0.5, b)
    return [a.astype(dtype), b.astype(dtype)]


def assert_ulps(got, want, dtype: str, ulps: int) -> None:
    """Equal up to ``ulps`` units in the last place, nan where nan, zeros of one sign
    (but float16's: NumPy's float16 ``maximum(-0.0, 0.0)`` is -0.0, its float32 one,
    which float16 computes with here, 0.0; IEEE allows either)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_allclose(got, want, rtol=ulps * np.finfo(dtype).eps, atol=0)
    if dtype == "float16":
        return
    zeros = (got == 0) & (want == 0)
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def run_row(name: str, arrays: list, upstream: np.ndarray, where: str):
    """The row on ``arrays`` under evaluator ``where``: its values and each float
    operand's gradient, read back as NumPy arrays."""
    device, mode = evaluator(where)
    with mode, np.errstate(all="ignore"):
        nodes = [mt.tensor(a, device=device, requires_grad=a.dtype.kind == "f")
                 for a in arrays]
        out = mt.op(name, *nodes)
        out.backward(mt.tensor(upstream, dtype=out.dtype, device=device))
        return out.numpy(), [n.grad.numpy() for n in nodes if n.requires_grad]


def reference_row(name: str, arrays: list, upstream: np.ndarray):
    """NumPy's values of the row, and its rule's gradients on arrays; for float16,
    those of float32 rounded to float16."""
    if any(a.dtype == np.float16 for a in arrays):
        out, grads = reference_row(name, [a.astype(np.float32) if a.dtype == np.float16
                                          else a for a in arrays], upstream)
        with np.errstate(over="ignore"):  # beyond 65504: inf, as float16 stores it
            return out.astype(np.float16), [g.astype(np.float16) for g in grads]
    op = OPS[name]
    with np.errstate(all="ignore"):
        out = op.numpy(*arrays)
        needs = tuple(a.dtype.kind == "f" for a in arrays)
        grads = op.gradients(upstream.astype(out.dtype), out, tuple(arrays), needs)
    return out, [np.broadcast_to(np.asarray(g, out.dtype), out.shape)
                 for g, need in zip(grads, needs) if need]


@pytest.mark.parametrize("where", EVALUATORS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("name", ROWS)
def test_every_row_on_special_values(name, dtype, where):
    arrays = grid(name, dtype)
    upstream = np.linspace(0.5, 1.5, arrays[-1].size)
    got, got_grads = run_row(name, arrays, upstream, where)
    want, want_grads = reference_row(name, arrays, upstream)
    assert got.dtype == want.dtype
    assert_ulps(got, want, dtype, ULPS[dtype])
    assert len(got_grads) == len(want_grads)
    for g, w in zip(got_grads, want_grads):
        assert g.dtype == np.dtype(dtype)
        finite = np.isfinite(w) & np.isfinite(g)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isinf(g) & ~np.isnan(w), np.isinf(w))
        np.testing.assert_allclose(g[finite], w[finite], **GRAD_TOL[dtype])


def _others_product(x: np.ndarray, axis) -> np.ndarray:
    """Each entry's product of the other entries of its slice, multiplied out one by one
    -- except a non-finite entry of a slice without zeros, whose is ``product / x``
    (NaN for inf/inf), as PyTorch's rule divides there."""
    flat = x.reshape(1, -1) if axis is None else np.moveaxis(x, axis, -1)
    with np.errstate(all="ignore"):
        others = np.stack([np.prod(np.delete(flat, k, axis=-1), axis=-1)
                           for k in range(flat.shape[-1])], -1)
        divided = np.prod(flat, axis=-1, keepdims=True) / flat
    zero_free = ~(flat == 0).any(axis=-1, keepdims=True)
    r = np.where(zero_free & ~np.isfinite(flat), divided, others)
    return r.reshape(x.shape) if axis is None else np.moveaxis(r, -1, axis)


@pytest.mark.parametrize("name", ROWS)
def test_every_rule_matches_finite_differences(name):
    """The reference's rules, on values away from every kink, in float64."""
    rng = np.random.default_rng(0)
    op = OPS[name]
    x = rng.uniform(0.3, 1.5, 6) * np.where(rng.random(6) < 0.5, -1, 1)
    arrays = {"where": [x > 0, x, -x], "clip": [x, np.full(6, -0.8), np.full(6, 0.9)],
              "pow": [np.abs(x) + 0.2, x]}.get(name) or [
        np.abs(x) + 0.2 if name in ("log", "log1p", "sqrt", "rsqrt") else x,
        rng.uniform(0.3, 1.5, 6)][:op.arity]
    nodes = [mt.tensor(a) if a.dtype == bool else mt.tensor(a, requires_grad=True)
             for a in arrays]
    assert mt.gradcheck(lambda *xs: mt.op(name, *xs), nodes)


@pytest.mark.parametrize("where", EVALUATORS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("name", REDUCE_ROWS)
def test_every_reduction_with_special_values(name, axis, dtype, where):
    """Each differentiable reduction over every axis of a (13, 13) grid holding every
    special value, its gradient included (ties share max's and min's, as PyTorch)."""
    r = REDUCTIONS[name]
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf is nan: meant
        x = np.add.outer(SPECIAL, SPECIAL * 0.5).astype(dtype)
    device, mode = evaluator(where)
    with mode, np.errstate(all="ignore"):
        node = mt.tensor(x, device=device, requires_grad=True)
        out = getattr(mt, r.function)(node, axis)
        upstream = np.linspace(0.5, 1.5, max(out.numel(), 1)).reshape(out.shape)
        out.backward(mt.tensor(upstream, dtype=out.dtype, device=device))
        got, grad = out.numpy(), node.grad.numpy()
    with np.errstate(all="ignore"):
        want = getattr(np, {"sum": "sum", "mean": "mean", "max": "max", "min": "min"}.get(
            name, name))(x.astype(np.float64), axis=axis)
    assert got.dtype == np.dtype(dtype) and got.shape == np.shape(want)
    assert_ulps(got, np.asarray(want, dtype), dtype, 64 if name in ("sum", "mean") else 0)
    assert grad.shape == x.shape and grad.dtype == np.dtype(dtype)
    reference = _reduction_grad(name, x, axis, upstream)
    finite = np.isfinite(reference)
    np.testing.assert_array_equal(np.isnan(grad), np.isnan(reference))
    np.testing.assert_allclose(grad[finite], reference[finite], **GRAD_TOL[dtype])


def _reduction_grad(name: str, x: np.ndarray, axis, upstream: np.ndarray) -> np.ndarray:
    """The gradient of ``sum``/``mean``/``max``/``min``/``prod`` of ``x`` over ``axis``
    for ``upstream``, in float64 with NumPy: spread back, divided by the count for a
    mean, shared between ties for max and min (NaN rows propagate NaN where NaN is
    taken), times the product of the other entries for prod."""
    x64 = x.astype(np.float64)
    kept = np.expand_dims(upstream, axis) if axis is not None else upstream
    spread = np.broadcast_to(kept, x.shape)
    if name == "sum":
        return spread.copy()
    if name == "mean":
        return spread / (x.size if axis is None else x.shape[axis])
    if name == "prod":
        return spread * _others_product(x64, axis)
    with np.errstate(all="ignore"):
        best = getattr(np, name)(x64, axis=axis, keepdims=axis is not None)
        hit = (x64 == best) | (np.isnan(x64) & np.isnan(best))
        ties = hit.sum(axis=axis, keepdims=axis is not None)
        return np.where(hit, spread / ties, 0.0)

"""Rows NumPy runs slowly (relu, where, sign, sqrt) computed at once by a compiled loop.

Below the fusion threshold an op runs at once (tensor/eager.py). For the rows whose
NumPy forms do not vectorize (``OpDef.numpy_slow``), from
``eager.COMPILED_FROM`` elements the forward and each gradient run instead as one
call of the engine's own compiled kernel over the whole contiguous arrays
(``Backend.flat_loop``); strided or broadcast operands, and the NumPy evaluator
chosen, keep NumPy. These tests lower ``COMPILED_FROM`` so the sizes stay small,
compare the compiled values and gradients with the engine's bit for bit (the same
kernel) and with NumPy's (within a few ulps: a row's libm calls may be NumPy's own
SIMD ones), and check which path ran.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_exp as mt
from minitorch_exp.tensor import cpu_numba, eager
from minitorch_exp.tensor.ops import OPS

SMALL_FROM = 64  # eager.COMPILED_FROM during these tests
NUMPY_SLOW_ROWS = sorted(name for name, op in OPS.items() if op.numpy_slow)
SPECIAL = [1.5, 0.5, -0.0, 0.0, -2.0, 1e30, -1e30, np.inf, -np.inf, np.nan, 1e-45]


@pytest.fixture(autouse=True)
def compiled_from_64(monkeypatch):
    """A low ``COMPILED_FROM`` and a count of the compiled loop's calls."""
    calls = []
    run_flat = cpu_numba.run_flat

    def counted(*args, **kwargs):
        calls.append(args[1])
        return run_flat(*args, **kwargs)

    monkeypatch.setattr(eager, "COMPILED_FROM", SMALL_FROM)
    monkeypatch.setattr(cpu_numba, "run_flat", counted)
    eager._COMPILED.clear()  # calls worked out before hold the uncounted function
    yield calls
    eager._COMPILED.clear()


def run(name: str, arrays, upstream, *, threshold: int, compiled_from: int):
    """``name`` on ``arrays`` (a bool condition stays data) and its gradients."""
    saved, eager.COMPILED_FROM = eager.COMPILED_FROM, compiled_from
    try:
        with mt.fusion(threshold=threshold), np.errstate(all="ignore"):
            nodes = [mt.tensor(a) if a.dtype == bool else mt.tensor(a, requires_grad=True)
                     for a in arrays]
            out = mt.op(name, *nodes)
            out.backward(mt.tensor(upstream))
            grads = [n.grad.numpy().copy() for n in nodes if n.grad is not None]
            return out.numpy().copy(), grads
    finally:
        eager.COMPILED_FROM = saved


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def assert_within_ulps(got, want, scale, dtype, ulps: int = 16):
    """Equal up to ``ulps`` of ``|want|`` or of ``scale`` (a gradient's upstream value: a
    rule like ``g * 0.5 / out`` keeps the relative error of ``out``, not of g); nan
    where nan."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    with np.errstate(invalid="ignore"):
        ok = (got == want) | (np.abs(got.astype(np.float64) - want) <= ulps * np.finfo(dtype).eps
                              * (np.abs(want.astype(np.float64)) + scale))
    assert (ok | np.isnan(want)).all(), (got[~ok], want[~ok])


def floats(dtype, n):
    """Vectors of ``n`` values, special ones among them."""
    return hnp.arrays(dtype, n, elements=st.one_of(
        st.sampled_from(SPECIAL), st.floats(-3, 3, width=np.dtype(dtype).itemsize * 8)))


# the fixture's count is cleared by the test itself before each example
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), name=st.sampled_from(NUMPY_SLOW_ROWS),
       dtype=st.sampled_from(["float32", "float64"]),
       n=st.integers(SMALL_FROM - 8, SMALL_FROM + 40))
def test_compiled_at_once_gives_the_engine_s_bits_and_numpy_s_values(
        compiled_from_64, data, name, dtype, n):
    arrays = [data.draw(floats(dtype, n)) for _ in range(1 if name != "where" else 2)]
    if name == "where":
        arrays.insert(0, data.draw(hnp.arrays(bool, n)))
    upstream = data.draw(floats(dtype, n))
    compiled_from_64.clear()
    at_once = run(name, arrays, upstream, threshold=1 << 20, compiled_from=SMALL_FROM)
    compiled = len(compiled_from_64)
    if name in ("relu", "where"):  # their rules are where: compiled too
        assert compiled == (1 + len(at_once[1]) if n >= SMALL_FROM else 0)
    else:
        assert compiled == (n >= SMALL_FROM)
    fused = run(name, arrays, upstream, threshold=0, compiled_from=SMALL_FROM)
    with_numpy = run(name, arrays, upstream, threshold=1 << 20, compiled_from=1 << 40)
    for got, engine, numpy_s in zip([at_once[0], *at_once[1]], [fused[0], *fused[1]],
                                    [with_numpy[0], *with_numpy[1]]):
        if compiled:  # one kernel, one bit pattern: nan, infinities and zeros' signs too
            assert_same_bits(got, engine)
        assert_within_ulps(got, numpy_s, np.abs(upstream), dtype)


def test_relu_s_compiled_gradient_zeroes_an_infinite_g_and_passes_one_at_nan(
        compiled_from_64):
    """PyTorch's rule, as the NumPy path computes it (``where``, not g times a mask)."""
    x = np.tile(np.array([-2.0, 0.0, 3.0, np.nan, -1.0, 4.0, -0.0, 2.0], np.float32), 16)
    g = np.tile(np.array([np.inf, -np.inf, np.inf, 1, -5, np.nan, 2, -3], np.float32), 16)
    node = mt.tensor(x, requires_grad=True)
    node.relu().backward(mt.tensor(g))
    assert compiled_from_64 == [(128,), (128,)]
    assert_same_bits(node.grad.numpy(), np.where(x <= 0, np.float32(0), g))


@pytest.mark.parametrize("case", ["transposed", "broadcast condition", "numpy evaluator",
                                  "below COMPILED_FROM"])
def test_where_the_compiled_loop_does_not_apply_numpy_computes_it(compiled_from_64, case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    if case == "below COMPILED_FROM":
        x = x[:4]
    node = mt.tensor(x.T.copy() if case == "transposed" else x, requires_grad=True)
    with mt.tensor.using_cpu_backend("numpy" if case == "numpy evaluator" else "numba"):
        if case == "broadcast condition":
            cond = mt.tensor(rng.random(x.shape[1]) < 0.5)
            out = mt.where(cond, node, 0.0)
            want = np.where(cond.numpy(), x, 0)
            want_grad = np.broadcast_to(cond.numpy(), x.shape).astype(np.float32)
        else:
            out = (node.T if case == "transposed" else node).relu()  # a strided operand
            want, want_grad = np.maximum(x, 0), (x > 0).astype(np.float32)
        out.backward(mt.ones_like(out))
    assert compiled_from_64 == []
    np.testing.assert_array_equal(out.numpy(), want)
    grad = node.grad.numpy()
    np.testing.assert_array_equal(grad.T if case == "transposed" else grad, want_grad)


def test_an_mlp_step_runs_relu_compiled_and_matches_the_numpy_path(compiled_from_64):
    """Forward and backward of a ReLU layer at a size the compiled loop takes, against
    the same step with the loop switched off: the same loss and gradients."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 20)).astype(np.float32)
    weights = [rng.standard_normal((16, 20)).astype(np.float32) * 0.3,
               rng.standard_normal((4, 16)).astype(np.float32) * 0.3]
    results = []
    for compiled_from in (SMALL_FROM, 1 << 40):
        eager.COMPILED_FROM = compiled_from
        compiled_from_64.clear()
        w1, w2 = (mt.tensor(w, requires_grad=True) for w in weights)
        loss = ((mt.tensor(x) @ w1.T).relu() @ w2.T).relu().sum()
        loss.backward()
        results.append((loss.item(), w1.grad.numpy().copy(), w2.grad.numpy().copy()))
        # each relu forward and backward, or none
        assert len(compiled_from_64) == (4 if compiled_from == SMALL_FROM else 0)
    assert results[0][0] == results[1][0]
    for got, want in zip(results[0][1:], results[1][1:]):
        np.testing.assert_array_equal(got, want)


def test_explain_says_a_slow_row_ran_as_one_compiled_loop(compiled_from_64):
    x = mt.tensor(np.linspace(-1, 1, 100, dtype=np.float32), requires_grad=True)
    assert ("computed eagerly: 100 elements, below the fusion threshold of "
            f"{mt.get_fusion_threshold()}, by one compiled loop (NumPy's form of relu runs "
            f"slowly; from {SMALL_FROM} elements)") in x.relu().explain()
    assert "compiled loop" not in x[:10].relu().explain()  # below COMPILED_FROM: NumPy
    assert "compiled loop" not in (x * 2).explain()  # NumPy's multiply is fast

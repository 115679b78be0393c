"""The numba evaluator against the NumPy reference evaluator.

Every test builds the same computation twice from the same arrays, once per
backend, and compares. Expression trees, views (permuted, stepped, reversed),
broadcasts, dtypes, savers and aliasing are drawn by hypothesis. Each distinct
structure compiles a kernel (~0.2-1 s cold, milliseconds once numba's disk
cache has it), so the property tests are derandomized and kept to a few
dozen examples: a second run of the suite compiles nothing.
"""

from __future__ import annotations

import ctypes.util
import json
import math
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import minitorch_exp.tensor as mt  # noqa: E402
from minitorch_exp.tensor import cpu_numba  # noqa: E402
from minitorch_exp.tensor.backends import pip_tbb_path  # noqa: E402
from minitorch_exp.tensor.explain import explain  # noqa: E402
from minitorch_exp.tensor.expr import as_exp  # noqa: E402
from minitorch_exp.tensor.ops import REDUCTIONS  # noqa: E402
from minitorch_exp.tensor.plan import make_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FLOATS = ("float32", "float64")
NUMERIC = ("float32", "float64", "int32", "int64")
PROPERTY = settings(max_examples=25, deadline=None, derandomize=True)


def both_backends(run):
    """``run()`` under the NumPy and the numba backend: (reference, numba)."""
    results = []
    for name in ("numpy", "numba"):
        with mt.using_cpu_backend(name):
            results.append(run())
    return results


def assert_same(expected, actual, dtype) -> None:
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert expected.dtype == actual.dtype
    if np.dtype(dtype).kind == "f":
        rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-11
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(actual, expected)


# ---- strided views -----------------------------------------------------------

@st.composite
def view_specs(draw, shape):
    """How to lay ``shape`` out in memory: a permutation, steps and flips."""
    perm = draw(st.permutations(range(len(shape))))
    steps = draw(st.lists(st.integers(1, 2), min_size=len(shape), max_size=len(shape)))
    flips = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    return tuple(shape), tuple(perm), tuple(steps), tuple(flips)


def make_view(spec, dtype, seed: int) -> np.ndarray:
    """A (usually non-contiguous) view with the given shape, filled deterministically."""
    shape, perm, steps, flips = spec
    base_shape = tuple(shape[p] * steps[i] for i, p in enumerate(perm))
    rng = np.random.default_rng(seed)
    base = (rng.standard_normal(base_shape) * 3).astype(dtype)
    index = tuple(slice(None, None, -s if f else s) for s, f in zip(steps, flips))
    view = base[index + (Ellipsis,)]  # a 0-d view, not a scalar, when ndim == 0
    return view.transpose(np.argsort(perm))


# ---- random expression trees -------------------------------------------------

UNARY = ("neg", "abs", "exp_tanh", "log1abs", "sqrtabs", "tanh", "sigmoid", "relu", "sign")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow2")
INT_UNARY = ("neg", "abs", "relu")
INT_BINARY = ("add", "sub", "mul", "maximum", "minimum")


def trees(n_leaves: int, is_float: bool, depth: int = 3):
    leaf = st.one_of(st.tuples(st.just("leaf"), st.integers(0, n_leaves - 1)),
                     st.tuples(st.just("scalar"), st.sampled_from([0.5, -2.0, 3, 2, True])))
    unary, binary = (UNARY, BINARY) if is_float else (INT_UNARY, INT_BINARY)

    def extend(sub):
        return st.one_of(
            st.tuples(st.just("op1"), st.sampled_from(unary), sub),
            st.tuples(st.just("op2"), st.sampled_from(binary), sub, sub),
            st.tuples(st.just("where"), sub, sub, sub),
            st.tuples(st.just("clip"), sub),
            st.tuples(st.just("cast"), st.sampled_from(NUMERIC), sub),
        )
    return extend(st.recursive(leaf, extend, max_leaves=depth))  # the root is an op


def build(tree, leaves):
    """Turn a drawn tree into an expression; values stay finite (no NaN sources)."""
    kind = tree[0]
    if kind == "leaf":
        return leaves[tree[1]]
    if kind == "scalar":
        return tree[1]
    if kind == "op1":
        return _unary(tree[1], _as_exp(build(tree[2], leaves), leaves))
    if kind == "op2":
        a, b = build(tree[2], leaves), build(tree[3], leaves)
        return _binary(tree[1], a, b, leaves)
    if kind == "where":
        c, a, b = (build(t, leaves) for t in tree[1:])
        return mt.where(_as_exp(c, leaves) > 0, a, b)
    if kind == "clip":
        return mt.clip(_as_exp(build(tree[1], leaves), leaves), -2, 3)
    return _as_exp(build(tree[2], leaves), leaves).astype(tree[1])


def _as_exp(x, leaves):
    return x if isinstance(x, mt.Exp) else leaves[0] * 0 + x


def _unary(name, x):
    if x.dtype == np.bool_:
        x = x.astype("int32")
    if name == "exp_tanh":
        return x.tanh().exp()
    if name == "log1abs":
        return (abs(x) + 1).log()
    if name == "sqrtabs":
        return abs(x).sqrt()
    if name == "sign":
        return x.sign()  # its only NaN source would be a NaN operand; there is none
    return mt.apply_op(name, x)


def _binary(name, a, b, leaves):
    if name == "div":
        return a / (abs(_as_exp(b, leaves)) + 1)
    if name == "pow2":
        return _as_exp(a, leaves) ** 2
    return mt.apply_op(name, _as_exp(a, leaves), b)


def fit_to(e, dtype):
    """Cast the root when NumPy's in-place rules would not accept it into ``dtype``."""
    if not isinstance(e, mt.Exp):
        return e
    return e if np.can_cast(e.dtype, dtype, "same_kind") else e.astype(dtype)


@st.composite
def elementwise_cases(draw):
    ndim = draw(st.integers(1, 3))  # 0-d and size-1 dims: test_empty_and_scalar_tensors
    shape = tuple(draw(st.lists(st.integers(2, 5), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(NUMERIC))
    n_leaves = draw(st.integers(1, 3))
    leaves = []
    for _ in range(n_leaves):
        kind = draw(st.sampled_from(["own", "own", "broadcast", "dst", "dst_reversed"]))
        leaf_shape = shape
        if kind == "broadcast":
            lead = draw(st.integers(0, ndim))
            leaf_shape = tuple(1 if draw(st.booleans()) else n for n in shape[lead:])
        leaf_dtype = draw(st.sampled_from(NUMERIC)) if kind in ("own", "broadcast") else dtype
        leaves.append((kind, draw(view_specs(leaf_shape)), leaf_dtype))
    is_float = np.dtype(dtype).kind == "f"
    savers = ["=", "+=", "-=", "*="] + (["/="] if is_float else [])
    return (draw(view_specs(shape)), dtype, leaves, draw(trees(n_leaves, is_float)),
            draw(st.sampled_from(savers)))


def run_elementwise(case):
    dst_spec, dtype, leaf_specs, tree, saver = case
    dst_base = make_view(dst_spec, dtype, seed=0)
    dst = mt.from_numpy(dst_base)
    leaves = []
    for k, (kind, spec, leaf_dtype) in enumerate(leaf_specs):
        if kind == "dst":
            leaves.append(dst)
        elif kind == "dst_reversed":
            leaves.append(dst[(slice(None, None, -1),) * dst.ndim])
        else:
            leaves.append(mt.from_numpy(make_view(spec, leaf_dtype, seed=k + 1)))
    e = fit_to(build(tree, leaves), dst.dtype)
    mt.assign(dst, as_exp(e), saver)
    return dst.numpy().copy()


@PROPERTY
@given(elementwise_cases())
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # x /= 0 is inf in both, as NumPy warns
def test_elementwise_matches_numpy(case):
    expected, actual = both_backends(lambda: run_elementwise(case))
    assert_same(expected, actual, case[1])


# ---- reductions --------------------------------------------------------------

@st.composite
def reduce_cases(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    axes = draw(st.one_of(st.none(), st.lists(st.integers(0, ndim - 1), unique=True,
                                              min_size=1, max_size=ndim).map(tuple)))
    return (draw(view_specs(shape)), draw(st.sampled_from(NUMERIC + ("bool",))), axes,
            draw(st.booleans()), draw(st.sampled_from(["sum", "mean", "max", "min"])),
            draw(st.sampled_from(["plain", "scaled", "exp_tanh", "bias"])),
            draw(st.sampled_from(["=", "+=", "*="])))


def run_reduce(case):
    spec, dtype, axes, keepdims, op, fused, saver = case
    x = mt.from_numpy(make_view(spec, "float64", seed=3).astype(dtype)
                      if dtype == "bool" else make_view(spec, dtype, seed=3))
    if fused == "scaled" and dtype != "bool":
        x = x * 2 + 1
    elif fused == "exp_tanh" and dtype in FLOATS:
        x = x.tanh().exp()
    elif fused == "bias" and x.ndim and dtype != "bool":
        x = x + mt.from_numpy(np.arange(x.shape[-1], dtype=dtype))
    e = getattr(x, op)(axis=axes, keepdims=keepdims)
    dst = mt.from_numpy(np.full(e.shape, 2, dtype=e.dtype))
    mt.assign(dst, e, saver if e.dtype != np.bool_ else "=")
    return dst.numpy().copy()


@PROPERTY
@given(reduce_cases())
def test_reduce_matches_numpy(case):
    expected, actual = both_backends(lambda: run_reduce(case))
    assert_same(expected, actual, expected.dtype)


@pytest.fixture
def always_parallel(machine):
    """Every kernel takes its prange variant (with numba's threads > 1)."""
    saved = cpu_numba.PARALLEL_MIN
    cpu_numba.set_parallel_min(0)
    yield
    cpu_numba.set_parallel_min(saved)


def test_set_parallel_min_reaches_statements_already_run():
    x = mt.from_numpy(np.ones(1000, np.float32))
    saved = cpu_numba.PARALLEL_MIN
    try:
        with mt.using_cpu_backend("numba"):
            cpu_numba.set_parallel_min(1 << 62)
            x[...] = x * 2
            assert [launch.may_parallel for launch in cpu_numba._LAUNCHES.values()] == [False]
            cpu_numba.set_parallel_min(0)
            x[...] = x * 2
            assert [launch.may_parallel for launch in cpu_numba._LAUNCHES.values()] == [True]
    finally:
        cpu_numba.set_parallel_min(saved)
    np.testing.assert_array_equal(x.numpy(), np.full(1000, 4, np.float32))


def test_statements_over_the_same_arrays_split_alike():
    """The split is decided by elements, not by work: a cheap and a costly statement over
    arrays of one size both split or both stay on one core (mixing them moved the arrays
    between the cores' caches), and the boundary is ``parallel_min`` itself."""
    saved = cpu_numba.PARALLEL_MIN
    try:
        with mt.using_cpu_backend("numba"):
            cpu_numba.set_parallel_min(1000)
            for n, split in ((999, False), (1000, True)):
                w, g, m, v = (mt.from_numpy(np.full(n, 2.0, np.float32)) for _ in range(4))
                cpu_numba._LAUNCHES.clear()
                m[...] = 0.9 * m + 0.1 * g                                # 3 instructions
                w[...] = w - 0.01 * m / ((v / 0.999).sqrt() + 1e-8)       # 6 instructions
                assert [launch.may_parallel for launch in cpu_numba._LAUNCHES.values()] == \
                    [split, split]
                np.testing.assert_allclose(m.numpy(), np.full(n, 2.0), rtol=1e-6)
    finally:
        cpu_numba.set_parallel_min(saved)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_reductions_go_parallel(always_parallel, axis):
    a = np.random.default_rng(0).standard_normal((100, 70)).astype(np.float32)

    def run():
        x = mt.from_numpy(a)
        return [(x * 2).sum(axis=axis).numpy(), x.max(axis=axis).numpy()]
    for expected, actual in zip(*both_backends(run)):
        assert_same(expected, actual, np.float32)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_column_reductions_are_one_compiled_loop_in_memory_order(op):
    a = np.random.default_rng(2).standard_normal((6, 37, 5)).astype(np.float32)
    x = mt.from_numpy(a)
    e = getattr(x * 2, op)(axis=(0, 1))  # kept dim innermost in memory: a column reduction
    dst = mt.from_numpy(np.empty(5, np.float32))
    with mt.using_cpu_backend("numba"):
        plan, leaves, _ = make_plan(e.x, 3)
        assert cpu_numba._reduce_loops(dst, e, leaves).by_columns
        call = cpu_numba.NumbaBackend().reduce(dst, e, "=", make_plan(e.x, 3))
    assert call is not None, "ran on the NumPy evaluator, not as a compiled loop"
    fn, args = call
    dst.numpy()[...] = 0
    fn(*args)  # the call alone gives the whole result
    np.testing.assert_allclose(dst.numpy(), getattr(a.astype(np.float64) * 2, op)(axis=(0, 1)),
                               rtol=1e-6)
    text = explain(e, backend="numba", parts=["code"])
    assert "row = partial[c]" in text and "for j0 in range(c * step" in text


def test_argmax_falls_back_to_numpy():
    a = np.random.default_rng(1).standard_normal((4, 5))
    expected, actual = both_backends(lambda: (mt.from_numpy(a) * -1).argmax(axis=1).numpy())
    np.testing.assert_array_equal(actual, expected)


# ---- aliasing and edge layouts -----------------------------------------------

ALIASING = {
    "shift": lambda a: a.__setitem__(slice(1, None), a[:-1] + 1),
    "transpose": lambda a: a.__setitem__(Ellipsis, a.T + a),
    "self_update": lambda a: a.__isub__(0.1 * (a * a)),
    "reverse": lambda a: a.__setitem__(Ellipsis, a[::-1] * 2 + a),
}


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_aliasing_matches_eager_numpy(name):
    base = np.arange(16, dtype=np.float64).reshape(4, 4) / 7

    def run():
        a = mt.from_numpy(base.copy())
        ALIASING[name](a)
        return a.numpy()
    expected, actual = both_backends(run)
    np.testing.assert_allclose(actual, expected)
    eager = base.copy()
    if name == "shift":
        eager[1:] = eager[:-1] + 1
    elif name == "transpose":
        eager[...] = eager.T + eager
    elif name == "self_update":
        eager -= 0.1 * (eager * eager)
    else:
        eager[...] = eager[::-1] * 2 + eager
    np.testing.assert_allclose(actual, eager)


def test_dst_read_in_place_uses_no_copy():
    w = mt.from_numpy(np.ones(10, np.float32))
    g = mt.from_numpy(np.full(10, 2, np.float32))
    with mt.using_cpu_backend("numba"), mt.count_kernels() as k:
        w[...] = -0.5 * (g + 0.1 * w)
    assert k["copy"] == 0 and k["fused"] == 1
    np.testing.assert_allclose(w.numpy(), -0.5 * (2 + 0.1))


def test_more_dims_than_kernels_fall_back():
    base = np.random.default_rng(2).standard_normal((2, 3, 4, 5, 6, 7))
    a = base[:, ::2, :, ::2, :, ::2].transpose(5, 0, 3, 1, 4, 2)
    expected, actual = both_backends(lambda: (mt.from_numpy(a) * 2 + 1).numpy())
    np.testing.assert_allclose(actual, expected)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0)])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy warns on the mean of nothing
def test_empty_and_scalar_tensors(shape):
    def run():
        x = mt.from_numpy(np.full(shape, 1.5))
        x += 2
        return x.numpy().copy(), (x * 3).sum().numpy(), x.mean(axis=-1 if shape else None).numpy()
    for expected, actual in zip(*both_backends(run)):
        np.testing.assert_array_equal(actual, expected)


def test_elementwise_goes_parallel(always_parallel):
    a = np.random.default_rng(4).standard_normal((64, 34)).astype(np.float32)

    def run():
        x = mt.from_numpy(a.copy())
        x[:, ::2] += x[:, ::2].sigmoid() * x[0, 1::2]
        return x.numpy()
    expected, actual = both_backends(run)
    assert_same(expected, actual, np.float32)


def test_transcendental_plans_use_numpy_simd_from_the_modelled_size():
    """Where a kernel's libm calls outgrow the NumPy evaluator's per-op calls
    (``numpy_from``): a tanh plan from a few hundred elements, an exp among
    arithmetic (a softmax row) from a few thousand, arithmetic and where never."""
    x = mt.from_numpy(np.ones(4, np.float32))
    tanh = make_plan((x * 2 + 1).tanh() * 0.5 + x, 1)[0]
    assert 100 < cpu_numba.numpy_from(tanh) < 1000
    assert cpu_numba.numpy_is_faster(tanh, 4096) and not cpu_numba.numpy_is_faster(tanh, 16)
    assert 1000 < cpu_numba.numpy_from(make_plan((x - 1.5).exp(), 1)[0]) < 10_000
    assert cpu_numba.numpy_from(make_plan(mt.where(x > 0, x * 2 + 1, 0), 1)[0]) == math.inf
    for n in (16, 4096):
        values = np.linspace(-3, 3, n, dtype=np.float32)
        expected, actual = both_backends(lambda v=values: mt.from_numpy(v).tanh().numpy())
        np.testing.assert_array_equal(actual, expected)


def test_a_tanh_plan_of_4096_elements_runs_on_numpy_and_an_arithmetic_one_compiled():
    """4096 elements through a compiled tanh took 7x the NumPy evaluator's time."""
    x = mt.from_numpy(np.linspace(-3, 3, 4096, dtype=np.float32))
    out = mt.empty(4096)
    with mt.using_cpu_backend("numba"):
        cpu_numba._LAUNCHES.clear()
        out[...] = (x * 2 + 1).tanh() * 0.5 + x
        out[...] = (x * 2 + 1) * 0.5 + x
        launches = list(cpu_numba._LAUNCHES.values())  # leaving the backend clears them
    assert [launch is None for launch in launches] == [True, False]  # None: NumPy's
    np.testing.assert_allclose(out.numpy(), (x.numpy() * 2 + 1) * 0.5 + x.numpy(), rtol=1e-6)


def test_weak_scalar_saver_follows_numpy():
    def run():
        x = mt.from_numpy(np.full(5, 1 / 3, np.float32))
        x += 0.1
        return x.numpy()
    expected, actual = both_backends(run)
    np.testing.assert_array_equal(actual, expected)


# ---- user ops ----------------------------------------------------------------

@pytest.fixture
def user_op():
    names = []

    def register(name, fn, **kw):
        mt.register_op(name, fn, "({0} * {0})", **kw)
        names.append(name)
    yield register
    for name in names:
        mt.unregister_op(name)


def test_user_op_is_compiled_into_the_kernel(user_op):
    user_op("nb_square_plus", lambda x, out=None: np.multiply(x, x) + np.tanh(x))
    a = np.linspace(-2, 2, 11)
    expected, actual = both_backends(
        lambda: (mt.apply_op("nb_square_plus", mt.from_numpy(a)) * 2).numpy())
    np.testing.assert_allclose(actual, expected)


def test_user_op_numba_cannot_compile_warns_and_runs_on_numpy(user_op):
    # ``out=`` handling works with NumPy arrays but not on scalars in nopython mode.
    user_op("nb_needs_arrays", lambda x, out=None: np.multiply(x, 2.0, out=out))
    x = mt.from_numpy(np.arange(3.0))
    with mt.using_cpu_backend("numba"):
        with pytest.warns(RuntimeWarning, match="nb_needs_arrays.*scalars in nopython mode") \
                as caught:
            got = (mt.apply_op("nb_needs_arrays", x) + 1).numpy()
        np.testing.assert_array_equal(got, np.arange(3.0) * 2 + 1)
        assert caught[0].filename == __file__  # it points at the user's line, not ours
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # one warning per Plan, not per call
            (mt.apply_op("nb_needs_arrays", x) + 1).numpy()


# ---- kernel caches -----------------------------------------------------------

def test_same_structure_reuses_the_kernel():
    with mt.using_cpu_backend("numba"):
        def step(n, lr):
            w = mt.from_numpy(np.ones(n, np.float32))
            g = mt.from_numpy(np.ones(n, np.float32))
            w[...] = w - lr * (g + 0.5 * w)
            return w.numpy()
        step(7, 0.1)
        before = cpu_numba.compile_stats()
        out = step(13, 0.25)
        assert cpu_numba.compile_stats() == before
    np.testing.assert_allclose(out, 1 - 0.25 * 1.5)


def test_kernel_source_is_readable():
    x = mt.from_numpy(np.ones(3, np.float32))
    plan, _, _ = make_plan(x * 2 + 1, 1)
    src = cpu_numba.kernel_source(plan, 1)
    assert "def serial(" in src and "def parallel(" in src and "prange(n0)" in src
    assert "t1 = " in src and "out[p] = " in src
    compile(src, "<kernel>", "exec")
    reduce_src = cpu_numba.reduce_source(plan, REDUCTIONS["sum"], 1, 1)
    compile(reduce_src, "<reduce>", "exec")


def test_a_group_kernel_stores_after_every_load():
    """Adam's three statements in one loop: each reads what the ones before stored
    from a local, so every store can wait until every array has been read (a load
    after a store that might alias it would have to wait for the store)."""
    w, m, v, g = (mt.from_numpy(np.ones(4, np.float32)) for _ in range(4))
    statements = [(m, 0.9 * m + 0.1 * g), (v, 0.99 * v + 0.01 * g * g),
                  (w, w - m / (v.sqrt() + 1e-8))]
    plans, leaves = [], []
    for _, e in statements:
        plan, own_leaves, _ = make_plan(e, 1)
        plans.append(plan)
        leaves += own_leaves
    kinds = cpu_numba._plan_group_loops([m, v, w], leaves).kinds
    src = cpu_numba.group_source(plans, 1, ["="] * 3, kinds, [np.dtype(np.float32)] * 3)
    body = src[src.index("def serial("):src.index("def parallel(")].splitlines()
    loads = [k for k, line in enumerate(body) if "= out" in line or "= in" in line]
    stores = [k for k, line in enumerate(body) if line.strip().startswith("out")]
    assert len(stores) == 3 and max(loads) < min(stores)
    compile(src, "<group kernel>", "exec")


SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    import minitorch_exp.tensor as mt
    from minitorch_exp.tensor import cpu_numba
    mt.set_cpu_backend("numba")
    w = mt.from_numpy(np.ones(100, np.float32))
    g = mt.from_numpy(np.ones(100, np.float32))
    w[...] = -0.1 * (g + 0.01 * w)
    s = (w * w).sum().item()
    print(json.dumps(cpu_numba.compile_stats()))
""")


def test_second_process_compiles_nothing(tmp_path):
    env = dict(os.environ, MINITORCH_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                             text=True, check=True, cwd=tmp_path)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["compiled"] >= 2
    assert runs[1]["compiled"] == 0 and runs[1]["loaded"] == runs[0]["compiled"]


@pytest.mark.parametrize("op", ["relu", "sign", "abs", "maximum", "minimum", "clip"])
def test_nan_propagates_as_in_numpy(op):
    a = np.array([np.nan, -1.5, 0.0, 2.0, -0.0, np.inf, -np.inf], dtype=np.float32)
    reference = {"relu": lambda x: np.maximum(x, 0), "sign": np.sign, "abs": np.abs,
                 "maximum": lambda x: np.maximum(x, 0.5), "minimum": lambda x: np.minimum(x, 0.5),
                 "clip": lambda x: np.clip(x, -1.0, 1.0)}[op]
    args = {"maximum": (0.5,), "minimum": (0.5,), "clip": (-1.0, 1.0)}.get(op, ())
    with mt.using_cpu_backend("numba"):
        got = (mt.apply_op(op, mt.from_numpy(a), *args) * 1).numpy()
    np.testing.assert_array_equal(got, reference(a))


THREADING_SCRIPT = textwrap.dedent("""
    import json, sys
    if sys.argv[1] == "numba first":
        import numba
    import minitorch_exp.tensor as mt
    import numba
    numba.set_num_threads(2)  # numba's threads start before the first kernel
    import numpy as np
    from minitorch_exp.tensor import cpu_numba
    mt.set_cpu_backend("numba")
    found = {"layer": numba.threading_layer(), "parallel_min": cpu_numba.parallel_min(),
             "priority": numba.config.THREADING_LAYER_PRIORITY}
    cpu_numba.set_parallel_min(0)
    w = mt.from_numpy(np.ones(1000, np.float32))
    w[...] = w * 2 + 1
    print(json.dumps({**found, "value": float(w.numpy()[0])}))
""")


@pytest.mark.parametrize("order", ["numba first", "minitorch_exp first"])
@pytest.mark.parametrize("preset", [None, "omp", "workqueue"])
def test_threading_layer_default_and_override(preset, order):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    env.pop("MINITORCH_PARALLEL_MIN", None)
    env["PYTHONPATH"] = str(ROOT)
    if preset:
        if preset == "omp" and not ctypes.util.find_library("gomp"):
            pytest.skip("libgomp is not installed")
        env["NUMBA_THREADING_LAYER"] = preset
    out = subprocess.run([sys.executable, "-c", THREADING_SCRIPT, order], env=env,
                         capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    # Without a layer named: TBB where it loads, else workqueue -- never GNU OpenMP.
    layer = preset or ("tbb" if pip_tbb_path() else "workqueue")
    default_priority = ["tbb", "omp", "workqueue"]  # numba's own, left alone under a preset
    assert found == {"layer": layer, "value": 3.0,
                     "parallel_min": cpu_numba.PARALLEL_MIN_BY_LAYER[layer],
                     "priority": default_priority if preset else ["tbb", "workqueue", "omp"]}

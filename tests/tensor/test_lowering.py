"""One lowering walk: what ``explain`` reports is what the engine runs.

``lower.split`` (explain's view) and ``engine.resolve_boundaries`` (what runs)
are the same walk with different visitors. Over hypothesis-drawn trees of maps,
casts, matmuls, reductions and views, the kernels ``split`` lists -- their
number and kinds -- equal the kernels the engine launches, and the values
equal NumPy's.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minitorch_exp.tensor as T
from minitorch_exp.tensor.lower import split

N = 4


def _leaf(draw_index):
    rng = np.random.default_rng(draw_index)
    a = rng.uniform(0.5, 1.5, (N, N))
    return T.from_numpy(a), a


leaves = st.integers(0, 3).map(_leaf)


def _combine(children):
    unary = st.sampled_from(["tanh", "exp_small", "times2", "T", "sum0", "sum1", "cast",
                             "reshape"])
    binary = st.sampled_from(["add", "mul", "matmul"])
    return st.one_of(
        st.tuples(unary, children).map(lambda t: _apply1(*t)),
        st.tuples(binary, children, children).map(lambda t: _apply2(*t)),
    )


def _apply1(op, node):
    e, a = node
    if op == "tanh":
        return e.tanh(), np.tanh(a)
    if op == "exp_small":
        return (e * 0.1).exp(), np.exp(a * 0.1)
    if op == "times2":
        return e * 2.0 + 1.0, a * 2.0 + 1.0
    if op == "T":
        return e.T, a.T
    if op == "cast":
        return e.astype("float32").astype("float64"), a.astype(np.float32).astype(np.float64)
    if op == "reshape":  # a view of a view: no copy where the first one is contiguous
        return e.T.reshape(N * N).reshape(N, N) * 3.0, a.T.reshape(N * N).reshape(N, N) * 3.0
    axis = int(op[-1])
    return e.sum(axis, keepdims=True) + e, a.sum(axis, keepdims=True) + a


def _apply2(op, x, y):
    (e, a), (f, b) = x, y
    if op == "add":
        return e + f, a + b
    if op == "mul":
        return e * f * 0.5, a * b * 0.5
    return (e @ f) * 0.25, (a @ b) * 0.25


trees = st.recursive(leaves, _combine, max_leaves=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, st.sampled_from(["=", "+="]))
def test_split_lists_the_kernels_the_engine_runs(tree, saver):
    e, want = tree
    if isinstance(e, T.Tensor):
        return  # a bare leaf: a copy, nothing to split
    kernels = split(e, e.shape).kernels
    planned = Counter(k.kind for k in kernels)
    dst = T.zeros(e.shape, dtype=e.dtype)
    with T.count_kernels() as ran:
        T.assign(dst, e, saver)
    counted = {kind: n for kind, n in ran.counts.items() if kind != "total" and n}
    assert counted == dict(planned), (kernels, ran.counts)
    np.testing.assert_allclose(dst.numpy(), want, rtol=1e-5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_split_without_a_destination_lists_the_kernels_evaluate_runs(tree):
    """``split(e)`` with no loop shape is ``evaluate(e)`` (what realizing a Node runs): a
    view over a computed base that is already contiguous is the result, no copy."""
    e, want = tree
    if isinstance(e, T.Tensor):
        return
    planned = Counter(k.kind for k in split(e).kernels)
    with T.count_kernels() as ran:
        got = T.evaluate(e)
    assert {kind: n for kind, n in ran.counts.items() if kind != "total" and n} == \
        dict(planned)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


def test_a_view_of_a_computed_base_costs_no_copy():
    x = T.from_numpy(np.arange(16.0).reshape(N, N))
    for view, kernels in [(lambda f: f, 1), (lambda f: f.reshape(N, N) + 1.0, 2),
                          (lambda f: f.reshape(2, 8), 1)]:
        flat = (x * 2.0).T.reshape(N * N)  # its base, computed, is laid out as viewed
        e = view(flat)
        assert len(split(e).kernels) == kernels
        with T.count_kernels() as ran:
            T.evaluate(e)
        assert ran.total == kernels

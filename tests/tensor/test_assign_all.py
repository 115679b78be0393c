"""assign_all: several statements, one loop -- always the result of running them in order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import (
    assign,
    assign_all,
    count_kernels,
    from_numpy,
    sqrt,
    using_cpu_backend,
)

B1, B2, LR, EPS = 0.9, 0.999, 1e-3, 1e-8


def adam_statements(w, g, m, v):
    return [(m, B1 * m + (1 - B1) * g), (v, B2 * v + (1 - B2) * g * g),
            (w, LR * m / (sqrt(v) + EPS), "-=")]


def adam_reference(w, g, m, v):
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    return w - LR * m / (np.sqrt(v) + EPS), m, v


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (0, 4)])
def test_adam_is_one_kernel_that_sees_each_statement_before_it(backend, shape):
    rng = np.random.default_rng(0)
    arrays = [rng.random(shape).astype(np.float32) + 0.5 for _ in range(4)]
    w, g, m, v = (from_numpy(a.copy()) for a in arrays)
    with using_cpu_backend(backend), count_kernels() as k:
        assign_all(adam_statements(w, g, m, v))
    expected = adam_reference(*arrays)
    for got, want in zip((w, m, v), expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert k.total == (1 if backend == "numba" else 3)


def test_a_dst_written_twice_and_read_between():
    a_np, b_np = np.arange(6.0), np.linspace(-1, 1, 6)
    a, b = from_numpy(a_np.copy()), from_numpy(b_np.copy())
    with count_kernels() as k:
        assign_all([(a, a * 2), (b, a + b), (a, b, "+=")])  # AdamW's decay, then its step
    assert k.total == 1
    np.testing.assert_allclose(b.numpy(), a_np * 2 + b_np)
    np.testing.assert_allclose(a.numpy(), a_np * 2 + a_np * 2 + b_np)


def test_strided_and_broadcast_operands_share_the_loop():
    base = np.arange(24.0).reshape(4, 6)
    x = from_numpy(base.copy())
    y = from_numpy(np.zeros((6, 4))).transpose(0, 1)  # a transposed dst
    bias = from_numpy(np.arange(6.0))
    with count_kernels() as k:
        assign_all([(x[:, ::2], x[:, ::2] + bias[::2]), (y[:, :3], x[:, ::2] * 10)])
    expected_x = base.copy()
    expected_x[:, ::2] += np.arange(6.0)[::2]
    np.testing.assert_allclose(x.numpy(), expected_x)
    np.testing.assert_allclose(y.numpy()[:, :3], expected_x[:, ::2] * 10)
    assert k.total == 1


def test_reading_a_dst_at_other_elements_runs_one_at_a_time():
    a_np = np.arange(8.0)
    a = from_numpy(a_np.copy())
    b = from_numpy(np.zeros(7))
    with count_kernels() as k:
        assign_all([(a[1:], a[:-1] + 1), (b, a[1:] * 2)])
    a_np[1:] = a_np[:-1] + 1
    np.testing.assert_allclose(a.numpy(), a_np)
    np.testing.assert_allclose(b.numpy(), a_np[1:] * 2)
    assert k.total >= 2  # separate statements (plus the copy that the first one needs)


def test_products_and_other_shapes_run_one_at_a_time():
    rng = np.random.default_rng(1)
    a_np, b_np = rng.random((3, 4)), rng.random((4, 2))
    a, b = from_numpy(a_np.copy()), from_numpy(b_np.copy())
    out, small = from_numpy(np.zeros((3, 2))), from_numpy(np.zeros(2))
    assign_all([(out, a @ b), (small, out.sum(0))])
    np.testing.assert_allclose(out.numpy(), a_np @ b_np)
    np.testing.assert_allclose(small.numpy(), (a_np @ b_np).sum(0))
    assign_all([(a, a + 1), (small, small * 2)])  # dsts of two shapes
    np.testing.assert_allclose(a.numpy(), a_np + 1)
    np.testing.assert_allclose(small.numpy(), (a_np @ b_np).sum(0) * 2)


def test_bad_statements_raise_what_assign_raises_and_nothing_runs():
    a, b = from_numpy(np.zeros(3)), from_numpy(np.zeros(4))
    with pytest.raises(ValueError, match=r"shape \(4,\) cannot be written into a tensor of shape"):
        assign_all([(a, a + 1), (a, b)])
    np.testing.assert_array_equal(a.numpy(), np.zeros(3))
    assign_all([])  # nothing to do


# ---- random groups against the statements run one at a time ------------------------

OPS = [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - 0.5 * y,
       lambda x, y: (x * x + 1).sqrt() * y]
SAVERS = ["=", "+=", "-=", "*="]


@st.composite
def groups(draw):
    """2-4 statements over one buffer's views and two others, some sharing elements."""
    n = draw(st.integers(1, 6))
    slots = ["a", "b", "c", "a_rev", "a_view"]
    statements = []
    for _ in range(draw(st.integers(2, 4))):
        statements.append((draw(st.sampled_from(slots)), draw(st.sampled_from(range(len(OPS)))),
                           draw(st.sampled_from(slots)), draw(st.sampled_from(slots)),
                           draw(st.sampled_from(SAVERS))))
    return n, statements


def _operands(n, buffers):
    a, b, c = buffers
    return {"a": a[:n], "b": b, "c": c, "a_rev": a[:n][::-1], "a_view": a[n:2 * n]}


@settings(max_examples=120, deadline=None)
@given(case=groups())
def test_random_groups_equal_the_statements_in_order(case):
    n, statements = case
    rng = np.random.default_rng(n)
    start = [rng.random(2 * n) + 0.5, rng.random(n) + 0.5, rng.random(n) + 0.5]
    results = []
    for run in ("grouped", "in order"):
        buffers = [from_numpy(x.copy()) for x in start]
        views = _operands(n, buffers)
        built = [(views[d], OPS[op](views[x], views[y]), saver)
                 for d, op, x, y, saver in statements]
        if run == "grouped":
            assign_all(built)
        else:  # the reference: one statement at a time, each built when it runs
            for d, op, x, y, saver in statements:
                assign(views[d], OPS[op](views[x], views[y]), saver)
        results.append([t.numpy().copy() for t in buffers])
    for grouped, in_order in zip(*results):
        np.testing.assert_allclose(grouped, in_order, rtol=1e-12)

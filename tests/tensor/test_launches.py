"""Kept launches: a statement built afresh reaches its kernel call through its key.

The engine keeps each statement's launch (kernel and argument template) under
a key of its structure, its leaves' layouts and which leaves share dst's
storage (``plan.statement_key``). A map gathers its tree's leaves and scalars
as it is built, so the key needs no walk. A hit skips planning and loop
layout, so every test here asks whether a hit is still *right*: the arrays and
scalar values of this statement are read, not the first one's; a statement
that differs in anything the call depends on (layout, aliasing, saver, dtype)
gets its own launch; a tree that changed since it gathered (a node realized)
is walked instead; and switching the evaluator or dropping a user op forgets
the launches.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import (
    apply_op,
    count_kernels,
    engine,
    from_numpy,
    plan,
    register_op,
    unregister_op,
    using_cpu_backend,
)
from minitorch_exp.tensor import (
    assign_all as mt_assign_all,
)
from minitorch_exp.tensor.engine import realize
from minitorch_exp.tensor.expr import MAX_GATHERED_LEAVES

from .strategies import arrays, broadcastable_to, shapes


@pytest.fixture(autouse=True)
def numba_evaluator():
    with using_cpu_backend("numba"):
        yield


def kept() -> int:
    return len(engine._STATEMENT_LAUNCHES)


def test_a_rebuilt_statement_reuses_the_launch_with_this_calls_arrays_and_scalars():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(9)
    w, g = from_numpy(w0.copy()), from_numpy(rng.standard_normal(9))
    ref = w0.copy()
    w[...] = -0.5 * (g + 0.25 * w)  # first time: the launch is made
    ref = -0.5 * (g.numpy() + 0.25 * ref)
    before = kept()
    for step in range(1, 4):
        g2 = from_numpy(rng.standard_normal(9))  # a new leaf of the same layout
        eta = 0.1 * step  # and a new scalar value
        with count_kernels() as k:
            w[...] = -eta * (g2 + 0.25 * w)
        ref = -eta * (g2.numpy() + 0.25 * ref)
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-12)
        assert k.total == 1
    assert kept() == before  # every rebuilt statement found the one launch


def test_the_key_holds_layouts_and_aliasing_but_no_values():
    a, b = from_numpy(np.arange(6.0)), from_numpy(np.ones(6))
    key, leaves, scalars = plan.statement_key(a, 2.0 * b + a, "=")
    key2, _, scalars2 = plan.statement_key(a, 3.0 * b + a, "=")
    assert key == key2 and list(scalars) == [2.0] and list(scalars2) == [3.0]
    assert [t is s for t, s in zip(leaves, [b, a])] == [True, True]
    assert plan.statement_key(a, 2.0 * b[::-1] + a, "=")[0] != key  # another layout
    assert plan.statement_key(b, 2.0 * b + a, "=")[0] != key  # another leaf is dst
    assert plan.statement_key(a, 2.0 * b + a, "+=")[0] != key  # another saver


def test_a_map_gathers_its_leaves_and_scalars_and_one_structure_has_one_token():
    a, b = from_numpy(np.arange(6.0)), from_numpy(np.ones(6))
    e = 2.0 * b + a
    assert [t is s for t, s in zip(e.leaves, [b, a])] == [True, True]
    assert e.scalars == (2.0,)
    assert (3.0 * b + a).token is e.token  # scalar values are not structure
    assert (2.0 * a + b).token is e.token  # nor which tensors of that shape
    assert (2.0 * b - a).token is not e.token
    assert (2.0 * b + a.astype("float32")).token is not e.token
    assert (2 * b[:3] + a[:3]).token is not e.token  # another shape, scalar type


def test_a_node_realized_after_its_parent_was_built_is_read_as_realized():
    """The parent gathered the node's leaves; once the node is realized the statement
    must read the remembered tensor, as the walk does -- not recompute it."""
    x, y, out = from_numpy(np.arange(4.0)), from_numpy(np.ones(4)), from_numpy(np.zeros(4))
    inner = x * 2
    outer = inner + y
    realize(inner)
    x.numpy()[...] = 100.0  # not seen by the realized inner
    out[...] = outer
    np.testing.assert_array_equal(out.numpy(), np.arange(4.0) * 2 + 1)
    later = inner * 3  # built after: gathers the realized tensor as a leaf
    assert later.leaves[0] is inner.realized
    out[...] = later
    np.testing.assert_array_equal(out.numpy(), np.arange(4.0) * 6)
    above = outer * 1.0  # built after, over a tree that gathered before the realize
    out[...] = above
    np.testing.assert_array_equal(out.numpy(), np.arange(4.0) * 2 + 1)


@pytest.mark.parametrize("build", [
    lambda x, y: (s := x * y) + s * 2,  # a subtree used twice
    lambda x, y: x.astype("float32").astype("float64") + y,  # a cast: walked
    lambda x, y: sum((x * float(k) for k in range(MAX_GATHERED_LEAVES)), y),  # too big
])
def test_shared_cast_and_big_trees_give_numpys_values(build):
    rng = np.random.default_rng(3)
    xa, ya = rng.standard_normal(5), rng.standard_normal(5)
    x, y, out = from_numpy(xa), from_numpy(ya), from_numpy(np.zeros(5))
    for _ in range(2):  # the first time makes the launch, the second reuses it
        out[...] = build(x, y)
        np.testing.assert_allclose(out.numpy(), build(xa, ya), rtol=1e-6)


def test_a_leaf_that_stops_aliasing_dst_gets_its_own_launch():
    """``w[...] = g * 2 + w`` reads w where it writes; the same statement into another
    tensor of that layout must read ``w`` as an input, not as dst."""
    wa, ga = np.arange(5.0), np.full(5, 3.0)
    w, g, out = from_numpy(wa.copy()), from_numpy(ga.copy()), from_numpy(np.zeros(5))
    w[...] = g * 2 + w
    out[...] = g * 2 + w
    np.testing.assert_allclose(w.numpy(), ga * 2 + wa)
    np.testing.assert_allclose(out.numpy(), ga * 2 + (ga * 2 + wa))


def test_views_that_differ_only_in_offset_read_their_own_elements():
    base = np.arange(10.0)
    x, out = from_numpy(base.copy()), from_numpy(np.zeros(5))
    for start in (2, 0, 5, 2):
        out[...] = x[start:start + 5] * 2
        np.testing.assert_array_equal(out.numpy(), base[start:start + 5] * 2)
    for start in (1, 3):  # and dst's offset too
        y = from_numpy(np.zeros(8))
        y[start:start + 5] = x[:5] + 1
        expected = np.zeros(8)
        expected[start:start + 5] = base[:5] + 1
        np.testing.assert_array_equal(y.numpy(), expected)


def test_an_overlapping_read_is_copied_on_every_hit():
    """``a[1:] = a[:-1] * 2`` reads what it writes, shifted: each run reads a private
    copy (NumPy's answer), the kept launch included."""
    for _ in range(3):
        data = np.arange(8.0)
        a = from_numpy(data.copy())
        a[1:] = a[:-1] * 2
        expected = data.copy()
        expected[1:] = data[:-1] * 2
        np.testing.assert_array_equal(a.numpy(), expected)


def test_two_leaves_that_share_a_storage_only_the_first_time():
    base = np.arange(10.0)
    x = from_numpy(base.copy())
    out = from_numpy(np.zeros(5))
    out[...] = x[:5] + x[5:] * 10  # both leaves view one storage
    np.testing.assert_array_equal(out.numpy(), base[:5] + base[5:] * 10)
    y, z = from_numpy(np.full(10, 2.0)), from_numpy(np.full(10, 7.0))
    out[...] = y[:5] + z[5:] * 10  # the same key, each leaf its own storage now
    np.testing.assert_array_equal(out.numpy(), np.full(5, 72.0))


def test_switching_the_evaluator_or_unregistering_an_op_forgets_the_launches():
    a = from_numpy(np.ones(4))
    a[...] = a * 2
    assert kept() > 0
    with using_cpu_backend("numpy"):
        assert kept() == 0
        a[...] = a * 2
    assert kept() == 0
    register_op("triple_k", lambda x: x * 3, "{0} * 3")
    try:
        a[...] = apply_op("triple_k", a)
        assert kept() > 0
    finally:
        unregister_op("triple_k")
    assert kept() == 0
    np.testing.assert_array_equal(a.numpy(), np.full(4, 12.0))  # 1 * 2 * 2 * 3


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_statements_of_one_structure_over_any_layouts_match_numpy(data):
    """The same statement over tensors of drawn shapes, strides and broadcasts, run
    twice with new values: the second run, a kept launch when the layouts repeat,
    matches NumPy as the first does."""
    shape = data.draw(shapes(1, 3, 1, 4))
    for _ in range(2):
        dst_arr = data.draw(arrays(shape, np.float64))
        g_arr = data.draw(arrays(data.draw(broadcastable_to(shape)), np.float64))
        eta = data.draw(st.floats(-2, 2))
        expected = -eta * (g_arr + 0.5 * dst_arr)
        dst, g = from_numpy(dst_arr), from_numpy(g_arr)
        dst[...] = -eta * (g + 0.5 * dst)
        np.testing.assert_allclose(dst.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_a_kept_launch_never_lets_a_bad_statement_through():
    """Checks run for every new key, and a key that failed is never kept: a statement
    like a good one but with another dtype, saver or shape still raises, every time."""
    a = from_numpy(np.arange(4, dtype=np.int64))
    f, wide = from_numpy(np.ones(4)), from_numpy(np.ones(5, dtype=np.int64))
    a[...] = a * 2  # kept
    for _ in range(2):
        with pytest.raises(TypeError, match="float64 expression into a int64"):
            a[...] = f * 2
        with pytest.raises(TypeError, match="true division"):
            a /= a * 2
        with pytest.raises(ValueError, match=r"shape \(5,\) cannot be written"):
            a[...] = wide * 2
    a[...] = a * 2
    np.testing.assert_array_equal(a.numpy(), np.arange(4) * 4)


# ---- groups (assign_all) -----------------------------------------------------------

def adam_like(w, g, m, v, lr):
    return [(m, 0.9 * m + 0.1 * g), (v, 0.99 * v + 0.01 * g * g),
            (w, w - lr * m / ((v + 1e-8) ** 0.5), "=")]


def test_a_rebuilt_group_reuses_its_launch_and_reads_each_statement_in_order():
    rng = np.random.default_rng(3)
    arrays_ = [rng.random(6) + 0.5 for _ in range(4)]
    w, g, m, v = (from_numpy(a.copy()) for a in arrays_)
    rw, rg, rm, rv = (a.copy() for a in arrays_)
    kept = None
    for step in range(1, 4):
        lr = 0.01 * step
        with count_kernels() as k:
            mt_assign_all(adam_like(w, g, m, v, lr))
        rm = 0.9 * rm + 0.1 * rg
        rv = 0.99 * rv + 0.01 * rg * rg
        rw = rw - lr * rm / ((rv + 1e-8) ** 0.5)
        for got, want in ((w, rw), (m, rm), (v, rv)):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
        assert k.total == 1
        if kept is None:
            kept = len(engine._GROUP_LAUNCHES)
        assert len(engine._GROUP_LAUNCHES) == kept


def test_a_group_whose_sharing_changes_gets_its_own_launch():
    """First ``b`` reads ``a`` after the statement writing it (the new values);
    then the same statements over tensors that share nothing read ``c``'s own."""
    a, b = from_numpy(np.ones(4)), from_numpy(np.zeros(4))
    mt_assign_all([(a, a + 1), (b, a * 10)])
    np.testing.assert_array_equal(b.numpy(), np.full(4, 20.0))
    c, d, e = from_numpy(np.ones(4)), from_numpy(np.zeros(4)), from_numpy(np.full(4, 5.0))
    mt_assign_all([(c, c + 1), (d, e * 10)])
    np.testing.assert_array_equal(d.numpy(), np.full(4, 50.0))
    np.testing.assert_array_equal(c.numpy(), np.full(4, 2.0))


def test_statements_that_cannot_share_a_loop_run_one_by_one_every_time():
    """The second statement reads the first one's dst shifted: one loop would read
    elements not yet written; each run, kept decision or not, matches NumPy."""
    for _ in range(2):
        base = np.arange(6.0)
        a, b = from_numpy(base.copy()), from_numpy(np.zeros(5))
        with count_kernels() as k:
            mt_assign_all([(a, a * 2), (b, a[1:] + 1)])
        np.testing.assert_array_equal(a.numpy(), base * 2)
        np.testing.assert_array_equal(b.numpy(), base[1:] * 2 + 1)
        assert k.total == 2


def test_a_bad_statement_in_a_group_raises_every_time():
    a, b = from_numpy(np.ones(3, dtype=np.int64)), from_numpy(np.ones(3))
    mt_assign_all([(a, a + 1), (b, b * 2)])
    for _ in range(2):
        with pytest.raises(TypeError, match="float64 expression into a int64"):
            mt_assign_all([(a, b + 1), (b, b * 2)])
        np.testing.assert_array_equal(b.numpy(), np.full(3, 2.0))  # nothing ran

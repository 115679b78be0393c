"""The cache owner: every memo is registered, bounded, and invalidated in one place."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import minitorch_exp.tensor as T
from minitorch_exp.tensor import caches, counters, register_op, unregister_op
from minitorch_exp.tensor import engine as E


@contextlib.contextmanager
def small_limits(limit: int = 8):
    """Every memo bounded to ``limit`` entries for the block (restored after)."""
    tables = list(caches._MEMOS.values())
    saved = [t.limit for t in tables]
    try:
        for t in tables:
            t.limit = limit
            t.clear()
        yield
    finally:
        for t, n in zip(tables, saved):
            t.limit = n


def test_every_memo_of_the_statement_path_is_registered():
    names = {info.name for info in caches.cache_info()}
    for name in ("expr.scalars", "expr.map_info", "expr.map_dtypes", "tokens.interned",
                 "plan.plans", "engine.statement_launches", "engine.group_launches"):
        assert name in names
    for info in caches.cache_info():
        assert 0 < info.limit and info.size <= info.limit, info


def test_a_memo_never_holds_more_than_its_bound():
    table = caches.Memo("test.table", 5)
    for i in range(100):
        assert table.memo(i, lambda i=i: i * i) == i * i
        assert len(table) <= 5


def test_filling_every_memo_past_its_bound_keeps_results_right():
    """Many distinct statements (shapes, dtypes, ops, scalars, layouts) with every memo
    bounded to 8: no table grows past 8 and every result still equals NumPy's."""
    rng = np.random.default_rng(0)
    with small_limits(8):
        for n in range(1, 40):
            for dtype in (np.float32, np.float64):
                a = rng.standard_normal((n, 3)).astype(dtype)
                b = rng.standard_normal(3).astype(dtype)
                x, y = T.from_numpy(a), T.from_numpy(b)
                out = T.empty((n, 3), dtype=dtype)
                out[...] = (x * float(n) + y).tanh() - x.T.T / 2
                np.testing.assert_allclose(out.numpy(), np.tanh(a * n + b) - a / 2, rtol=1e-5)
                m = T.from_numpy(a.copy())
                T.assign_all([(m, m * 0.5), (out, out + m)])
                np.testing.assert_allclose(m.numpy(), a * 0.5, rtol=1e-6)
                assert all(info.size <= 8 for info in caches.cache_info()), caches.cache_info()


def _stale_tables_empty() -> bool:
    return all(info.size == 0 for info in caches.cache_info() if info.stale_on_invalidate)


def _run_a_statement():
    w = T.ones(5)
    w[...] = w * 2 + 1
    return w


@pytest.mark.parametrize("change", ["cpu_backend", "debug", "unregister_op", "clear_caches"])
def test_each_change_invalidates_through_the_owner(change):
    w = _run_a_statement()
    assert len(E._STATEMENT_LAUNCHES) > 0
    before = caches.generation()
    epoch = T.expr.EPOCH
    if change == "cpu_backend":
        with T.using_cpu_backend("numpy"):
            assert _stale_tables_empty()
    elif change == "debug":
        level = counters.debug_level()
        counters.set_debug(level)
        assert _stale_tables_empty()
    elif change == "unregister_op":
        register_op("owner_probe", lambda x, out=None: np.negative(x, out=out), "(-{0})")
        unregister_op("owner_probe")
        assert _stale_tables_empty()
    else:
        caches.clear_caches()
        assert all(info.size == 0 for info in caches.cache_info())
    assert caches.generation() > before
    assert T.expr.EPOCH > epoch  # prepared assignments are over too
    np.testing.assert_array_equal(w.numpy(), np.full(5, 3.0, np.float32))
    np.testing.assert_array_equal(_run_a_statement().numpy(), np.full(5, 3.0, np.float32))


def test_clear_caches_and_cache_info_are_public():
    assert T.clear_caches is caches.clear_caches
    assert T.cache_info is caches.cache_info

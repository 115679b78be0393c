"""Matrix products run on one BLAS thread, large ones in row blocks shared between
threads (tensor/blas.py).

On a busy machine OpenBLAS's own threads made an MLP's products 2-9x slower than
one thread, and its bits differ between one thread and two; blocks cut by shape and
thread count alone, taken by whichever thread is free, keep the bits and never wait
for a thread that is not scheduled.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitorch_exp.tensor import blas


class FakePool:
    """A BLAS thread pool that records what it was set to while a product ran."""

    def __init__(self, threads: int):
        self.threads, self.history = threads, []

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.threads = n
        self.history.append(n)


@pytest.fixture
def pool(monkeypatch):
    """A 4-thread BLAS pool."""
    fake = FakePool(4)
    monkeypatch.setitem(blas._state, "pool", fake)
    monkeypatch.setitem(blas._state, "min", 1 << 22)
    return fake


SHAPES = [((64, 128), (128, 64)), ((3, 64, 64), (64, 128)), ((128,), (128, 2048)),
          ((8, 64, 32), (8, 32, 256)), ((5, 7), (7,))]


@pytest.mark.parametrize(("sa", "sb"), SHAPES)
def test_products_equal_numpy_s(sa, sb, pool):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    np.testing.assert_array_equal(blas.matmul(a, b), np.matmul(a, b))
    out = np.empty(np.matmul(a, b).shape)
    assert blas.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, np.matmul(a, b))


def test_a_mid_size_product_runs_on_one_thread_and_gives_the_pool_back(pool):
    a, b = np.ones((64, 128)), np.ones((128, 64))  # 2^19 multiply-adds
    blas.matmul(a, b)
    assert pool.history == [1, 4] and pool.threads == 4


def test_the_choice_does_not_depend_on_the_machine_s_load(pool):
    """The same product on the same pool takes the same path every time (it read the
    run queue once, and then a busy machine gave other bits than an idle one)."""
    assert not hasattr(blas, "busy") and not hasattr(blas, "runnable")
    for _ in range(3):
        blas.matmul(np.ones((64, 128)), np.ones((128, 64)))
    assert pool.history == [1, 4] * 3


def test_small_products_leave_the_pool_alone(pool):
    blas.matmul(np.ones((4, 4)), np.ones((4, 4)))  # BLAS stays serial on its own
    assert pool.history == []


def test_a_large_product_runs_in_blocks_on_one_blas_thread(pool, monkeypatch):
    """2^24 multiply-adds, 4 threads: four 64-row blocks, each a one-thread BLAS call."""
    calls = []
    team = RecordingTeam(calls)
    monkeypatch.setitem(blas._state, "team", team)
    a, b = np.ones((256, 256)), np.ones((256, 256))
    np.testing.assert_array_equal(blas.matmul(a, b), np.full((256, 256), 256.0))
    assert pool.history == [1, 4]
    assert [blk[0].shape[0] for blk in calls] == [64, 64, 64, 64] and team.helpers_asked == 3


def test_a_wide_product_is_cut_by_columns(pool, monkeypatch):
    """Wider than tall (x @ W.T at batch 128): columns, so the smaller operand is the
    one each block packs whole."""
    calls = []
    monkeypatch.setitem(blas._state, "team", RecordingTeam(calls))
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((128, 784)), rng.standard_normal((784, 256))
    out = np.empty((128, 256))
    assert blas.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    assert [blk[1].shape for blk in calls] == [(784, 64)] * 4
    assert all(blk[0] is a and blk[2].base is out for blk in calls)


def test_the_pool_comes_back_when_the_product_fails(pool):
    with pytest.raises(ValueError):
        blas.matmul(np.ones((64, 128)), np.ones((128, 64)), out=np.empty((3, 3)))
    assert pool.threads == 4


def test_set_parallel_min_and_its_checks(pool):
    blas.set_parallel_min(0)
    try:
        blas.matmul(np.ones((64, 128)), np.ones((128, 64)))
        assert pool.history == []  # 0: BLAS decides for every product
    finally:
        blas.set_parallel_min(None)
    assert blas.parallel_min() == blas.DEFAULT_PARALLEL_MIN
    with pytest.raises(ValueError, match="multiply-adds >= 0"):
        blas.set_parallel_min(-5)


def test_the_real_pool_is_found_and_restored():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    blas._state["pool"] = False  # look it up again
    found = blas._pool()
    if found is None:
        pytest.skip("no single BLAS library found by threadpoolctl")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        blas.matmul(np.ones((64, 128), np.float32), np.ones((128, 64), np.float32))
        assert found.get_num_threads() == 2


class RecordingTeam(blas.Team):
    """A Team that records the blocks it was given."""

    def __init__(self, calls):
        super().__init__()
        self.calls, self.helpers_asked = calls, None

    def run(self, blocks, helpers):
        self.calls.extend(blocks)
        self.helpers_asked = helpers
        super().run(blocks, helpers)


@given(st.integers(0, 5000), st.integers(1, 64))
def test_row_blocks_cover_the_rows_at_aligned_starts(rows, threads):
    bounds = blas.row_blocks(rows, threads)
    if bounds is None:
        assert min(threads, rows // blas.ROW_ALIGN) < 2
        return
    assert bounds[0] == 0 and bounds[-1] == rows
    assert 2 <= len(bounds) - 1 <= threads
    assert all(lo < hi for lo, hi in zip(bounds, bounds[1:]))
    assert all(lo % blas.ROW_ALIGN == 0 for lo in bounds[:-1])


MLP_PRODUCTS = [((128, 784), (784, 256)), ((256, 128), (128, 784)), ((784, 128), (128, 256)),
                ((512, 784), (784, 512)), ((512, 256), (256, 10)), ((100, 300), (300, 70))]


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("sa", "sb"), MLP_PRODUCTS)
def test_shared_blocks_give_the_bits_of_one_thread_running_them(sa, sb, dtype, threads):
    """Whichever thread takes a block, the product has the bits of one BLAS thread
    running the same blocks in turn -- also for transposed operands and into ``out``
    -- so how busy the machine is never changes a run's numbers."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if blas._pool() is None:
        pytest.skip("no single BLAS library found by threadpoolctl")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    at, bt = np.asfortranarray(a), np.asfortranarray(b)  # transposed storage: other kernels
    bounds = blas.row_blocks(max(sa[0], sb[1]), threads)
    spans = [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    saved = blas.parallel_min()
    blas.set_parallel_min(1 << 18)  # every product here is shared
    try:
        with threadpoolctl.threadpool_limits(1, user_api="blas"):
            if sa[0] >= sb[1]:  # cut by rows, else by columns (the longer side)
                want, want_t = ([x[s] @ y for s in spans] for x, y in ((a, b), (at, bt)))
                joined = 0
            else:
                want, want_t = ([x @ y[:, s] for s in spans] for x, y in ((a, b), (at, bt)))
                joined = 1
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            out = np.empty((sa[0], sb[1]), dtype)
            assert blas.matmul(a, b, out=out) is out
            for got in (out, *(blas.matmul(a, b) for _ in range(5))):
                np.testing.assert_array_equal(got, np.concatenate(want, joined))
            np.testing.assert_array_equal(blas.matmul(at, bt), np.concatenate(want_t, joined))
    finally:
        blas.set_parallel_min(saved)


def test_the_caller_finishes_alone_when_no_helper_runs(pool, monkeypatch):
    """A busy machine may not schedule a helper at all: the caller takes every block."""
    team = blas.Team()
    team.helpers = 8  # it believes they exist, but none was started
    monkeypatch.setitem(blas._state, "team", team)
    a, b = np.arange(256.0 * 64).reshape(256, 64), np.ones((64, 1024))
    np.testing.assert_array_equal(blas.matmul(a, b), np.matmul(a, b))
    assert pool.history == [1, 4]


def test_an_error_in_a_block_reaches_the_caller():
    job = blas.Job([(np.ones((4, 3)), np.ones((3, 2)), np.empty((4, 5)))])
    job.work()
    with pytest.raises(ValueError):
        job.wait()


def test_a_product_into_its_own_operand_is_not_cut(pool):
    """Rows written by one block would be read by another: computed whole, as NumPy."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((512, 512)), rng.standard_normal((512, 512))
    want = np.matmul(a.copy(), b)
    blas.matmul(a, b, out=a)
    np.testing.assert_allclose(a, want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_helpers(pool):
    a, b = np.ones((256, 64)), np.ones((64, 1024))
    blas.matmul(a, b)  # the parent's helpers exist now
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if the product is right
        fresh = "team" not in blas._state
        ok = fresh and np.array_equal(blas.matmul(a, b), np.full((256, 1024), 64.0))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_products_from_several_threads_at_once_are_right():
    """User threads sharing the team: each caller works through its own job, whatever
    job the helpers follow, so every product comes out whole and right."""
    import threading

    rng = np.random.default_rng(4)
    pairs = [(rng.standard_normal((256, 96)), rng.standard_normal((96, 512))) for _ in range(4)]
    wants = [a @ b for a, b in pairs]
    saved = blas.parallel_min()
    blas.set_parallel_min(1 << 18)
    errors = []

    def work(i):
        a, b = pairs[i]
        for _ in range(20):
            got = blas.matmul(a, b)
            if not np.allclose(got, wants[i], rtol=1e-10, atol=1e-10):
                errors.append(i)

    threadpoolctl = pytest.importorskip("threadpoolctl")
    try:
        with threadpoolctl.threadpool_limits(2, user_api="blas"):
            threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        blas.set_parallel_min(saved)
    assert errors == []

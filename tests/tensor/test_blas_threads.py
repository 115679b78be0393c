"""Matrix products use BLAS's threads only where they pay (tensor/blas.py).

On a busy machine a multi-threaded product of a few million multiply-adds ran 4-7x
slower than on one thread, so below ``parallel_min()`` a product runs on one thread
and the pool gets its own count back after. The choice depends on the size only:
OpenBLAS's bits differ between one thread and two, and a run's numbers must not
depend on the machine's load.
"""

from __future__ import annotations

import numpy as np
import pytest

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


def test_small_and_large_products_leave_the_pool_alone(pool):
    blas.matmul(np.ones((4, 4)), np.ones((4, 4)))  # BLAS stays serial on its own
    blas.matmul(np.ones((256, 256)), np.ones((256, 256)))  # 2^24: may use the threads
    assert pool.history == []


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

"""``mt.set_num_threads`` / ``mt.get_num_threads``: PyTorch's names for the threads CPU
work may use -- numba's kernels and BLAS's products (tensor/threads.py)."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.tensor import blas

numba = pytest.importorskip("numba")


@pytest.fixture
def restored():
    """Put numba's and BLAS's thread counts back after the test."""
    pool = blas._pool()
    saved = numba.get_num_threads(), pool.get_num_threads() if pool is not None else None
    yield pool
    numba.set_num_threads(saved[0])
    if pool is not None:
        pool.set_num_threads(saved[1])


def test_one_thread_reaches_numba_and_blas(restored):
    mt.set_num_threads(1)
    assert mt.get_num_threads() == 1 == numba.get_num_threads()
    if restored is not None:
        assert restored.get_num_threads() == 1


def test_a_product_with_one_thread_is_not_shared(restored, monkeypatch):
    """One thread: a float64 product large enough to be shared runs whole, in no tiles
    (small-matrix tiles are float32's)."""
    class NoBlocks:
        small_kernels = True

        def run(self, *args):
            raise AssertionError("a product was shared with one thread set")

    mt.set_num_threads(1)
    monkeypatch.setitem(blas._state, "gemm", NoBlocks())
    monkeypatch.setitem(blas._state, "min", 1 << 18)
    a, b = np.ones((256, 64)), np.ones((64, 512))
    np.testing.assert_array_equal(blas.matmul(a, b), np.full((256, 512), 64.0))


def test_every_count_numba_started_is_accepted(restored):
    for n in range(1, numba.config.NUMBA_NUM_THREADS + 1):
        mt.set_num_threads(n)
        assert mt.get_num_threads() == n


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "2", 10_000])
def test_a_count_outside_what_numba_started_is_refused(bad, restored):
    with pytest.raises(ValueError, match="a thread count from 1 to"):
        mt.set_num_threads(bad)

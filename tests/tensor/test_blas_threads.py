"""Matrix products run on one BLAS thread, large ones in blocks of rows or columns
shared between numba's threads (tensor/blas.py).

On a busy machine OpenBLAS's own threads made an MLP's products 2-9x slower than
one thread, and its bits differ between one thread and two; blocks cut by shape and
thread count alone, taken by whichever thread is free, keep the bits and never wait
for a thread that is not scheduled.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
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
def gemm():
    """The CBLAS calls blocks are made of (skips where products are not cut)."""
    found = blas._gemm()
    if found is None:
        pytest.skip("products are not cut here: no OpenBLAS found, or numba's workqueue layer")
    return found


@pytest.fixture
def pool(monkeypatch, machine):
    """A 4-thread BLAS pool (the real library's CBLAS calls looked up first), on a
    machine with cores to spare."""
    blas._gemm()
    fake = FakePool(4)
    monkeypatch.setitem(blas._state, "pool", fake)
    monkeypatch.setitem(blas._state, "min", 1 << 22)
    return fake


SHAPES = [((64, 128), (128, 64)), ((3, 64, 64), (64, 128)), ((128,), (128, 2048)),
          ((8, 64, 32), (8, 32, 256)), ((5, 7), (7,)),
          ((1, 500, 50), (1, 50, 1024)), ((1, 1, 64, 128), (128, 512)),
          ((256, 128), (1, 128, 64))]  # batches of one: cut as their one 2-D product


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("sa", "sb"), SHAPES)
def test_products_have_the_bits_of_their_tiles_on_one_thread(sa, sb, dtype, threads):
    """The promise, on any CPU and BLAS build: a product has the bits of its tiles
    computed one after another on one BLAS thread (``_one_thread_reference``), and
    NumPy's values within rounding. NumPy's own bits are no reference: on some
    OpenBLAS kernels they change with OpenBLAS's thread count (AVX2's, 8 threads:
    3309 of 512000 elements of (500, 50) @ (50, 1024) in float64)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if blas._pool() is None:
        pytest.skip("no single BLAS library found by threadpoolctl")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(dtype) for s in (sa, sb))
    want = _one_thread_reference(a, b, threads)
    with threadpoolctl.threadpool_limits(threads, user_api="blas"):
        got = blas.matmul(a, b)
        out = np.empty(want.shape, dtype)
        assert blas.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(out, want)
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = 4 * np.finfo(dtype).eps * a.shape[-1] * np.matmul(np.abs(a), np.abs(b))
    assert np.all(np.abs(got - exact) <= bound)


def _one_thread_reference(a, b, threads):
    """``a @ b`` as ``blas.matmul`` promises it for a pool of ``threads``: the tiles
    ``_cut`` makes of the product (of its one 2-D matrix each for a batch of one),
    computed one after another on one BLAS thread."""
    lead = a.shape[:-2] + b.shape[:-2]
    if a.ndim >= 2 and b.ndim >= 2 and all(n == 1 for n in lead):
        a2, b2 = a.reshape(a.shape[-2:]), b.reshape(b.shape[-2:])
        product = _tiled(a2, b2, _tiles(a2, b2, threads))
        return product.reshape((1,) * (max(a.ndim, b.ndim) - 2) + product.shape)
    return _tiled(a, b, None)


def test_a_batch_of_one_is_cut_as_its_one_product(pool, gemm, monkeypatch):
    """A convolution's products are batches of one, ``(1, 500, 50) @ (1, 50, 8192)``:
    computed as the 2-D product of views (no copy), so they are shared between threads
    too -- into ``out`` as well."""
    recorder = RecordingGemm(gemm)
    monkeypatch.setitem(blas._state, "gemm", recorder)
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((1, 500, 50)), rng.standard_normal((1, 50, 8192))
    np.testing.assert_allclose(blas.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)
    out = np.full((1, 500, 8192), np.nan)
    assert blas.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    assert len(recorder.cuts) == 2 and recorder.threads == [4, 4]
    flat_out = np.full((500, 8192), np.nan)  # an out NumPy takes too, as NumPy does
    blas.matmul(a, b, out=flat_out)
    np.testing.assert_allclose(flat_out, (a @ b)[0], rtol=1e-12, atol=1e-12)


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


def test_a_large_product_runs_in_blocks_on_one_blas_thread(pool, gemm, monkeypatch):
    """2^24 multiply-adds in float64, 4 threads: four tiles of 64 rows, each a one-thread
    BLAS call."""
    recorder = RecordingGemm(gemm)
    monkeypatch.setitem(blas._state, "gemm", recorder)
    a, b = np.ones((256, 256)), np.ones((256, 256))
    np.testing.assert_array_equal(blas.matmul(a, b), np.full((256, 256), 256.0))
    assert pool.history == [1, 4]
    (cut,) = recorder.cuts
    assert cut == (blas.AS_STORED, 256, blas.AS_STORED, 256, 64, 256)


def test_a_wide_product_is_cut_by_columns(pool, gemm, monkeypatch):
    """Wider than tall (x @ W.T at batch 128): columns, so the smaller operand is the
    one each tile packs whole."""
    recorder = RecordingGemm(gemm)
    monkeypatch.setitem(blas._state, "gemm", recorder)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((128, 784)), rng.standard_normal((784, 256))
    out = np.empty((128, 256))
    assert blas.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    (cut,) = recorder.cuts
    assert cut[-2:] == (128, 64)


@pytest.mark.parametrize(("sa", "sb"), [((32, 784), (784, 256)), ((128, 256), (256, 784)),
                                        ((128, 256), (256, 512))])
def test_float32_products_run_in_small_tiles_with_the_same_bits_on_any_thread_count(sa, sb,
                                                                                  gemm):
    """Where OpenBLAS has its small-matrix kernels, float32 products of an MLP run in
    32 x 32 tiles, on one thread too; the tiles do not depend on the thread count, so
    neither do the bits."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not gemm.small_kernels:
        pytest.skip("this OpenBLAS has no small-matrix kernels")
    rng = np.random.default_rng(6)
    a = rng.standard_normal(sa).astype(np.float32)
    b = np.asfortranarray(rng.standard_normal(sb).astype(np.float32))  # x @ W.T's layout
    assert _tiles(a, b, 1) == (32, 32)
    got = []
    for threads in (1, 2, 4):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            got.append(blas.matmul(a, b))
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[0], got[2])
    np.testing.assert_array_equal(got[0], _tiled(a, b, (32, 32)))
    np.testing.assert_allclose(got[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def _tiles(a, b, threads: int):
    """The (rows, columns) of the tiles ``blas.matmul`` cuts ``a @ b`` into on
    ``threads`` threads, or None: whole."""
    cut = blas._cut(a, b, None, threads, blas._work(a, b))
    return None if cut is None else cut[-2:]


@pytest.mark.parametrize(("shape", "layout", "tile"), [
    ((32, 784, 256), "NT", (32, 32)),     # x @ W.T of an MLP at batch 32
    ((256, 32, 784), "TN", (32, 32)),     # g.T @ x: short sums are fine here
    ((32, 256, 784), "NN", (32, 32)),     # g @ W
    ((64, 1000, 100), "NT", (32, 16)),    # 32 x 32 x 1000 would pass the kernels' bound
    ((64, 2000, 100), "NT", None),        # even 32 x 16 would
    ((4096, 64, 64), "NT", None),         # x @ W.T with short sums: whole is faster
    ((4096, 64, 64), "NN", (32, 32)),
    ((128, 256, 128), "TT", None),        # both transposed: never
    ((32, 32, 32), "NN", None),           # one tile
    ((64, 100, 100), "NN", None),         # 640K multiply-adds: below SMALL_MIN_WORK
    ((1024, 256, 1024), "NN", None),      # 268M: above SMALL_MAX_WORK
])
def test_which_float32_products_take_small_tiles(shape, layout, tile, gemm, monkeypatch):
    """The measured rule (``blas.small_tile``), through ``_cut`` on one thread."""
    monkeypatch.setattr(gemm, "small_kernels", True)
    rows, k, cols = shape
    a = np.zeros((rows, k) if layout[0] == "N" else (k, rows), np.float32)
    b = np.zeros((k, cols) if layout[1] == "N" else (cols, k), np.float32)
    a, b = (a if layout[0] == "N" else a.T), (b if layout[1] == "N" else b.T)
    assert _tiles(a, b, 1) == tile
    assert _tiles(a.astype(np.float64), b.astype(np.float64), 1) is None  # float32 only


@pytest.mark.parametrize("threads", [1, 4])
def test_small_tiles_are_shared_only_where_blas_has_several_threads(threads, gemm, monkeypatch,
                                                                   machine):
    """The BLAS pool's count bounds the threads a product uses: with one BLAS thread its
    tiles run on the caller's thread alone, whatever numba's count, in the loop
    compiled without numba's threads."""
    monkeypatch.setattr(gemm, "small_kernels", True)
    recorder = RecordingGemm(gemm)
    monkeypatch.setitem(blas._state, "gemm", recorder)
    monkeypatch.setitem(blas._state, "pool", FakePool(threads))
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 784)).astype(np.float32), rng.standard_normal((784, 256))
    got = blas.matmul(a, b.astype(np.float32))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert recorder.cuts[0][-2:] == (32, 32) and recorder.threads == [threads]
    assert (np.dtype(np.float32), threads > 1) in gemm._runs


def test_on_a_busy_machine_tiles_run_on_the_caller_with_the_same_bits(pool, gemm, monkeypatch,
                                                                    machine):
    """Every core has another thread to serve: the tiles run on the calling thread (the
    loop compiled without numba's threads), and give the bits of the shared run --
    blocks too, which are cut by the pool's count, not by who runs them."""
    recorder = RecordingGemm(gemm)
    monkeypatch.setitem(blas._state, "gemm", recorder)
    rng = np.random.default_rng(8)
    for a, b in ((rng.standard_normal((64, 784)).astype(np.float32),
                  rng.standard_normal((784, 256)).astype(np.float32)),   # small tiles
                 (rng.standard_normal((256, 512)), rng.standard_normal((512, 256)))):  # blocks
        recorder.threads.clear()
        machine.busy = False
        shared = blas.matmul(a, b)
        machine.busy = True
        alone = blas.matmul(a, b)
        assert recorder.threads == [4, 1]
        np.testing.assert_array_equal(alone, shared)


def test_without_small_kernels_one_thread_computes_whole(gemm, monkeypatch):
    monkeypatch.setattr(gemm, "small_kernels", False)
    a, b = np.zeros((32, 784), np.float32), np.zeros((784, 256), np.float32)
    assert _tiles(a, b, 1) is None


@pytest.mark.parametrize(("rows", "k", "cols"), [(32, 784, 256), (512, 64, 64), (16, 512, 512),
                                                 (128, 256, 10)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_linear_layer_s_product_computed_whole_is_numpy_s_in_c_order(rows, k, cols, dtype):
    """``x @ W.T`` whole -- by ``(W @ x.T).T`` where the result is wide, else as it is --
    gives NumPy's values in C order (so ``.view`` works on it, as in PyTorch)."""
    rng = np.random.default_rng(rows + cols)
    x, w = (rng.standard_normal(shape).astype(dtype) for shape in ((rows, k), (cols, k)))
    got = blas._whole(x, w.T, None)
    assert got.flags.c_contiguous and got.dtype == dtype
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=tol, atol=tol * k)


def _tiled(a, b, tiles):
    """``a @ b`` computed tile by tile with NumPy on one BLAS thread (``tiles``: a tile's
    rows and columns; None: whole)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        if tiles is None:
            return np.matmul(a, b)
        out = np.empty((a.shape[0], b.shape[1]), a.dtype)
        tr, tc = tiles
        for r in range(0, a.shape[0], tr):
            for c in range(0, b.shape[1], tc):
                out[r:r + tr, c:c + tc] = a[r:r + tr] @ b[:, c:c + tc]
        return out


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


def test_the_pool_reads_the_count_threadpoolctl_sets():
    """The pool's own count reader (OpenBLAS's function, where it has one) follows every
    way the count is set: threadpoolctl's limits, ours, and back."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    blas._state["pool"] = False
    pool = blas._pool()
    if pool is None:
        pytest.skip("no single BLAS library found by threadpoolctl")
    before = pool.controller.get_num_threads()
    for n in (3, 1, 2):
        with threadpoolctl.threadpool_limits(n, user_api="blas"):
            assert pool.get_num_threads() == n == pool.controller.get_num_threads()
        assert pool.get_num_threads() == before
    blas.set_pool_threads(3)
    try:
        assert pool.get_num_threads() == 3 == pool.controller.get_num_threads()
    finally:
        blas.set_pool_threads(before)


class RecordingGemm:
    """The real tile runner, recording how each product was cut."""

    def __init__(self, real):
        self.real, self.cuts, self.threads = real, [], []
        self.small_kernels = real.small_kernels

    def run(self, a, b, out, *cut, threads):
        self.cuts.append(cut)
        self.threads.append(threads)
        self.real.run(a, b, out, *cut, threads=threads)


@given(st.integers(0, 5000), st.integers(1, 64))
def test_a_span_cuts_n_into_at_most_threads_aligned_tiles(n, threads):
    step = blas.span(n, threads)
    if step is None:
        assert min(threads, n // blas.ROW_ALIGN) < 2
        return
    tiles = -(-n // step)
    assert 2 <= tiles <= threads and step % blas.ROW_ALIGN == 0 and (tiles - 1) * step < n


@settings(max_examples=300)
@given(rows=st.integers(1, 300), cols=st.integers(1, 300), tile_rows=st.sampled_from([16, 32]),
       tile_cols=st.sampled_from([16, 32]), threads=st.integers(1, 4))
def test_tiles_are_numbered_so_each_thread_reads_a_band_of_the_larger_operand(
        rows, cols, tile_rows, tile_cols, threads):
    """``tile_origin`` numbers every tile once; a thread's run of consecutive tiles
    (numba hands them out so) spans a band of columns of a result wider than tall --
    a part of ``b``, and ``a`` whole -- and a band of rows otherwise."""
    tall, wide = -(-rows // tile_rows), -(-cols // tile_cols)
    origins = [blas.tile_origin(t, rows, cols, tile_rows, tile_cols) for t in range(tall * wide)]
    assert sorted(origins) == [(r * tile_rows, c * tile_cols)
                               for r in range(tall) for c in range(wide)]
    run = -(-len(origins) // threads)  # each thread's share, as a static split gives it
    for first in range(0, len(origins), run):
        share = origins[first:first + run]
        rows_read = {r for r, _ in share}
        cols_read = {c for _, c in share}
        if cols > rows:  # at most the two partial columns of tiles at its ends
            assert len(rows_read) == tall or len(cols_read) <= 2
            assert [c for _, c in share] == sorted(c for _, c in share)
        else:
            assert len(cols_read) == wide or len(rows_read) <= 2
            assert [r for r, _ in share] == sorted(r for r, _ in share)


MLP_PRODUCTS = [((128, 784), (784, 256)), ((256, 128), (128, 784)), ((784, 128), (128, 256)),
                ((512, 784), (784, 512)), ((512, 256), (256, 10)), ((100, 300), (300, 70))]


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("sa", "sb"), MLP_PRODUCTS)
def test_shared_blocks_give_the_bits_of_one_thread_running_them(sa, sb, dtype, threads):
    """Whichever thread takes a tile, the product has the bits of one BLAS thread
    running the same tiles in turn -- also for transposed operands and into ``out``
    -- so how busy the machine is never changes a run's numbers."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if blas._pool() is None:
        pytest.skip("no single BLAS library found by threadpoolctl")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    at, bt = np.asfortranarray(a), np.asfortranarray(b)  # transposed storage: other kernels
    saved = blas.parallel_min()
    blas.set_parallel_min(1 << 18)  # every product here is shared
    try:
        want, want_t = (_tiled(x, y, _tiles(x, y, threads)) for x, y in ((a, b), (at, bt)))
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            out = np.empty((sa[0], sb[1]), dtype)
            assert blas.matmul(a, b, out=out) is out
            for got in (out, *(blas.matmul(a, b) for _ in range(5))):
                np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(blas.matmul(at, bt), want_t)
    finally:
        blas.set_parallel_min(saved)


def test_the_caller_finishes_alone_when_no_other_thread_runs(pool, gemm):
    """A busy machine may schedule no other thread: with numba's threads cut to one,
    the caller runs all four blocks itself, with the same bits."""
    numba = pytest.importorskip("numba")
    a, b = np.arange(256.0 * 64).reshape(256, 64) / 7, np.ones((64, 1024)) / 3
    want = blas.matmul(a, b)
    saved = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        np.testing.assert_array_equal(blas.matmul(a, b), want)
    finally:
        numba.set_num_threads(saved)
    assert pool.history == [1, 4] * 2


def test_operands_that_do_not_match_get_numpy_s_error(pool, gemm):
    with pytest.raises(ValueError, match="matmul"):
        blas.matmul(np.ones((256, 128)), np.ones((256, 128)))
    assert pool.threads == 4


def _view(m, how: str):
    """``m``'s values laid out as ``how`` says: C order, Fortran order (a transposed
    operand), every other row or column of a larger array, or inside a wider one."""
    if how == "C":
        return np.ascontiguousarray(m)
    if how == "F":
        return np.asfortranarray(m)
    if how == "step":
        big = np.zeros((m.shape[0], 2 * m.shape[1]), m.dtype)
        big[:, ::2] = m
        return big[:, ::2]
    big = np.zeros((m.shape[0] + 3, m.shape[1] + 5), m.dtype)  # "inside": ld > columns
    big[2:-1, 3:-2] = m
    return big[2:-1, 3:-2]


LAYOUTS = st.sampled_from(["C", "F", "step", "inside"])


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 300), st.integers(1, 70), st.integers(2, 300), LAYOUTS, LAYOUTS,
       st.sampled_from([None, "C", "inside"]), st.sampled_from([np.float32, np.float64]),
       st.integers(2, 4))
def test_any_layout_of_operands_and_out_gives_numpy_s_product(rows, k, cols, how_a, how_b,
                                                             how_out, dtype, threads):
    """Blocks read operands where they lie (CBLAS's leading dimensions and transposes)
    and write into ``out`` where it lies; layouts CBLAS cannot read are not cut."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if blas._gemm() is None:
        pytest.skip("products are not cut here")
    rng = np.random.default_rng(rows * k + cols)
    a = _view(rng.standard_normal((rows, k)).astype(dtype), how_a)
    b = _view(rng.standard_normal((k, cols)).astype(dtype), how_b)
    out = None if how_out is None else _view(np.full((rows, cols), np.nan, dtype), how_out)
    saved = blas.parallel_min(), blas._BLAS_SERIAL_BELOW
    blas.set_parallel_min(1)
    blas._BLAS_SERIAL_BELOW = 0
    try:
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            got = blas.matmul(a, b, out=out)
    finally:
        blas.set_parallel_min(saved[0])
        blas._BLAS_SERIAL_BELOW = saved[1]
    assert out is None or got is out
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=tol, atol=tol * k)


def test_a_product_into_its_own_operand_is_not_cut(pool):
    """Rows written by one block would be read by another: computed whole, as NumPy."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((512, 512)), rng.standard_normal((512, 512))
    want = np.matmul(a.copy(), b)
    blas.matmul(a, b, out=a)
    np.testing.assert_allclose(a, want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
# forking a process whose threads have run is the point (Python 3.12 warns of it)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_computes_products_in_blocks(pool, gemm):
    a, b = np.ones((256, 64)), np.ones((64, 1024))
    blas.matmul(a, b)  # the parent's threads have run blocks
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if the product is right
        ok = np.array_equal(blas.matmul(a, b), np.full((256, 1024), 64.0))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_products_from_several_threads_at_once_are_right():
    """User threads cutting products at the same time: numba's threads serve each
    caller's blocks, so every product comes out whole and right."""
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


def test_a_product_in_another_thread_reads_the_user_s_count_not_ours(pool, gemm, monkeypatch):
    """While one thread's product runs its tiles (BLAS set to one thread meanwhile), a
    product in another thread still reads the user's count -- not the one the first
    set for its tiles -- so it is cut the same way and gives the same bits; the pool
    is the user's again once both are done, and a count the user sets meanwhile is
    the one it comes back to."""
    import threading

    inside, release, seen = threading.Event(), threading.Event(), []

    class Pausing:  # the first product waits inside its tiles until the second has run
        small_kernels = gemm.small_kernels

        def run(self, *args, threads):
            seen.append(threads)
            if len(seen) == 1:
                inside.set()
                assert release.wait(30)
            gemm.run(*args, threads=threads)

    monkeypatch.setitem(blas._state, "gemm", Pausing())
    a, b = np.ones((256, 256)), np.ones((256, 256))  # 2^24 multiply-adds: blocks
    results = []
    first = threading.Thread(target=lambda: results.append(blas.matmul(a, b)))
    first.start()
    try:
        assert inside.wait(30)
        results.append(blas.matmul(a, b))
        assert pool.threads == 1  # the first product still runs on one BLAS thread
        blas.set_pool_threads(3)  # the user's new count, while a product runs
        assert pool.threads == 1
    finally:
        release.set()
        first.join()
    assert seen == [4, 4]
    assert pool.threads == 3
    for got in results:
        np.testing.assert_array_equal(got, np.full((256, 256), 256.0))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 600), st.integers(1, 600), LAYOUTS, LAYOUTS,
       st.sampled_from([None, "C", "inside", "F"]), st.sampled_from([np.float32, np.float64]))
def test_a_one_term_product_is_one_blas_call_with_each_product_s_bits(rows, cols, how_a,
                                                                      how_b, how_out, dtype):
    """A column times a row (a linear layer's weight gradient at batch 1): NumPy's matmul
    leaves BLAS for a one-term sum and ran it 15x slower (a (512, 1) @ (1, 784) product:
    464 us against 30). Computed here by one CBLAS call where CBLAS can read the
    operands and ``out``, else as NumPy's broadcast multiply: each element is its one
    product either way, the bits of ``np.multiply``."""
    rng = np.random.default_rng(rows * 1000 + cols)
    a = _view(rng.standard_normal((rows, 1)).astype(dtype), how_a)
    b = _view(rng.standard_normal((1, cols)).astype(dtype), how_b)
    out = None if how_out is None else _view(np.full((rows, cols), np.nan, dtype), how_out)
    calls = []
    real = blas._gemm()
    if real is not None:
        class Spy(RecordingGemm):
            def run(self, *args, threads):
                calls.append(args[3:])
                super().run(*args, threads=threads)
        saved = blas._state["gemm"]
        blas._state["gemm"] = Spy(real)
    try:
        got = blas.matmul(a, b, out=out)
    finally:
        if real is not None:
            blas._state["gemm"] = saved
    assert out is None or got is out
    want = np.multiply(a, b)
    np.testing.assert_array_equal(got, want)
    if real is not None and blas._operands(a, b, out) is not None:  # CBLAS reads them
        assert len(calls) == 1 and calls[0][-2:] == (rows, cols), calls


@pytest.mark.parametrize("given_out", [False, True])
def test_a_batch_of_rows_times_a_matrix_is_one_product(monkeypatch, given_out):
    """``a`` (..., m, k) C-ordered times one matrix -- a linear layer on (batch, time,
    features) -- is one 2-D product of all of ``a``'s rows, not one per leading index:
    NumPy's values, written into ``out`` when one is given."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 40, 64)).astype(np.float32)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    products = []
    real = blas.matmul

    def counted(x, y, out=None):
        products.append(x.shape)
        return real(x, y, out)

    monkeypatch.setattr(blas, "matmul", counted)
    out = np.empty((3, 40, 32), np.float32) if given_out else None
    got = real(a, w.T, out)
    np.testing.assert_allclose(got, np.matmul(a, w.T), rtol=1e-5, atol=1e-5)
    assert got.shape == (3, 40, 32) and (out is None or got is out)
    assert products == [(120, 64)]

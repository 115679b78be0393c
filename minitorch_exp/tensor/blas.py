"""Matrix products through BLAS, shared between threads by blocks of rows or columns.

OpenBLAS's own threads split a product and wait for the last of them. On a busy
machine (other processes wanting the cores) a thread waits a timeslice for its
partner to be scheduled, spinning meanwhile: products of an MLP's sizes ran up to 8x
slower on two OpenBLAS threads than on one beside three busy processes per core
(docs/eager.md). And OpenBLAS splits differently on one thread than on two, so
its sums come out in other bits: a choice of threads that followed the machine's
load would make a run's numbers depend on what else the machine was doing.

So BLAS itself runs on one thread here, and a product of at least
``parallel_min()`` multiply-adds is cut into blocks -- one per thread of the BLAS
pool's count, each a multiple of ``ROW_ALIGN`` rows (or columns, when the result is
wider than tall). A compiled loop (``Gemm.run``) hands the blocks to numba's
threads with the GIL let go, each block one call of the library's own
``cblas_sgemm``/``cblas_dgemm`` on one thread:

- the cut depends on the shapes and the thread count only, and each block is the
  same one-thread BLAS call whichever thread runs it: load changes who does the
  work, never the bits. (The thread count can change the last bits of some
  products, as OpenBLAS's own threads do: a block of few rows or columns may take
  another of its kernels than the uncut product.)
- numba's TBB threads steal blocks: when no other thread is scheduled, the caller
  runs every block itself, at one thread's speed.
- handing out blocks costs about 2 us, where waking a Python helper thread through
  a lock took 50-115 us on a 2-core VM: products of an MLP at batch 32 gain too.

The pool's count is the user's (``mt.set_num_threads``, ``OPENBLAS_NUM_THREADS``,
threadpoolctl's ``threadpool_limits``) and comes back after each product.
``MINITORCH_BLAS_PARALLEL_MIN`` or ``set_parallel_min`` move the bound (0: OpenBLAS
decides everything, as plain NumPy). Products are not cut without threadpoolctl
(which finds the BLAS library), with a BLAS other than OpenBLAS, or under numba's
workqueue threading layer (which must not be entered from two threads at once).
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os

import numpy as np

#: Multiply-adds from which a product is shared between threads: on two idle cores
#: a (32, 784) @ (784, 256) product (6.4M) takes 0.6x one thread's time in blocks
#: (benchmarks/bench_blas.py, docs/eager.md).
DEFAULT_PARALLEL_MIN = 1 << 21
#: Below this OpenBLAS itself stays on one thread: no switching needed.
_BLAS_SERIAL_BELOW = 1 << 18
#: Row blocks start at multiples of this, OpenBLAS's widest row kernel (16 float32
#: rows on Haswell): no block starts inside one of its tiles.
ROW_ALIGN = 16
#: CBLAS's enums: row-major storage, an operand as stored or transposed.
ROW_MAJOR, AS_STORED, TRANSPOSED = 101, 111, 112


_env = os.environ.get("MINITORCH_BLAS_PARALLEL_MIN", "").strip()
#: The sharing bound, the BLAS pool's controller and the ``Gemm`` (False: not looked
#: up yet; None: there is none).
_state: dict = {"min": int(_env) if _env else DEFAULT_PARALLEL_MIN, "pool": False,
                "gemm": False}


def parallel_min() -> int:
    """Multiply-adds from which a matrix product is shared between threads."""
    return _state["min"]


def set_parallel_min(work: int | None) -> None:
    """Share products of at least ``work`` multiply-adds between threads (0: let
    OpenBLAS decide every product; None: the default)."""
    if work is not None and (not isinstance(work, int) or work < 0):
        raise ValueError(f"set_parallel_min: a number of multiply-adds >= 0, got {work!r}")
    _state["min"] = DEFAULT_PARALLEL_MIN if work is None else work


def _pool():
    """The BLAS library's thread controller (threadpoolctl), or None without one."""
    pool = _state["pool"]
    if pool is False:
        pool = None
        try:
            from threadpoolctl import ThreadpoolController
            found = ThreadpoolController().select(user_api="blas").lib_controllers
            pool = found[0] if len(found) == 1 else None  # one BLAS: the one NumPy calls
        except ImportError:
            pass
        _state["pool"] = pool
    return pool


def matmul(a, b, out=None):
    """``np.matmul(a, b, out=out)``: on one BLAS thread, in blocks shared between the
    pool's count of threads from ``parallel_min()`` multiply-adds on."""
    work = _work(a, b)
    if work < _BLAS_SERIAL_BELOW or _state["min"] == 0:
        return np.matmul(a, b, out=out)
    pool = _pool()
    threads = pool.get_num_threads() if pool is not None else 1
    if threads == 1:
        return np.matmul(a, b, out=out)
    cut = _blocks(a, b, out, threads) if work >= _state["min"] else None
    pool.set_num_threads(1)
    try:
        if cut is None:
            return np.matmul(a, b, out=out)
        out, blocks = cut
        _gemm().run(blocks, out.dtype == np.float64)
        return out
    finally:
        pool.set_num_threads(threads)


def row_blocks(rows: int, threads: int) -> tuple[int, ...] | None:
    """Where ``threads`` blocks of ``rows`` rows (or columns) start and end: as even as
    ``ROW_ALIGN`` allows, every block but the last a multiple of it; None when there
    are too few for two blocks. Depends on its arguments only."""
    count = min(threads, rows // ROW_ALIGN)
    if count < 2:
        return None
    step = -(-rows // count // ROW_ALIGN) * ROW_ALIGN  # ceil(rows / count), aligned up
    starts = range(0, rows, step)
    return (*starts, rows)


def _blocks(a, b, out, threads: int) -> tuple | None:
    """``out`` (made if None) and the CBLAS calls of ``a @ b`` cut into blocks along the
    result's longer side, one row of ``Gemm.run``'s table each. Each block packs the
    operand it does not cut whole, so the smaller operand is the one packed twice
    (``x @ W.T`` at batch 128: 518 us by rows, 445 us by columns, 642 us on one
    thread). None: not cut (``_blockable``, or no ``Gemm`` here)."""
    if not _blockable(a, b, out) or _gemm() is None:
        return None
    rows, cols = a.shape[0], b.shape[1]
    bounds = row_blocks(max(rows, cols), threads)
    if bounds is None:
        return None
    if out is None:
        out = np.empty((rows, cols), a.dtype)
    (trans_a, lda), (trans_b, ldb) = _as_cblas(a), _as_cblas(b)
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
    ldc = out.strides[0] // out.itemsize
    table = np.empty((len(bounds) - 1, 11), np.int64)
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if rows >= cols:  # rows lo:hi of a and of the result
            shape, at = (hi - lo, cols), (pa + lo * a.strides[0], pb, pc + lo * out.strides[0])
        else:  # columns lo:hi of b and of the result
            shape, at = (rows, hi - lo), (pa, pb + lo * b.strides[1], pc + lo * out.strides[1])
        table[i] = (trans_a, trans_b, *shape, a.shape[1], at[0], lda, at[1], ldb, at[2], ldc)
    return out, table


def _blockable(a, b, out) -> bool:
    """A plain 2-D float32 or float64 product, not a matrix-vector one, whose operands
    CBLAS can read as they lie (``_as_cblas``), and whose ``out`` (if any) has the
    result's shape and dtype, rows of unit stride, and shares no memory with an
    operand: writing one block cannot change what another reads."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _REALS:
        return False
    if a.shape[1] != b.shape[0] or a.shape[0] < 2 or b.shape[1] < 2:
        return False  # a mismatch: np.matmul says so; one row or column: BLAS's gemv
    if _as_cblas(a) is None or _as_cblas(b) is None:
        return False
    if out is None:
        return True
    return (out.shape == (a.shape[0], b.shape[1]) and out.dtype == a.dtype
            and _as_cblas(out) == (AS_STORED, out.strides[0] // out.itemsize)
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b))


_REALS = (np.dtype(np.float32), np.dtype(np.float64))


def _as_cblas(m) -> tuple[int, int] | None:
    """How CBLAS reads the 2-D array ``m`` in place: as stored (unit stride along rows)
    or transposed (along columns), and its leading dimension; None when neither."""
    if not m.flags.aligned or any(s % m.itemsize for s in m.strides):
        return None
    (s0, s1), (rows, cols) = (s // m.itemsize for s in m.strides), m.shape
    if s1 == 1 and s0 >= max(1, cols):
        return AS_STORED, s0
    if s0 == 1 and s1 >= max(1, rows):
        return TRANSPOSED, s1
    return None


def _work(a, b) -> int:
    """Multiply-adds of ``a @ b`` (batched and 1-D operands as ``np.matmul`` reads them)."""
    if a.ndim == 0 or b.ndim == 0:
        return 0
    rows = a.shape[-2] if a.ndim > 1 else 1
    cols = b.shape[-1] if b.ndim > 1 else 1
    batch = max(math.prod(a.shape[:-2]), math.prod(b.shape[:-2]))
    return batch * rows * a.shape[-1] * cols


class Gemm:
    """``cblas_sgemm`` and ``cblas_dgemm`` of the BLAS library NumPy calls, and ``run``:
    a compiled loop that computes the rows of a table of their arguments (``_blocks``)
    on numba's threads, without the GIL."""

    def __init__(self, sgemm, dgemm, blasint):
        import numba

        for fn, real in ((sgemm, ctypes.c_float), (dgemm, ctypes.c_double)):
            fn.restype = None
            fn.argtypes = [ctypes.c_int] * 3 + [blasint] * 3 + [
                real, ctypes.c_void_p, blasint, ctypes.c_void_p, blasint, real,
                ctypes.c_void_p, blasint]
        cint = numba.int32
        bint = numba.int64 if blasint is ctypes.c_int64 else numba.int32
        one, zero = np.float32(1.0), np.float32(0.0)

        @numba.njit(nogil=True, parallel=True)
        def run(table, double):
            for i in numba.prange(table.shape[0]):
                ta, tb, m, n, k, pa, lda, pb, ldb, pc, ldc = table[i]
                if double:
                    dgemm(cint(ROW_MAJOR), cint(ta), cint(tb), bint(m), bint(n), bint(k),
                          1.0, pa, bint(lda), pb, bint(ldb), 0.0, pc, bint(ldc))
                else:
                    sgemm(cint(ROW_MAJOR), cint(ta), cint(tb), bint(m), bint(n), bint(k),
                          one, pa, bint(lda), pb, bint(ldb), zero, pc, bint(ldc))

        self.run = run

    @classmethod
    def find(cls) -> Gemm | None:
        """The ``Gemm`` of NumPy's OpenBLAS (its symbols may carry a prefix and a suffix:
        ``scipy_cblas_sgemm64_``), or None: another BLAS, or numba's workqueue layer."""
        pool = _pool()
        if pool is None or getattr(pool, "internal_api", None) != "openblas":
            return None
        lib = ctypes.CDLL(pool.filepath)
        for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
            names = [f"{prefix}{name}{suffix}"
                     for name in ("cblas_sgemm", "cblas_dgemm", "openblas_get_config")]
            if all(hasattr(lib, name) for name in names):
                break
        else:
            return None
        sgemm, dgemm, config = (getattr(lib, name) for name in names)
        config.restype = ctypes.c_char_p
        blasint = ctypes.c_int64 if b"USE64BITINT" in config() else ctypes.c_int32
        if _numba_layer() == "workqueue":
            return None
        return cls(sgemm, dgemm, blasint)


def _numba_layer() -> str:
    """numba's threading layer (its threads started, which fixes it)."""
    import numba
    numba.get_num_threads()
    return numba.threading_layer()


def _gemm() -> Gemm | None:
    gemm = _state["gemm"]
    if gemm is False:
        gemm = _state["gemm"] = Gemm.find()
    return gemm

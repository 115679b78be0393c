"""Matrix products through BLAS, on one BLAS thread, in tiles shared between threads.

OpenBLAS's own threads split a product and wait for the last of them. On a busy
machine (other processes wanting the cores) a thread waits a timeslice for its
partner to be scheduled, spinning meanwhile, so beside busy processes products of
an MLP's sizes ran several times slower on two OpenBLAS threads than on one
(docs/eager.md, "Threads on a busy machine"). And OpenBLAS splits differently on
one thread than on two, so its sums come out in other bits: a choice of threads
that followed the machine's load would make a run's numbers depend on what else
the machine was doing.

So BLAS itself runs on one thread here, and a plain 2-D float product may be cut
into tiles (``_cut``), each one call of the library's own ``cblas_sgemm`` /
``cblas_dgemm`` on one thread, handed to numba's threads by a compiled loop with
the GIL let go (``Gemm.run``):

- small tiles (``small_tile``) where OpenBLAS has small-matrix kernels: 32 x 32
  float32 tiles it computes without packing, faster than one whole call even on one
  thread, and cheap to share out;
- else, from ``parallel_min()`` multiply-adds, one block of rows or columns per
  thread of the BLAS pool's count, each a multiple of ``ROW_ALIGN``.

The cut depends on the shapes (and, for blocks, the thread count) only, and each
tile is the same one-thread BLAS call whichever thread runs it: load changes who
does the work, never the bits. numba's TBB threads steal tiles: when no other
thread is scheduled, the caller runs every tile itself, at one thread's speed; and
while other work fills every core (``load.busy``) the caller runs them all from
the start, where a partner descheduled in the middle of a tile would hold it.
Handing tiles to numba's threads costs a small fraction of waking Python helper
threads through a lock, which is why small products can be shared at all
(docs/eager.md, "Threads on a busy machine", has the timings).

The pool's count is the user's (``mt.set_num_threads``, ``OPENBLAS_NUM_THREADS``,
threadpoolctl's ``threadpool_limits``), bounds the threads a product's tiles run
on, and comes back when the last product running ends: products in several user
threads at once all read the user's count (``_borrow``).
``MINITORCH_BLAS_PARALLEL_MIN`` or ``set_parallel_min`` move the blocks' bound (0:
OpenBLAS decides everything, as plain NumPy). Products are not cut without
threadpoolctl (which finds the BLAS library), with a BLAS other than OpenBLAS, or
under numba's workqueue threading layer (which must not be entered from two threads
at once).
"""

from __future__ import annotations

import ctypes
import itertools
import math
import threading

import numpy as np

from . import environment, load

#: Multiply-adds from which a product is shared between threads in blocks: from about
#: here blocks beat one thread on two idle cores (benchmarks/bench_blas.py; docs/eager.md,
#: "Threads on a busy machine").
DEFAULT_PARALLEL_MIN = 1 << 21
#: Below this OpenBLAS itself stays on one thread: no switching needed.
_BLAS_SERIAL_BELOW = 1 << 18
#: Row blocks start at multiples of this, OpenBLAS's widest row kernel (16 float32
#: rows on Haswell): no block starts inside one of its tiles.
ROW_ALIGN = 16
#: CBLAS's enums: row-major storage, an operand as stored or transposed.
ROW_MAJOR, AS_STORED, TRANSPOSED = 101, 111, 112
#: The tiles OpenBLAS's small-matrix kernels compute (``small_tile``), and the CPUs
#: whose OpenBLAS kernels have them (threadpoolctl's ``architecture``).
SMALL_TILE = 32
SMALL_WORK = 100 ** 3  # multiply-adds: the most the small-matrix kernels take
SMALL_MIN_WORK, SMALL_MAX_WORK = 1 << 20, 1 << 26  # multiply-adds (``small_tile``)
SMALL_MIN_TERMS = 128  # the shortest sums of ``x @ W.T`` (``small_tile``)
SMALL_KERNEL_CPUS = frozenset({"SkylakeX", "Cooperlake", "SapphireRapids"})


#: The sharing bound, the BLAS pool's controller and the ``Gemm`` (False: not looked
#: up yet; None: there is none); while products run (``running``), the user's count of
#: BLAS threads (``user_threads``), which the pool is set back to when the last ends.
_state: dict = {"min": environment.whole_number("MINITORCH_BLAS_PARALLEL_MIN", DEFAULT_PARALLEL_MIN,
                                                what="multiply-adds"), "pool": False,
                "gemm": False, "running": 0, "user_threads": 1}
#: Guards ``running`` and ``user_threads``: products run in several user threads at once.
_POOL_LOCK = threading.Lock()


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
    """The BLAS library's thread pool (``Pool``), or None without one."""
    pool = _state["pool"]
    if pool is False:
        pool = None
        try:
            from threadpoolctl import ThreadpoolController
            found = ThreadpoolController().select(user_api="blas").lib_controllers
            if len(found) == 1:  # one BLAS: the one NumPy calls
                pool = Pool(found[0])
        except ImportError:
            pass
        _state["pool"] = pool
    return pool


class Pool:
    """The BLAS library's threads, through threadpoolctl's ``controller``; the count is
    read by OpenBLAS's own function where that answers for the pool (its pthreads
    builds). threadpoolctl looks the function up by name at every call, which cost
    several times the call itself inside a training step (docs/eager.md, "Threads on a
    busy machine")."""

    def __init__(self, controller):
        self.controller = controller
        self.set_num_threads = controller.set_num_threads
        self.get_num_threads = controller.get_num_threads
        if getattr(controller, "internal_api", None) == "openblas" and \
                controller.threading_layer == "pthreads":
            found = _symbols(ctypes.CDLL(controller.filepath), ["openblas_get_num_threads"])
            if found is not None:
                found[0].restype, found[0].argtypes = ctypes.c_int, []
                self.get_num_threads = found[0]


def _symbols(lib, names: list[str]) -> list | None:
    """The functions ``names`` of the BLAS library ``lib`` under the prefix and suffix its
    build gives every symbol (SciPy's OpenBLAS: ``scipy_cblas_sgemm64_``), or None."""
    for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
        found = [getattr(lib, f"{prefix}{name}{suffix}", None) for name in names]
        if None not in found:
            return found
    return None


def matmul(a, b, out=None):
    """``np.matmul(a, b, out=out)`` on one BLAS thread; a plain 2-D float product large
    enough (or a batch of one such) is computed in tiles (``_cut``), shared between the
    pool's count of threads. A float16 product is computed in float32 (``_half``)."""
    if a.dtype == _HALF or b.dtype == _HALF:
        return _half(a, b, out)
    if _rows_fold(a, b, out):  # a linear layer on (batch, time, features)
        m = math.prod(a.shape[:-1])
        rows = matmul(a.reshape(m, a.shape[-1]), b,
                      None if out is None else out.reshape(m, b.shape[1]))
        return rows.reshape(a.shape[:-1] + (b.shape[1],)) if out is None else out
    work = _work(a, b)
    if _state["min"] == 0 or work < _BLAS_SERIAL_BELOW and not _one_term(a, b):
        return np.matmul(a, b, out=out)
    if (a.ndim > 2 or b.ndim > 2) and min(a.ndim, b.ndim) >= 2 and all(
            n == 1 for n in a.shape[:-2] + b.shape[:-2]):  # a batch of one: a conv's
        return _one_of_a_batch(a, b, out)
    pool = _pool()
    threads = _borrow(pool)
    try:
        cut = _cut(a, b, out, threads, work)
        if cut is None:
            return _whole(a, b, out)
        out = np.empty((a.shape[0], b.shape[1]), a.dtype) if out is None else out
        _gemm().run(a, b, out, *cut, threads=1 if load.busy() else threads)
        return out
    finally:
        _give_back(pool)


def adds_in_place(out, a, b) -> bool:
    """Whether ``add_product`` can add ``a @ b`` into ``out`` by BLAS's ``beta``: CBLAS
    reads the operands and writes ``out`` in place (``_operands``: a float product,
    ``out``'s rows of unit stride, sharing no memory with them) and a ``Gemm`` is here."""
    return _gemm() is not None and _operands(a, b, out) is not None


def add_product(out, a, b, alpha: float = 1.0) -> bool:
    """``out += alpha * (a @ b)`` as one GEMM with ``beta = 1``: the product is added as
    it is computed, with no temporary of ``out``'s size (``addmm``, a recurrent step's
    ``gates += h @ W_hh.T``; ``alpha = -1`` for ``-=``). False, having done nothing,
    where it cannot (``adds_in_place``)."""
    if not adds_in_place(out, a, b):
        return False
    (trans_a, lda), (trans_b, ldb) = _operands(a, b, out)
    _gemm().run(a, b, out, trans_a, lda, trans_b, ldb, a.shape[0], b.shape[1], alpha=alpha,
                beta=1.0)
    return True


_HALF = np.dtype(np.float16)


def _half(a, b, out):
    """``a @ b`` with a float16 operand: BLAS has no float16, and NumPy's float16 matmul
    is a plain loop (512 x 512 x 512: 355 ms, against 31 ms this way). So the operands
    are converted to float32, multiplied by BLAS (sums in float32, as PyTorch's CPU
    accumulates half products) and the result rounded once to NumPy's result dtype."""
    dtype = np.result_type(a.dtype, b.dtype)
    wide = np.result_type(dtype, np.float32)
    product = matmul(a.astype(wide, copy=False), b.astype(wide, copy=False))
    if out is None:
        return product.astype(dtype, copy=False)
    np.copyto(out, product, casting="unsafe")
    return out


def _borrow(pool) -> int:
    """The user's count of BLAS threads, the pool set to one thread while any product of
    ours runs: the first product to start reads the count and the last to end restores
    it, so a product in another thread never reads the one it was set to meanwhile
    (that product would be cut otherwise, and give other bits)."""
    if pool is None:
        return 1
    with _POOL_LOCK:
        if _state["running"] == 0:
            _state["user_threads"] = pool.get_num_threads()
            if _state["user_threads"] > 1:
                pool.set_num_threads(1)
        _state["running"] += 1
        return _state["user_threads"]


def _give_back(pool) -> None:
    if pool is None:
        return
    with _POOL_LOCK:
        _state["running"] -= 1
        if _state["running"] == 0 and _state["user_threads"] > 1:
            pool.set_num_threads(_state["user_threads"])


def set_pool_threads(n: int) -> None:
    """Set the BLAS pool's count to ``n`` (``mt.set_num_threads``); while a product
    runs, it is the count the pool comes back to."""
    pool = _pool()
    if pool is None:
        return
    with _POOL_LOCK:
        if _state["running"]:
            _state["user_threads"] = n
        else:
            pool.set_num_threads(n)


def _one_of_a_batch(a, b, out):
    """``a @ b`` for operands whose leading dims are all 1, through the 2-D product of
    their one matrix each (views, no copy), so that it too is cut into tiles."""
    lead = (1,) * (max(a.ndim, b.ndim) - 2)
    a2, b2 = a[(0,) * (a.ndim - 2)], b[(0,) * (b.ndim - 2)]
    if out is None:
        product = matmul(a2, b2)
        return product.reshape(lead + product.shape)
    if out.shape != lead + (a2.shape[0], b2.shape[1]):
        return np.matmul(a, b, out=out)  # whatever NumPy makes of another out
    matmul(a2, b2, out=out[(0,) * len(lead)])
    return out


def _rows_fold(a, b, out) -> bool:
    """Whether ``a @ b`` -- ``a`` (..., m, k) C-ordered, ``b`` one matrix -- is one 2-D
    product of ``a``'s rows, all its leading dims folded into them (views, no copy):
    one GEMM of many rows instead of NumPy's one small GEMM per leading index (a GPT's
    (12, 64, 128) @ (128, 512): 1.6 ms as twelve, 0.6 as one). ``out``, if given, must
    fold the same way."""
    return (a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous
            and (out is None or out.flags.c_contiguous))


def _one_term(a, b) -> bool:
    """Whether ``a @ b`` is a column times a row (a linear layer's weight gradient at
    batch 1): a one-term sum, which NumPy's matmul computes without BLAS, far slower
    than one ``cblas_sgemm`` call. It is one whole tile here (``_cut``), else NumPy's
    broadcast multiply (``_whole``), also faster than matmul: each element is its one
    product either way, the same bits (docs/eager.md, "A one-term sum")."""
    return a.ndim == 2 and b.ndim == 2 and a.shape[1] == 1 and b.shape[0] == 1


def _whole(a, b, out):
    """``a @ b`` in one BLAS call. A C-ordered ``a`` times a transposed C-ordered ``b``
    -- ``x @ W.T``, a linear layer -- with a result at least twice as wide as tall is
    computed as ``(b.T @ a.T).T``, which OpenBLAS runs faster, and copied to C order,
    as np.matmul's result is (so ``.view`` works on it). Narrower results lose that way
    (docs/eager.md, "Threads on a busy machine", has the products timed)."""
    if out is None and _transposed_weight(a, b) and b.shape[1] >= 2 * a.shape[0]:
        return np.ascontiguousarray(np.matmul(b.T, a.T).T)
    if _one_term(a, b):
        return np.multiply(a, b, out=out)
    return np.matmul(a, b, out=out)


def _transposed_weight(a, b) -> bool:
    return (a.ndim == 2 and b.ndim == 2 and a.flags.c_contiguous and b.flags.f_contiguous
            and not b.flags.c_contiguous)


def span(n: int, threads: int) -> int | None:
    """The rows (or columns) of each of at most ``threads`` tiles across ``n``: as even as
    ``ROW_ALIGN`` allows, a multiple of it (the last tile takes the rest); None when
    there are too few for two tiles. Depends on its arguments only."""
    count = min(threads, n // ROW_ALIGN)
    if count < 2:
        return None
    return -(-n // count // ROW_ALIGN) * ROW_ALIGN  # ceil(n / count), aligned up


def _cut(a, b, out, threads: int, work: int) -> tuple | None:
    """``Gemm.run``'s arguments after the arrays -- how CBLAS reads each operand, and the
    (rows, columns) of the tiles -- or None: computed whole (not ``_operands``, no
    ``Gemm`` here, or no kind of tile):

    * a one-term sum (``_one_term``) is one tile, the whole product;
    * small tiles (``small_tile``), where OpenBLAS has its small-matrix kernels:
      computed without packing the operands, they are cheap to share out, and the
      caller alone runs them faster than one whole call (the products of an MLP:
      ``benchmarks/bench_blas.py``, docs/eager.md, "Small tiles");
    * else a product of at least ``parallel_min()`` multiply-adds is cut along the
      result's longer side into one tile per thread. Each packs the operand it does
      not cut whole, so the smaller operand is the one packed twice (docs/eager.md,
      "What the blocks cost").
    """
    one_term = _one_term(a, b)
    if work < SMALL_MIN_WORK and work < _state["min"] and not one_term:
        return None
    gemm = _gemm()
    operands = _operands(a, b, out) if gemm is not None else None
    if operands is None:
        return None
    (trans_a, lda), (trans_b, ldb) = operands
    (rows, k), cols = a.shape, b.shape[1]
    tiles = (rows, cols) if one_term else None
    if tiles is None and gemm.small_kernels and work >= SMALL_MIN_WORK:
        tiles = small_tile(rows, k, cols, a.dtype, (trans_a, trans_b))
    if tiles is None and threads > 1 and work >= _state["min"]:
        tiles = _blocks(rows, cols, threads)
    return None if tiles is None else (trans_a, lda, trans_b, ldb, *tiles)


def _blocks(rows: int, cols: int, threads: int) -> tuple[int, int] | None:
    """One tile per thread along the longer side of a ``(rows, cols)`` result."""
    if rows >= cols:
        step = span(rows, threads)
        return None if step is None else (step, cols)
    step = span(cols, threads)
    return None if step is None else (rows, step)


def small_tile(rows: int, k: int, cols: int, dtype, layout: tuple[int, int]
               ) -> tuple[int, int] | None:
    """The tile of a float32 ``(rows, k) @ (k, cols)`` product (``layout``: how CBLAS
    reads each operand) that OpenBLAS's small-matrix kernels compute, or None where
    whole calls are as fast. Measured on the products of MLPs, convolutions and
    squares of up to 2^31 multiply-adds (docs/eager.md, "Small tiles"):

    * ``SMALL_TILE`` rows by ``SMALL_TILE`` columns, or 16 where 32 would pass the
      kernels' ``SMALL_WORK``: 32-column tiles of a long sum would take the packing
      path, and run slower than 16-column ones;
    * products from ``SMALL_MIN_WORK`` to ``SMALL_MAX_WORK`` multiply-adds: below, the
      tiles' own cost is not won back; above, a whole call reuses its packed
      operands over many tiles and beats small tiles;
    * where only the second operand is transposed (``x @ W.T``), sums of at least
      ``SMALL_MIN_TERMS`` terms: shorter ones lost to a whole call; both transposed:
      never (its kernels' own rule).
    """
    if dtype != np.float32 or rows <= SMALL_TILE and cols <= SMALL_TILE:
        return None
    if layout == (TRANSPOSED, TRANSPOSED) or (
            layout == (AS_STORED, TRANSPOSED) and k < SMALL_MIN_TERMS):
        return None
    width = SMALL_TILE if SMALL_TILE * SMALL_TILE * k <= SMALL_WORK else 16
    if SMALL_TILE * width * k > SMALL_WORK or rows * k * cols > SMALL_MAX_WORK:
        return None
    return SMALL_TILE, width


def _operands(a, b, out) -> tuple | None:
    """How CBLAS reads ``a`` and ``b`` in place (``_as_cblas``), for a plain 2-D float32
    or float64 product, not a matrix-vector one, whose ``out`` (if any) has the
    result's shape and dtype, rows of unit stride, and shares no memory with an
    operand (writing one tile cannot change what another reads); else None."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _REALS:
        return None
    if a.shape[1] != b.shape[0] or a.shape[0] < 2 or b.shape[1] < 2:
        return None  # a mismatch: np.matmul says so; one row or column: BLAS's gemv
    operands = _as_cblas(a), _as_cblas(b)
    if None in operands:
        return None
    if out is None or (
            out.shape == (a.shape[0], b.shape[1]) and out.dtype == a.dtype
            and _as_cblas(out) == (AS_STORED, out.strides[0] // out.itemsize)
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b)):
        return operands
    return None


_REALS = (np.dtype(np.float32), np.dtype(np.float64))


def _as_cblas(m) -> tuple[int, int] | None:
    """How CBLAS reads the 2-D array ``m`` in place: as stored (unit stride along rows)
    or transposed (along columns), and its leading dimension; None when neither."""
    flags = m.flags
    if not flags.aligned:
        return None
    rows, cols = m.shape
    if flags.c_contiguous:
        return AS_STORED, max(1, cols)
    if flags.f_contiguous:
        return TRANSPOSED, max(1, rows)
    if any(s % m.itemsize for s in m.strides):
        return None
    s0, s1 = (s // m.itemsize for s in m.strides)
    if s1 == 1 and s0 >= max(1, cols):
        return AS_STORED, s0
    if s0 == 1 and s1 >= max(1, rows):
        return TRANSPOSED, s1
    return None


def _work(a, b) -> int:
    """Multiply-adds of ``a @ b`` (batched and 1-D operands as ``np.matmul`` reads them)."""
    if a.ndim == 2 and b.ndim == 2:
        return a.shape[0] * a.shape[1] * b.shape[1]
    if a.ndim == 0 or b.ndim == 0:
        return 0
    rows = a.shape[-2] if a.ndim > 1 else 1
    cols = b.shape[-1] if b.ndim > 1 else 1
    batch = max(math.prod(a.shape[:-2]), math.prod(b.shape[:-2]))
    return batch * rows * a.shape[-1] * cols


class Gemm:
    """``cblas_sgemm`` and ``cblas_dgemm`` of the BLAS library NumPy calls, and ``run``: a
    compiled loop that computes a product tile by tile, without the GIL, on numba's
    threads where the BLAS pool has more than one (``threads``: tiles are never
    shared beyond the count the user gave BLAS). ``small_kernels``: OpenBLAS has its
    small-matrix kernels here.

    ``run(a, b, out, trans_a, lda, trans_b, ldb, tile_rows, tile_cols)`` takes the
    arrays themselves (compiled for any layout, so a call costs no pointer lookups
    in Python) and how CBLAS reads each operand (``_as_cblas``); each tile is one
    CBLAS call on the tile's first row and column of ``a``, ``b`` and ``out``."""

    def __init__(self, sgemm, dgemm, blasint, small_kernels: bool):
        for fn, real in ((sgemm, ctypes.c_float), (dgemm, ctypes.c_double)):
            fn.restype = None
            fn.argtypes = [ctypes.c_int] * 3 + [blasint] * 3 + [
                real, ctypes.c_void_p, blasint, ctypes.c_void_p, blasint, real,
                ctypes.c_void_p, blasint]
        self._gemms = {np.dtype(np.float32): sgemm, np.dtype(np.float64): dgemm}
        self._blasint = blasint
        self._runs: dict = {}
        self.small_kernels = small_kernels

    def run(self, a, b, out, trans_a, lda, trans_b, ldb, tile_rows, tile_cols,
            threads: int = 1, alpha: float = 1.0, beta: float = 0.0) -> None:
        """``out = alpha * (a @ b) + beta * out``, CBLAS's own ``alpha`` and ``beta``
        (``beta = 1`` adds the product into ``out`` with no temporary)."""
        key = (a.dtype, threads > 1)
        compiled = self._runs.get(key)
        if compiled is None:
            compiled = self._runs[key] = self._compile(*key)
        compiled(a, b, out, trans_a, lda, trans_b, ldb, tile_rows, tile_cols, alpha, beta)

    def _compile(self, dtype, parallel: bool):
        """The tile loop for ``dtype``, compiled once for arrays of any layout (a call
        with C- or Fortran-ordered arrays converts, it does not compile again): on
        numba's threads (``parallel``), or on the caller's alone -- the same tiles, so
        the same bits."""
        import numba

        gemm = self._gemms[dtype]
        cint = numba.int32
        bint = numba.int64 if self._blasint is ctypes.c_int64 else numba.int32
        real = numba.from_dtype(dtype)
        matrix = real[:, :]

        origin = numba.njit(tile_origin)

        def run(a, b, out, ta, lda, tb, ldb, tile_rows, tile_cols, alpha, beta):
            rows, k, cols = a.shape[0], a.shape[1], b.shape[1]
            tiles = (rows + tile_rows - 1) // tile_rows * ((cols + tile_cols - 1) // tile_cols)
            pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
            ldc = out.strides[0] // out.itemsize
            for t in numba.prange(tiles):
                r0, c0 = origin(t, rows, cols, tile_rows, tile_cols)
                m, n = min(tile_rows, rows - r0), min(tile_cols, cols - c0)
                gemm(cint(ROW_MAJOR), cint(ta), cint(tb), bint(m), bint(n), bint(k), real(alpha),
                     pa + r0 * a.strides[0], bint(lda), pb + c0 * b.strides[1], bint(ldb),
                     real(beta), pc + r0 * out.strides[0] + c0 * out.strides[1], bint(ldc))

        signature = numba.void(matrix, matrix, matrix, *[numba.int64] * 6, numba.float64,
                               numba.float64)
        return numba.njit(signature, nogil=True, parallel=parallel)(run)

    @classmethod
    def find(cls) -> Gemm | None:
        """The ``Gemm`` of NumPy's OpenBLAS (its symbols may carry a prefix and a suffix:
        ``scipy_cblas_sgemm64_``), or None: another BLAS, or numba's workqueue layer."""
        pool = _pool()
        lib = getattr(pool, "controller", None)  # threadpoolctl's (a test's pool has none)
        if lib is None or getattr(lib, "internal_api", None) != "openblas":
            return None
        found = _symbols(ctypes.CDLL(lib.filepath),
                         ["cblas_sgemm", "cblas_dgemm", "openblas_get_config"])
        if found is None:
            return None
        sgemm, dgemm, config = found
        config.restype = ctypes.c_char_p
        blasint = ctypes.c_int64 if b"USE64BITINT" in config() else ctypes.c_int32
        if _numba_layer() == "workqueue":
            return None
        small = getattr(lib, "architecture", None) in SMALL_KERNEL_CPUS
        return cls(sgemm, dgemm, blasint, small)


def tile_origin(t: int, rows: int, cols: int, tile_rows: int, tile_cols: int
                ) -> tuple[int, int]:
    """The first row and column of tile ``t`` of a ``(rows, cols)`` result cut into
    ``tile_rows`` x ``tile_cols`` tiles. numba's threads each take a run of consecutive
    tiles, so the numbering decides which operand each thread reads a part of and
    which it reads whole: in a result wider than tall the tiles go down each column
    of tiles, so each thread reads a band of ``b``'s columns, the larger operand, and
    all of ``a``, which its cache keeps between tiles; else along each row of tiles.
    Every tile is the same CBLAS call in either order: the bits do not change.

    Against the order along the rows, the 2-thread eager MLP step at batch 128 ran
    faster this way, most of the gain in the optimizer's update after backward;
    swapping which thread takes which half of the row order did not give it, and the
    cause is not known. At batch 32 and on one thread the order makes no difference
    (docs/eager.md, "Small tiles", has the measurement).
    """
    tall = (rows + tile_rows - 1) // tile_rows
    wide = (cols + tile_cols - 1) // tile_cols
    if cols > rows:
        return t % tall * tile_rows, t // tall * tile_cols
    return t // wide * tile_rows, t % wide * tile_cols


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

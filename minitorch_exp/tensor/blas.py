"""Matrix products through BLAS, shared between threads by blocks of rows or columns.

OpenBLAS's own threads split a product and wait for the last of them. On a busy
machine (other processes wanting the cores) a thread waits a timeslice for its
partner to be scheduled, spinning meanwhile: products of an MLP's sizes ran up to 8x
slower on two OpenBLAS threads than on one beside three busy processes per core
(docs/eager.md). And OpenBLAS splits differently on one thread than on two, so
its sums come out in other bits: a choice of threads that followed the machine's
load would make a run's numbers depend on what else the machine was doing.

So BLAS itself runs on one thread here, and a product of at least
``parallel_min()`` multiply-adds is cut into row blocks -- one per thread of the
BLAS pool's count, each a multiple of ``ROW_ALIGN`` rows (or columns, when the
result is wider than tall) -- that the calling thread and helper threads take from
a shared counter (``Team``):

- the cut depends on the shapes and the thread count only, and each block is the
  same one-thread BLAS call whichever thread runs it: load changes who does the
  work, never the bits. (The thread count can change the last bits of some
  products, as OpenBLAS's own threads do: a block of few rows or columns may take
  another of its kernels than the uncut product.)
- the caller never waits for a block nobody has started: when the helpers are
  not scheduled, it runs every block itself, at one thread's speed.

The pool's count is the user's (``mt.set_num_threads``, ``OPENBLAS_NUM_THREADS``,
threadpoolctl's ``threadpool_limits``) and comes back after each product.
``MINITORCH_BLAS_PARALLEL_MIN`` or ``set_parallel_min`` move the bound (0: OpenBLAS
decides everything, as plain NumPy). Without threadpoolctl, which finds the BLAS
library's thread setter, products run as BLAS decides.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np

#: Multiply-adds from which a product is shared between threads (about 25 million):
#: on two idle cores a (128, 784) @ (784, 256) product (25.7M) takes 0.74-0.90x one
#: thread's time in blocks, a (128, 512) @ (512, 256) one (16.8M) gains nothing
#: (benchmarks/bench_blas.py, docs/eager.md).
DEFAULT_PARALLEL_MIN = 24 << 20
#: Below this OpenBLAS itself stays on one thread: no switching needed.
_BLAS_SERIAL_BELOW = 1 << 18
#: Row blocks start at multiples of this, OpenBLAS's widest row kernel (16 float32
#: rows on Haswell): no block starts inside one of its tiles.
ROW_ALIGN = 16


_env = os.environ.get("MINITORCH_BLAS_PARALLEL_MIN", "").strip()
#: The sharing bound, the BLAS pool's controller (False: not looked up yet) and, once a
#: product is shared, the ``Team``.
_state: dict = {"min": int(_env) if _env else DEFAULT_PARALLEL_MIN, "pool": False}


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
        _team().run(blocks, threads - 1)
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
    """``out`` (made if None) and ``a @ b`` cut into ``(a, b, out)`` blocks along the
    result's longer side: each block packs the operand it does not cut whole, so the
    smaller operand is the one packed twice (``x @ W.T`` at batch 128: 518 us by rows,
    445 us by columns, 642 us on one thread). None: not cut (``_blockable``)."""
    if not _blockable(a, b, out):
        return None
    rows, cols = a.shape[0], b.shape[1]
    bounds = row_blocks(max(rows, cols), threads)
    if bounds is None:
        return None
    if out is None:
        out = np.empty((rows, cols), np.result_type(a, b))
    spans = [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    if rows >= cols:
        return out, [(a[s], b, out[s]) for s in spans]
    return out, [(a, b[:, s], out[:, s]) for s in spans]


def _blockable(a, b, out) -> bool:
    """A plain 2-D product whose ``out`` (if any) has the result's shape and dtype
    and shares no memory with an operand: writing one block cannot change what
    another reads."""
    if a.ndim != 2 or b.ndim != 2:
        return False
    if out is None:
        return True
    return (out.shape == (a.shape[0], b.shape[1]) and out.dtype == np.result_type(a, b)
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b))


def _work(a, b) -> int:
    """Multiply-adds of ``a @ b`` (batched and 1-D operands as ``np.matmul`` reads them)."""
    if a.ndim == 0 or b.ndim == 0:
        return 0
    rows = a.shape[-2] if a.ndim > 1 else 1
    cols = b.shape[-1] if b.ndim > 1 else 1
    batch = max(math.prod(a.shape[:-2]), math.prod(b.shape[:-2]))
    return batch * rows * a.shape[-1] * cols


class Job:
    """Blocks ``(a, b, out)`` that threads take one at a time; ``wait`` returns when
    every block taken has been written, and raises what one of them raised."""

    def __init__(self, blocks):
        self.blocks, self.taken, self.written = blocks, 0, 0
        self.error: BaseException | None = None
        self.lock, self.finished = threading.Lock(), threading.Event()

    def work(self) -> None:
        """Take and compute blocks until none is left (np.matmul lets go of the GIL)."""
        while True:
            with self.lock:
                i = self.taken
                if i == len(self.blocks):
                    return
                self.taken = i + 1
            a, b, out = self.blocks[i]
            try:
                np.matmul(a, b, out=out)
            except BaseException as e:  # handed to the caller in wait()
                self.error = e
            with self.lock:
                self.written += 1
                if self.written == len(self.blocks):
                    self.finished.set()

    def wait(self) -> None:
        self.finished.wait()
        if self.error is not None:
            raise self.error


class Team:
    """The caller plus helper threads, started as a product first needs them, that
    sleep until a job is posted and then take its blocks. The caller works through
    its own job too, so a job finishes even when no helper ever wakes."""

    def __init__(self):
        self.wake = threading.Condition()
        self.job: Job | None = None
        self.posted = 0  # jobs posted so far: a helper works on each new one once
        self.helpers = 0

    def run(self, blocks, helpers: int) -> None:
        """Compute ``blocks`` with up to ``helpers`` helper threads besides the caller."""
        job = Job(blocks)
        with self.wake:
            while self.helpers < helpers:
                threading.Thread(target=self._help, name=f"minitorch-blas-{self.helpers}",
                                 daemon=True).start()
                self.helpers += 1
            self.job, self.posted = job, self.posted + 1
            self.wake.notify(helpers)
        job.work()
        job.wait()

    def _help(self) -> None:
        seen = self.posted
        while True:
            with self.wake:
                while self.posted == seen:
                    self.wake.wait()
                seen, job = self.posted, self.job
            job.work()


def _team() -> Team:
    team = _state.get("team")
    if team is None:
        team = _state["team"] = Team()
    return team


# A forked child has none of the parent's helper threads: it starts its own.
os.register_at_fork(after_in_child=lambda: _state.pop("team", None))

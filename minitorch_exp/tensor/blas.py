"""Matrix products through BLAS, with its threads only where they pay.

A multi-threaded BLAS call splits the product between its threads and waits for
the last of them. On an idle machine that pays from a few million
multiply-adds; on a busy one (other processes wanting the cores) a thread
waits a timeslice for its partner to be scheduled, and OpenBLAS's threads spin
while they wait: a training step of a small MLP ran 4-7x slower with two BLAS
threads than with one beside three busy processes per core, at every product
size below about 2^30 multiply-adds (benchmarks/bench_eager.py --load,
docs/eager.md). So a product of fewer than ``parallel_min()`` multiply-adds runs
on one thread; larger products, and everything else that calls BLAS, use the
pool's own count (the user's, or the library's default).

The choice depends on the product's size only, never on how busy the machine
is: OpenBLAS gives other bits on one thread than on two (the work is split
differently), so a load-dependent choice would make a run's numbers depend on
what else the machine was doing -- and a resumed run or a replayed step would
no longer repeat an uninterrupted one bit for bit.

``MINITORCH_BLAS_PARALLEL_MIN`` or ``set_parallel_min`` change the bound (0:
BLAS decides, as before). Without threadpoolctl, which finds the BLAS library's
thread setter, products run as BLAS decides.
"""

from __future__ import annotations

import math
import os

import numpy as np

#: Multiply-adds from which a product may use the BLAS pool's threads (2^28: ~50 ms on
#: one core, long enough for a timeslice's wait not to matter).
DEFAULT_PARALLEL_MIN = 1 << 28
#: Below this OpenBLAS itself stays on one thread: no switching needed.
_BLAS_SERIAL_BELOW = 1 << 18


_env = os.environ.get("MINITORCH_BLAS_PARALLEL_MIN", "").strip()
_state: dict = {"min": int(_env) if _env else DEFAULT_PARALLEL_MIN, "pool": False}


def parallel_min() -> int:
    """Multiply-adds from which a matrix product may run on several BLAS threads."""
    return _state["min"]


def set_parallel_min(work: int | None) -> None:
    """Let products of at least ``work`` multiply-adds use BLAS's threads (0: every
    product, as BLAS decides; None: the default)."""
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
    """``np.matmul(a, b, out=out)``, on one BLAS thread below ``parallel_min()``."""
    work = _work(a, b)
    if work < _BLAS_SERIAL_BELOW or work >= _state["min"]:
        return np.matmul(a, b, out=out)
    pool = _pool()
    threads = pool.get_num_threads() if pool is not None else 1
    if threads == 1:
        return np.matmul(a, b, out=out)
    pool.set_num_threads(1)
    try:
        return np.matmul(a, b, out=out)
    finally:
        pool.set_num_threads(threads)


def _work(a, b) -> int:
    """Multiply-adds of ``a @ b`` (batched and 1-D operands as ``np.matmul`` reads them)."""
    if a.ndim == 0 or b.ndim == 0:
        return 0
    rows = a.shape[-2] if a.ndim > 1 else 1
    cols = b.shape[-1] if b.ndim > 1 else 1
    batch = max(math.prod(a.shape[:-2]), math.prod(b.shape[:-2]))
    return batch * rows * a.shape[-1] * cols

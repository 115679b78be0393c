"""How many threads CPU work may use: PyTorch's ``set_num_threads`` and
``get_num_threads``.

Two kinds of CPU work use threads here: numba's compiled kernels (a large fused
statement splits its elements between them; ``numba_launch.py``) and matrix
products (``blas.py`` shares a large product between that many threads in blocks).
While other work fills the cores, work whose bits do not depend on the thread count
runs on the calling thread anyway (``load.py``); ``mt.set_num_threads(1)`` is the
setting that never waits for a second core (docs/eager.md, "Threads on a busy
machine").
"""

from __future__ import annotations

from . import blas


def set_num_threads(n: int) -> None:
    """Let CPU work use ``n`` threads: numba's kernels launched from this thread, and
    BLAS's products (the BLAS library's count is the process's). At most the threads
    numba started with (``NUMBA_NUM_THREADS``, the cores by default)."""
    import numba
    limit = numba.config.NUMBA_NUM_THREADS
    if type(n) is not int or not 1 <= n <= limit:
        raise ValueError(f"set_num_threads: a thread count from 1 to {limit} (the threads "
                         f"numba started with; set NUMBA_NUM_THREADS before importing to "
                         f"start more), got {n!r}")
    numba.set_num_threads(n)
    blas.set_pool_threads(n)


def get_num_threads() -> int:
    """The threads numba's kernels launched from this thread may use (``set_num_threads``)."""
    import numba
    return numba.get_num_threads()

"""Whether other work fills the cores: when sharing work between threads stops paying.

A thread that shares work waits for its partners. When every core this process may
use already has another runnable thread to serve, a partner waits a timeslice for a
core, and the caller waits for the partner: beside busy processes the MNIST MLP step
ran slower on two threads than on one, and most of the loss went away with every
kernel and product on the calling thread (docs/eager.md, "Threads on a busy machine",
has the measurements).

So work whose bits do not depend on how many threads run it -- the tiles of a matrix
product (``blas.py``), an elementwise kernel (``numba_launch.py``), each element or
tile computed alike on any thread -- runs on the caller alone while ``busy()``.
Reductions keep their thread count: how they are cut into partial sums is part of
their bits, and a run's numbers must not depend on the machine's load.

``busy()`` reads the kernel's count of runnable threads (``/proc/loadavg``'s fourth
field, the caller among them) at most every ``CHECK_S`` seconds: busy when the
others are at least this process's cores (its CPU affinity). Elsewhere than Linux,
or with ``MINITORCH_LOAD_AWARE=0``, it is never busy. In a container the count is
the host's, which can only make work stay on one thread.
"""

from __future__ import annotations

import os
import time

from . import environment

#: Seconds one reading of the run queue is trusted.
CHECK_S = 0.02
_ENABLED = environment.switch("MINITORCH_LOAD_AWARE", True)
_checked_at = -CHECK_S
_busy = False
_fd: int | None = None


def busy() -> bool:
    """Whether other runnable threads fill every core this process may use (module
    docstring); costs a clock read between readings."""
    global _checked_at, _busy
    now = time.monotonic()
    if now - _checked_at >= CHECK_S:
        _checked_at = now
        _busy = _ENABLED and others_runnable() >= cores()
    return _busy


def others_runnable() -> int:
    """Runnable threads on the machine besides the caller (0 where it cannot be read)."""
    global _fd
    try:
        if _fd is None:
            _fd = os.open("/proc/loadavg", os.O_RDONLY)
        text = os.pread(_fd, 128, 0)
    except OSError:
        _fd = None  # opened again at the next reading (a descriptor closed under us)
        return 0
    try:
        running = int(text.split()[3].split(b"/")[0])
    except (IndexError, ValueError):
        return 0
    return max(running - 1, 0)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

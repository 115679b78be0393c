"""Kernel counters and the debug level: making the machine visible.

Every pass the engine runs is counted per device and kind -- ``fused`` (one
elementwise pass), ``reduce``, ``blas`` and ``copy`` (a temporary made to break
aliasing or a boundary). Tests pin fusion with these counts; benchmarks read
them. ``MINITORCH_DEBUG`` (or ``set_debug``) prints each Plan as it runs:
1 = one line per kernel, 2 = plus time and bytes (marked ``(includes compile)``
when the call compiled its kernel), 3 = plus the expression tree, 4 = plus the
generated source (tensor/explain.py prints them).
"""

from __future__ import annotations

import contextlib

from . import environment
from .caches import invalidate

_COUNTS: dict[tuple[str, str], int] = {}
DEBUG = environment.whole_number("MINITORCH_DEBUG", 0, what="0: off, 1 to 4: more detail")


#: How a kernel runs while DEBUG is on: run it and print it. explain.py hands them over
#: when it is imported (with the package); the engine calls them without importing it.
debug_run = debug_group = None


def use_debug_printers(run, group) -> None:
    global debug_run, debug_group
    debug_run, debug_group = run, group


def count(device: str, kind: str) -> None:
    key = (device, kind)
    _COUNTS[key] = _COUNTS.get(key, 0) + 1  # a dict, not a Counter: half the cost per kernel


def kernel_counts(device: str = "cpu") -> dict[str, int]:
    """Kernels run so far on ``device`` (``"cpu"``, ``"cuda"``; ``"cuda:N"`` counts as
    ``"cuda"``), by kind, plus their ``total``."""
    device = str(device).partition(":")[0]
    out = {kind: n for (dev, kind), n in _COUNTS.items() if dev == device}
    out["total"] = sum(out.values())
    return out


def reset_kernel_counts() -> None:
    _COUNTS.clear()


class KernelCount:
    """Counts seen inside a ``with count_kernels() as k:`` block (``k.total``, ``k['fused']``)."""

    def __init__(self, device: str):
        self.device = device
        self.counts: dict[str, int] = {}

    def __getitem__(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    @property
    def total(self) -> int:
        return self.counts.get("total", 0)

    def __repr__(self) -> str:
        return f"KernelCount({self.counts})"


@contextlib.contextmanager
def count_kernels(device: str = "cpu"):
    """The kernels run inside the block, by kind: only kinds that ran (and ``total``), so
    what ran before in the process does not change the dict (``k["reduce"]`` is 0)."""
    before = kernel_counts(device)
    result = KernelCount(device)
    try:
        yield result
    finally:
        after = kernel_counts(device)
        result.counts = {k: n - before.get(k, 0) for k, n in after.items()
                         if n != before.get(k, 0) or k == "total"}


def set_debug(level: int) -> None:
    """Set the debug level (0-4) for this process; prepared calls made at the old level
    are forgotten (``caches.invalidate``)."""
    global DEBUG
    DEBUG = int(level)
    invalidate("debug level")


def debug_level() -> int:
    return DEBUG

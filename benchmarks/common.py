"""Shared helpers for the benchmark scripts in this folder.

Import from a benchmark script run as ``python benchmarks/<file>.py``::

    from common import Table, print_machine_info, timeit
"""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib
import io
import math
import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                   "NUMBA_NUM_THREADS")

# ---------------------------------------------------------------- machine info


def _cpu_model() -> str:
    """CPU model name from /proc/cpuinfo, or platform's guess."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    """Total physical memory in GiB, when the OS tells."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    with contextlib.suppress(AttributeError, ValueError, OSError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return None


def _version(module: str) -> str | None:
    """A module's ``__version__``, or None when it is not importable."""
    try:
        return importlib.import_module(module).__version__
    except ImportError:
        return None


def _blas_info() -> str:
    """The BLAS that NumPy was built against, as name and version."""
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except (TypeError, KeyError, AttributeError):
        return "unknown"


def _thread_info() -> dict[str, Any]:
    """Thread counts seen by env vars, threadpoolctl, numba and torch."""
    info: dict[str, Any] = {var: os.environ.get(var) for var in THREAD_ENV_VARS}
    with contextlib.suppress(ImportError):
        from threadpoolctl import threadpool_info

        info["threadpoolctl"] = [
            f"{p.get('internal_api')} {p.get('version')}: {p.get('num_threads')} threads"
            for p in threadpool_info()
        ]
    with contextlib.suppress(ImportError):
        import numba

        info["numba_threads"] = numba.get_num_threads()
        info["numba_threading_layer"] = numba.threading_layer()
    with contextlib.suppress(ImportError):
        import torch

        info["torch_threads"] = torch.get_num_threads()
    return info


def machine_info() -> dict[str, Any]:
    """Describe the machine and software a benchmark ran on.

    Returns:
        A flat-ish dict: CPU, cores, memory, library versions, BLAS, threads.
    """
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "python": platform.python_version(),
    }
    for module in ("numpy", "numba", "numexpr", "torch"):
        info[module] = _version(module)
    info["blas"] = _blas_info()
    info.update(_thread_info())
    return info


def print_machine_info() -> None:
    """Print :func:`machine_info` one item per line."""
    for key, value in machine_info().items():
        if isinstance(value, float):
            value = f"{value:.1f}"
        if isinstance(value, list):
            value = "; ".join(value) or "none"
        print(f"{key:>22}: {value}")


def pin_threads(n: int) -> dict[str, int]:
    """Limit BLAS/OpenMP, numba and torch to ``n`` threads each.

    Args:
        n: Thread count, at least 1.

    Returns:
        What was pinned, library name to thread count.
    """
    if n < 1:
        raise ValueError(f"expected a thread count >= 1, found {n}")
    pinned: dict[str, int] = {}
    with contextlib.suppress(ImportError):
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n)  # stays in effect until changed again
        pinned["threadpoolctl"] = n
    with contextlib.suppress(ImportError):
        import numba

        pinned["numba"] = min(n, numba.config.NUMBA_NUM_THREADS)
        numba.set_num_threads(pinned["numba"])
    with contextlib.suppress(ImportError):
        import torch

        torch.set_num_threads(n)
        pinned["torch"] = n
    return pinned


# ---------------------------------------------------------------- timing


def _run(fn: Callable[[], Any], number: int,
         sync: Callable[[], Any] | None = None) -> float:
    """Seconds taken by ``number`` back-to-back calls of ``fn``.

    With ``sync`` (a GPU's synchronize), the clock starts after ``sync()`` and
    stops after another ``sync()`` that follows the last call, so work the calls
    queued on the device is counted, once per batch rather than once per call.
    """
    if sync is not None:
        sync()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    if sync is not None:
        sync()
    return time.perf_counter() - start


def _calibrate(fn: Callable[[], Any], target: float,
               sync: Callable[[], Any] | None = None) -> int:
    """Smallest-ish call count whose run lasts at least ``target`` seconds."""
    number = 1
    while True:
        elapsed = _run(fn, number, sync)
        if elapsed >= target:
            return number
        guess = int(number * target / elapsed * 1.2) + 1 if elapsed > 0 else number * 10
        number = min(number * 10, max(number * 2, guess))


class Cycle:
    """Hands out a pool's items in turn, so no step sees the same batch twice in a row."""

    def __init__(self, items):
        self.items, self.i = list(items), 0

    def next(self):
        item = self.items[self.i]
        self.i = (self.i + 1) % len(self.items)
        return item


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as a table's header prints them ("?" where the
    OS has none): a busy machine's numbers are not comparable with a quiet one's."""
    if not hasattr(os, "getloadavg"):
        return "?"
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


class StepCounter:
    """``step()`` calling ``step(i)`` with ``i`` counting up from 0: a training step that
    picks its batch and learning rate by step number, for the timers."""

    def __init__(self, step):
        self.fn, self.i = step, 0

    def __call__(self):
        self.fn(self.i)
        self.i += 1


def phase_times(zero_grad, forward, update) -> tuple[tuple[float, float, float], Any]:
    """One training step timed phase by phase: seconds of ``forward()`` (the loss, or a
    tuple that starts with it), of the loss's backward and of ``update()``; and what
    ``forward`` returned."""
    zero_grad()
    t0 = time.perf_counter()
    out = forward()
    t1 = time.perf_counter()
    (out[0] if isinstance(out, tuple) else out).backward()
    t2 = time.perf_counter()
    update()
    return (t1 - t0, t2 - t1, time.perf_counter() - t2), out


def timeit(fn: Callable[[], Any], *, min_time: float = 0.2, repeat: int = 5,
           sync: Callable[[], Any] | None = None) -> float:
    """Time ``fn()`` robustly.

    After one warm-up call (JIT compilation, caches), the call count per round
    is chosen so a round lasts at least ``min_time / repeat`` seconds; the
    result is the median over ``repeat`` rounds of the per-call time.

    Args:
        fn: Zero-argument callable to time.
        min_time: Total measured seconds to aim for, split over the rounds.
        repeat: Number of rounds.
        sync: For asynchronous devices (a GPU): called before and after each
            round of calls, so a round counts the device's work, not just the
            launches (e.g. ``cupy.cuda.Device().synchronize``).

    Returns:
        Seconds per call.
    """
    if min_time <= 0 or repeat < 1:
        raise ValueError(f"expected min_time > 0 and repeat >= 1, found {min_time}, {repeat}")
    fn()
    number = _calibrate(fn, min_time / repeat, sync)
    return statistics.median(_run(fn, number, sync) / number for _ in range(repeat))


def interleaved_timeit(steps: dict, min_time: float, rounds: int = 5,
                       setups: dict | None = None) -> dict[str, float]:
    """Seconds per call of each step: the median over ``rounds`` rounds, the frameworks
    taking turns within each round so that a noisy neighbour slows them all alike.

    ``setups``: for some steps, a callable run (untimed, then one untimed call of
    the step) before each of that step's blocks -- a thread count or an evaluator
    that the step needs and the others change.
    """
    samples = interleaved_samples(steps, min_time, rounds, setups)
    return {name: statistics.median(ts) for name, ts in samples.items()}


def paired_ratio(samples: dict, name: str, other: str) -> str:
    """``name``'s time over ``other``'s, round by round (``interleaved_samples``): their
    median and quartiles. A slow spell of the machine slows both turns of a round, so
    the ratios spread less than the times."""
    ratios = [a / b for a, b in zip(samples[name], samples[other])]
    low, mid, high = statistics.quantiles(ratios, n=4)
    return f"median {mid:.3f}, quartiles {low:.3f}-{high:.3f} ({len(ratios)} rounds)"


def interleaved_samples(steps: dict, min_time: float, rounds: int = 5,
                        setups: dict | None = None) -> dict[str, list[float]]:
    """``interleaved_timeit``'s seconds per call of each step in each round."""
    setups = setups or {}

    def prepare(name, fn):
        if name in setups:
            setups[name]()
            fn()

    numbers = {}
    for name, fn in steps.items():
        prepare(name, fn)
        fn()  # warm-up (caches, JIT, momentum buffers)
        number, elapsed = 1, 0.0
        while elapsed < min_time / rounds / len(steps):
            number *= 2
            start = time.perf_counter()
            for _ in range(number):
                fn()
            elapsed = time.perf_counter() - start
        numbers[name] = number
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, fn in steps.items():
            prepare(name, fn)
            start = time.perf_counter()
            for _ in range(numbers[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / numbers[name])
    return samples


@functools.cache
def memory_bandwidth(nbytes: int = 256 * 2**20) -> float:
    """Measured bytes per second moved by a large copy (reads + writes).

    Args:
        nbytes: Size of each of the two buffers; far above the CPU caches.

    Returns:
        Best observed bandwidth over a few copies, counting each byte read and
        each byte written once.
    """
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch: page faults are not bandwidth
    best = min(_run(lambda: np.copyto(dst, src), 1) for _ in range(5))
    return 2 * src.nbytes / best


def bandwidth_floor(nbytes: int) -> float:
    """Seconds the machine's memory bandwidth needs to move ``nbytes``.

    Count every byte an operation must read and write: ``z = x + y`` on
    float32 arrays of n elements moves ``3 * 4 * n`` bytes. The bandwidth is
    measured once per process (see :func:`memory_bandwidth`).
    """
    return nbytes / memory_bandwidth()


# ---------------------------------------------------------------- tables


def format_seconds(seconds: float) -> str:
    """Seconds as a short human string: ``12.3 us``, ``4.56 ms``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Row(NamedTuple):
    """One measurement: what ran, at which size, and seconds per call."""

    name: str
    size: str
    seconds: float


class Table:
    """Benchmark results with a time ratio against a baseline row.

    The ratio of a row is its seconds divided by the seconds of the baseline
    row of the same size: 1.0 is the baseline, 0.5 twice as fast, 2.0 half as
    fast. Rows whose size has no baseline get no ratio.
    """

    HEADER = ("name", "size", "time", "ratio")

    def __init__(self, name: str, baseline: str | None = None) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"expected a file-name-safe table name, found {name!r}")
        self.name = name
        self.baseline = baseline
        self.rows: list[Row] = []

    def add(self, name: str, size: Any, seconds: float) -> None:
        """Record ``seconds`` per call of ``name`` at ``size``."""
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"expected positive finite seconds for {name!r}, found {seconds}")
        self.rows.append(Row(str(name), str(size), float(seconds)))

    def ratio(self, row: Row) -> float | None:
        """Seconds of ``row`` over the baseline row of the same size."""
        for other in self.rows:
            if other.name == self.baseline and other.size == row.size:
                return row.seconds / other.seconds
        return None

    def _cells(self) -> list[tuple[str, str, str, str]]:
        """Rows as display strings."""
        cells = []
        for row in self.rows:
            ratio = self.ratio(row)
            text = "" if ratio is None else f"{ratio:.2f}x"
            cells.append((row.name, row.size, format_seconds(row.seconds), text))
        return cells

    def text(self) -> str:
        """Aligned plain-text table."""
        lines = [self.HEADER, *self._cells()]
        widths = [max(len(line[i]) for line in lines) for i in range(4)]
        out = []
        for line in lines:
            left = [line[i].ljust(widths[i]) for i in range(2)]
            right = [line[i].rjust(widths[i]) for i in range(2, 4)]
            out.append("  ".join(left + right).rstrip())
        return "\n".join(out) + "\n"

    def markdown(self) -> str:
        """GitHub-flavoured Markdown table."""
        lines = [f"| {' | '.join(self.HEADER)} |", "| --- | --- | ---: | ---: |"]
        lines += [f"| {' | '.join(c.replace('|', '/') for c in row)} |" for row in self._cells()]
        title = f"# {self.name}\n\n"
        if self.baseline:
            title += f"Ratio = time / time of `{self.baseline}` at the same size.\n\n"
        return title + "\n".join(lines) + "\n"

    def csv(self) -> str:
        """CSV with raw seconds and ratios at full precision."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["name", "size", "seconds", "ratio"])
        for row in self.rows:
            ratio = self.ratio(row)
            writer.writerow([row.name, row.size, repr(row.seconds),
                             "" if ratio is None else repr(ratio)])
        return buf.getvalue()

    def print(self) -> None:
        """Print the aligned text table."""
        print(self.text(), end="")

    def write(self, directory: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
        """Write ``<name>.md`` and ``<name>.csv`` atomically.

        Args:
            directory: Where to write; defaults to ``benchmarks/results``.

        Returns:
            The Markdown and CSV paths.
        """
        directory = RESULTS_DIR if directory is None else Path(directory)
        md, csv_path = directory / f"{self.name}.md", directory / f"{self.name}.csv"
        _atomic_write_text(md, self.markdown())
        _atomic_write_text(csv_path, self.csv())
        return md, csv_path

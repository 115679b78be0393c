"""What tensor/load.py reports about the machine, and what the kernels do with it:
while other work fills the cores, elementwise kernels and a product's tiles run on
the calling thread, with the bits they have when shared; reductions keep their cut."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import minitorch_exp.tensor as T
from minitorch_exp.tensor import cpu_numba, load


@pytest.fixture
def readings(monkeypatch):
    """``load.busy`` over made-up readings: a clock, the other runnable threads, cores."""
    class Readings:
        now, others, cores, reads = 100.0, 0, 2, 0

    r = Readings()

    def others():
        r.reads += 1
        return r.others

    monkeypatch.setattr(load.time, "monotonic", lambda: r.now)
    monkeypatch.setattr(load, "others_runnable", others)
    monkeypatch.setattr(load, "cores", lambda: r.cores)
    monkeypatch.setattr(load, "_checked_at", -1e9)
    monkeypatch.setattr(load, "_ENABLED", True)
    return r


def test_busy_when_other_threads_fill_every_core(readings):
    readings.others = 1
    assert not load.busy()
    readings.now += 2 * load.CHECK_S
    readings.others = 2
    assert load.busy()
    readings.now += 2 * load.CHECK_S
    readings.cores = 4
    assert not load.busy()


def test_a_reading_is_kept_for_check_s(readings):
    readings.others = 5
    assert load.busy() and readings.reads == 1
    readings.others = 0
    readings.now += load.CHECK_S * 0.6
    assert load.busy() and readings.reads == 1  # the same reading
    readings.now += load.CHECK_S * 0.6
    assert not load.busy() and readings.reads == 2


def test_minitorch_load_aware_0_never_reports_busy(readings, monkeypatch):
    monkeypatch.setattr(load, "_ENABLED", False)
    readings.others = 64
    assert not load.busy()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/loadavg")
def test_the_real_run_queue_is_read():
    found = load.others_runnable()
    assert isinstance(found, int) and found >= 0
    assert load.cores() >= 1
    with open("/proc/loadavg", "rb") as f:
        assert int(f.read().split()[3].split(b"/")[1]) >= found  # runnable <= all threads


@pytest.fixture
def numba_kernels(monkeypatch):
    """The numba evaluator, every kernel allowed its parallel variant, two threads."""
    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two numba threads")
    old_min, old_threads = cpu_numba.PARALLEL_MIN, numba.get_num_threads()
    with T.using_cpu_backend("numba"):
        cpu_numba.set_parallel_min(0)
        numba.set_num_threads(2)
        yield
        numba.set_num_threads(old_threads)
        cpu_numba.set_parallel_min(old_min)


def _spy(monkeypatch, ran: list) -> None:
    """Record which variant each kernel launched from now on runs."""
    when_free = cpu_numba.numba_launch.WhenFree
    real_init = when_free.__init__

    def init(self, kernel):
        real_init(self, kernel)
        for name in ("serial", "parallel"):
            variant = getattr(self, name)
            setattr(self, name, lambda *args, name=name, variant=variant: (
                ran.append(name), variant(*args)))

    monkeypatch.setattr(when_free, "__init__", init)


def test_an_elementwise_kernel_runs_serially_while_busy_with_the_same_bits(
        numba_kernels, machine, monkeypatch):
    ran: list = []
    _spy(monkeypatch, ran)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(50_000).astype(np.float32) for _ in range(2))
    x, y = T.from_numpy(a.copy()), T.from_numpy(b)
    results = []
    for busy in (False, True):
        machine.busy = busy
        out = T.empty(50_000)
        out[...] = (x * 1.5 + y) * y - x
        results.append(out.numpy().copy())
    assert ran == ["parallel", "serial"]
    np.testing.assert_array_equal(results[0], results[1])


def test_a_repeated_statement_decides_again_at_each_call(numba_kernels, machine, monkeypatch):
    """The prepared call a statement keeps (and a capture records) is ``WhenFree``
    itself, so the machine's load is read at every run, not frozen at the first."""
    ran: list = []
    _spy(monkeypatch, ran)
    w = T.from_numpy(np.ones(50_000, np.float32))
    update = w * 0.5 + 1.0
    for busy in (False, True, False):
        machine.busy = busy
        w[...] = update
    assert ran == ["parallel", "serial", "parallel"]
    np.testing.assert_array_equal(w.numpy(), np.full(50_000, 1.875, np.float32))


def test_a_reduction_keeps_its_cut_while_busy(numba_kernels, machine):
    """Partial sums are part of a reduction's bits: it is cut as the thread count says,
    busy or not. (Values spread over 16 orders of magnitude, so that another cut gives
    other bits: one thread's sum differs.)"""
    import numba

    values = np.random.default_rng(1).lognormal(0, 8, 200_000)
    x = T.from_numpy(values)
    sums = []
    for busy in (False, True):
        machine.busy = busy
        sums.append(x.sum().numpy().copy())
    np.testing.assert_array_equal(sums[0], sums[1])
    machine.busy = False
    numba.set_num_threads(1)
    assert x.sum().numpy() != sums[0]  # the data tells cuts apart


def test_an_unreadable_run_queue_counts_as_idle(monkeypatch):
    """No /proc/loadavg (not Linux), or a descriptor closed under us: nobody else runs,
    as far as sharing work is concerned, and the next reading opens it again."""
    monkeypatch.setattr(load, "_fd", None)

    def refuse(*args):
        raise OSError("no such file")

    monkeypatch.setattr(load.os, "open", refuse)
    assert load.others_runnable() == 0 and load._fd is None
    monkeypatch.setattr(load.os, "open", lambda *args: 99)
    monkeypatch.setattr(load.os, "pread", lambda *args: b"0.5 0.4 0.3 garbled\n")
    assert load.others_runnable() == 0 and load._fd == 99
    monkeypatch.setattr(load.os, "pread", lambda *args: b"0.5 0.4 0.3 9/300 1234\n")
    assert load.others_runnable() == 8


def test_a_statement_prepared_on_one_thread_shares_work_once_two_are_allowed(
        numba_kernels, machine, monkeypatch):
    """The thread count is read at each call too: a step captured (or a statement
    prepared) under ``set_num_threads(1)`` uses both threads after ``(2)``."""
    import numba

    ran: list = []
    _spy(monkeypatch, ran)
    w = T.from_numpy(np.ones(50_000, np.float32))
    update = w * 0.5 + 1.0
    for threads in (1, 2):
        numba.set_num_threads(threads)
        w[...] = update
    assert ran == ["serial", "parallel"]

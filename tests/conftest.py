"""Suite-wide reporting: what was skipped and why, and how much memory the run took.

At the end of every run, plain or spread over pytest-xdist workers, the summary
gets

* one line per skip reason with its count, most frequent first::

      ------------------------ 793 skipped, by reason ------------------------
        631  needs a GPU: CuPy is not installed
        162  needs PyTorch (its CPU build: README, "PyTorch, for the comparison
              tests"): could not import 'torch': No module named 'torch'

  so hundreds of skips explain themselves without ``-rs``'s line per test;
* the peak resident memory of each process that ran tests (``gw0 0.92 GB``).

``MINITORCH_TEST_MAX_RSS_MB``: where set, a process whose peak goes over that
many MiB fails the run, with a line saying which (``.ci/run`` sets it), so a
test that starts to hoard memory is caught where it lands.

Why workers are recycled. numba keeps every function it compiles in memory
for the life of the process (about 1 MiB each, freed by nothing short of
exit; 0.25 MiB when loaded from the disk cache), and the suite compiles a few
thousand distinct kernels: hypothesis draws new expression structures, and
each structure is a kernel. So under pytest-xdist's default ``--dist load``
the scheduler here is xdist's work stealing plus one rule: a worker whose
peak memory passed ``MINITORCH_TEST_RECYCLE_RSS_MB`` (default 1000; 0 turns
it off) hands its queued tests back, finishes the one it is running, and a
fresh worker takes its place. Nothing else holds memory across tests worth
the name: the Plan and launch memos are bounded, hypothesis keeps its
example database on disk, and no fixture keeps large arrays past its scope.

The hooks live here rather than in a plugin so that every way of running the
tests (``pytest``, ``pytest -n 2``, one file) gets them.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest
from hypothesis import settings

try:
    import resource
except ImportError:  # Windows: no getrusage; the memory line is left out
    resource = None

LIMIT_ENV = "MINITORCH_TEST_MAX_RSS_MB"
RECYCLE_ENV = "MINITORCH_TEST_RECYCLE_RSS_MB"
DEFAULT_RECYCLE_MB = 1000.0

# No per-example deadline: the first example of a structure compiles its kernel
# (numba, or NVRTC on a GPU), and a unit test asserts values, never timings.
settings.register_profile("minitorch", deadline=None)
settings.load_profile("minitorch")

#: Where a bare import failure comes from -> what the reader should know about it.
_EXPLAINED_IMPORTS = {
    "torch": 'needs PyTorch (its CPU build: README, "PyTorch, for the comparison tests")',
}

_PEAKS_MB: dict[str, float] = {}  # test process ("gw0", or "main" without xdist) -> peak RSS
_LATEST_MB: dict[object, float] = {}  # xdist controller: worker -> peak RSS after its last test
_RECYCLED: list[str] = []  # workers replaced for their memory, in order


def _peak_rss_mb() -> float | None:
    """This process's peak resident set size so far, in MiB."""
    if resource is None:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes vs KiB


def skip_reason(report) -> str:
    """The reason of a skipped test's report, as the summary groups it."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    reason = reason.removeprefix("Skipped: ").strip()
    for module, why in _EXPLAINED_IMPORTS.items():
        if reason.startswith(f"could not import '{module}'"):
            return f"{why}: {reason}"
    return reason


def _limit_mb() -> float | None:
    value = os.environ.get(LIMIT_ENV, "").strip()
    return float(value) if value else None


def _recycle_mb() -> float | None:
    value = os.environ.get(RECYCLE_ENV, "").strip()
    mb = float(value) if value else DEFAULT_RECYCLE_MB
    return mb if mb > 0 else None


def pytest_sessionfinish(session):
    peak = _peak_rss_mb()
    if peak is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports it
        workeroutput["minitorch_peak_rss_mb"] = peak
        return
    if not session.config.pluginmanager.has_plugin("dsession"):  # this process ran the tests
        _PEAKS_MB["main"] = peak
    limit = _limit_mb()
    if limit is not None and any(mb > limit for mb in _PEAKS_MB.values()):
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: a worker finished; keep the peak memory it reported."""
    peak = getattr(node, "workeroutput", {}).get("minitorch_peak_rss_mb")
    if peak is not None:
        _PEAKS_MB[node.gateway.id] = peak
    _LATEST_MB.pop(node, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On an xdist worker, each teardown report carries the worker's peak memory so
    far (an extra report attribute travels with the report to the controller)."""
    report = yield
    if call.when == "teardown" and hasattr(item.config, "workerinput"):
        report.minitorch_peak_rss_mb = _peak_rss_mb()
    return report


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # set by xdist on the controller
    peak = getattr(report, "minitorch_peak_rss_mb", None)
    if node is not None and peak is not None:
        _LATEST_MB[node] = peak


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist load`` (the default of ``-n``): work stealing that recycles a worker
    past ``MINITORCH_TEST_RECYCLE_RSS_MB`` (module docstring). Other modes: xdist's."""
    limit = _recycle_mb()
    if limit is None or config.getvalue("dist") != "load" or resource is None:
        return None
    return _recycling_scheduler()(config, log, limit)


def _recycling_scheduler():
    from xdist.scheduler import WorkStealingScheduling

    class RecyclingScheduling(WorkStealingScheduling):
        """xdist's work stealing; a worker past ``limit_mb`` is replaced by a fresh one.

        Retiring a worker uses the stealing protocol: it is asked for every test
        still in its queue but those it may already hold (the one running and
        the next, which a worker takes early to know what comes after);
        once they are back it is told to shut down, and a fresh worker is
        started the way xdist replaces a crashed one. A steal is all or nothing,
        so one refused (the worker had moved on) is asked again after its next
        test, leaving it one more.
        """

        def __init__(self, config, log, limit_mb: float):
            super().__init__(config, log)
            self.limit_mb = limit_mb
            self.retiring: set = set()
            self.refused: dict = {}  # worker -> steals it refused (it was further along)

        def mark_test_complete(self, node, item_index, duration=None):
            peak = _LATEST_MB.get(node, 0.0)
            if (peak > self.limit_mb and node not in self.retiring
                    and not node.shutting_down and self.steal_requested_from_node is None):
                self._retire(node)
            super().mark_test_complete(node, item_index, duration)

        def _retire(self, node) -> None:
            # Called before the finished test leaves the list: skip it, the one the
            # worker is running, the next it took early, and one more per refusal.
            self.retiring.add(node)
            queued = self.node2pending[node][3 + self.refused.get(node, 0):]
            if queued:
                node.send_steal(queued)
                self.steal_requested_from_node = node
            else:
                others = any(p for n, p in self.node2pending.items() if n is not node)
                self._replace(node, work_left=bool(self.pending) or others)

        def remove_pending_tests_from_node(self, node, indices):
            if node in self.retiring:
                if indices:  # shut down before the tests go back, so none returns here
                    self._replace(node, work_left=True)
                else:  # it had moved on: ask again after its next test, for fewer
                    self.retiring.discard(node)
                    self.refused[node] = self.refused.get(node, 0) + 1
            super().remove_pending_tests_from_node(node, indices)

        def _replace(self, node, work_left: bool) -> None:
            node.shutdown()
            dsession = self.config.pluginmanager.get_plugin("dsession")
            if dsession is None or dsession.shuttingdown or not work_left:
                return
            _RECYCLED.append(node.gateway.id)
            dsession._clone_node(node)

    return RecyclingScheduling


def pytest_terminal_summary(terminalreporter):
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped:
        counts = Counter(skip_reason(report) for report in skipped)
        terminalreporter.write_sep("-", f"{len(skipped)} skipped, by reason")
        for reason, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            terminalreporter.write_line(f"{n:6d}  {reason}")
    if _PEAKS_MB:
        limit = _limit_mb()
        peaks = ", ".join(f"{name} {mb / 1024:.2f} GB" for name, mb in sorted(_PEAKS_MB.items()))
        bound = f" (limit {limit / 1024:.2f} GB, {LIMIT_ENV})" if limit is not None else ""
        terminalreporter.write_line(f"peak memory per test process: {peaks}{bound}")
        if _RECYCLED:
            terminalreporter.write_line(
                f"replaced for passing {_recycle_mb() / 1024:.2f} GB ({RECYCLE_ENV}): "
                f"{', '.join(_RECYCLED)}")
        over = [name for name, mb in sorted(_PEAKS_MB.items()) if limit is not None and mb > limit]
        if over:
            terminalreporter.write_line(
                f"FAILED: {', '.join(over)} went over {limit:.0f} MiB ({LIMIT_ENV}); "
                "a test is keeping memory it should let go", red=True, bold=True)


# ---- fixtures ----------------------------------------------------------------------------------

@pytest.fixture
def fuse_all():
    """Every Node op kept lazy (fusion threshold 0), whatever its size: for tests that
    count kernels, check laziness or compare fused kernels bit for bit on small tensors,
    which below the default threshold are computed at once with NumPy (tensor/eager.py)."""
    from minitorch_exp.node.grad_mode import get_fusion_threshold, set_fusion_threshold
    old = get_fusion_threshold()
    set_fusion_threshold(0)
    yield
    set_fusion_threshold(old)


@pytest.fixture
def debug_level():
    """``counters.set_debug`` for one test; the level is restored after it."""
    from minitorch_exp.tensor import counters
    old = counters.DEBUG
    yield counters.set_debug
    counters.set_debug(old)


@pytest.fixture
def machine(monkeypatch):
    """Sets what ``tensor/load.py`` reports: ``machine.busy = True`` makes work that is
    shared between threads run on the caller alone; False (the default here) lets it
    share whatever else runs (the test suite itself keeps both cores busy)."""
    from minitorch_exp.tensor import load

    class Machine:
        busy = False

    state = Machine()
    monkeypatch.setattr(load, "busy", lambda: state.busy)
    return state

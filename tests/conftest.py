"""Suite-wide reporting: what was skipped and why, and how much memory the run took.

At the end of every run, plain or spread over pytest-xdist workers, the summary
gets

* one line per skip reason with its count, most frequent first::

      ------------------------ 793 skipped, by reason ------------------------
        631  needs a GPU: CuPy is not installed
        162  needs PyTorch (the CPU build: README, "Run the tests"): ...

  so hundreds of skips explain themselves without ``-rs``'s line per test;
* the peak resident memory of each process that ran tests (``gw0 0.92 GB``).

``MINITORCH_TEST_MAX_RSS_MB``: where set, a process whose peak goes over that
many MiB fails the run, with a line saying which (``.ci/run`` sets it), so a
test that starts to hoard memory is caught where it lands.

The hooks live here rather than in a plugin so that every way of running the
tests (``pytest``, ``pytest -n 2``, one file) gets them.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

try:
    import resource
except ImportError:  # Windows: no getrusage; the memory line is left out
    resource = None

LIMIT_ENV = "MINITORCH_TEST_MAX_RSS_MB"

#: Where a bare import failure comes from -> what the reader should know about it.
_EXPLAINED_IMPORTS = {
    "torch": 'needs PyTorch (the CPU build: README, "Run the tests")',
}

_PEAKS_MB: dict[str, float] = {}  # test process ("gw0", or "main" without xdist) -> peak RSS


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
        over = [name for name, mb in sorted(_PEAKS_MB.items()) if limit is not None and mb > limit]
        if over:
            terminalreporter.write_line(
                f"FAILED: {', '.join(over)} went over {limit:.0f} MiB ({LIMIT_ENV}); "
                "a test is keeping memory it should let go", red=True, bold=True)

"""The suite's own report (tests/conftest.py): skips grouped by reason, peak memory.

Each test runs pytest in a subprocess on a tiny test folder that loads
tests/conftest.py as a plugin, and reads what a person would read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TINY_TESTS = '''
import pytest

gpu = pytest.mark.skipif(True, reason="needs a GPU: CuPy is not installed")

@gpu
@pytest.mark.parametrize("i", range(3))
def test_on_gpu(i):
    pass

@pytest.mark.parametrize("i", range(2))
def test_with_an_oracle(i):
    pytest.importorskip("no_such_module_for_minitorch_tests")

def test_runs():
    pass

def test_needs_torch(monkeypatch):
    import builtins
    real_import = builtins.__import__
    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ModuleNotFoundError("No module named 'torch'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    pytest.importorskip("torch")
'''


def run_pytest(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    (tmp_path / "test_tiny.py").write_text(textwrap.dedent(TINY_TESTS))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environ.pop("MINITORCH_TEST_MAX_RSS_MB", None)
    environ.update({"PYTHONPATH": str(ROOT), **(env or {})})
    # pytest-benchmark, where installed, warns at start-up under xdist, which -W error
    # makes fatal (seen on the GPU image): it has no part in these runs
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",
         "-W", "error", "--rootdir", str(tmp_path), str(tmp_path), *args],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=environ)


def test_skips_are_counted_once_per_reason(tmp_path):
    proc = run_pytest(tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert re.search(r"-+ 6 skipped, by reason -+", out), out
    lines = out[out.index("by reason"):].splitlines()[1:4]
    assert re.fullmatch(r" +3  needs a GPU: CuPy is not installed", lines[0]), lines
    assert re.fullmatch(r" +2  could not import 'no_such_module_for_minitorch_tests': .*",
                        lines[1]), lines
    assert re.fullmatch(r' +1  needs PyTorch \(its CPU build: README, "PyTorch, for the '
                        r"comparison tests\"\): could not import 'torch': .*", lines[2]), lines
    assert "1 passed, 6 skipped" in out
    assert re.search(r"peak memory per test process: main \d+\.\d\d GB$", out, re.M), out


def test_each_xdist_worker_reports_its_peak_memory(tmp_path):
    pytest.importorskip("xdist")
    proc = run_pytest(tmp_path, "-n", "2")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "6 skipped, by reason" in out and "     3  needs a GPU" in out
    assert re.search(r"peak memory per test process: gw0 \d+\.\d\d GB, gw1 \d+\.\d\d GB$",
                     out, re.M), out


def test_a_process_over_the_memory_limit_fails_the_run(tmp_path):
    proc = run_pytest(tmp_path, env={"MINITORCH_TEST_MAX_RSS_MB": "1"})
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "1 passed, 6 skipped" in out  # every test passed: the memory failed the run
    assert re.search(r"\(limit 0\.00 GB, MINITORCH_TEST_MAX_RSS_MB\)$", out, re.M), out
    assert "FAILED: main went over 1 MiB (MINITORCH_TEST_MAX_RSS_MB)" in out

    proc = run_pytest(tmp_path, env={"MINITORCH_TEST_MAX_RSS_MB": "100000"})
    assert proc.returncode == 0 and "FAILED" not in proc.stdout, proc.stdout


HOARDING_TESTS = '''
import os
import pytest

HELD = []  # as numba holds every kernel it compiled, for the life of the process

@pytest.mark.parametrize("i", range(12))
def test_hoards(i):
    HELD.append(bytearray(30 * 2**20))
    HELD[-1][::4096] = b"x" * len(range(0, 30 * 2**20, 4096))  # touch every page
    with open(os.environ["RAN_LOG"], "a") as f:
        f.write(f"{i}\\n")
'''


def test_a_worker_past_the_recycle_bound_is_replaced_and_no_test_is_lost(tmp_path):
    pytest.importorskip("xdist")
    pytest.importorskip("resource")
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    (tests / "test_hoards.py").write_text(textwrap.dedent(HOARDING_TESTS))
    ran = tmp_path / "ran.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environ.update(PYTHONPATH=str(ROOT), RAN_LOG=str(ran), MINITORCH_TEST_RECYCLE_RSS_MB="100",
                   MINITORCH_TEST_MAX_RSS_MB="400")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--rootdir", str(tests), str(tests)],
        capture_output=True, text=True, timeout=300, cwd=tests, env=environ)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "12 passed" in out
    assert sorted(int(i) for i in ran.read_text().split()) == list(range(12))  # each once
    replaced = re.search(r"^replaced for passing 0\.10 GB \(MINITORCH_TEST_RECYCLE_RSS_MB\): "
                         r"(.*)$", out, re.M)
    assert replaced, out
    peaks = re.search(r"^peak memory per test process: (.*) \(limit", out, re.M).group(1)
    workers = {name: float(gb) for name, gb, _ in (p.split() for p in peaks.split(", "))}
    assert len(workers) > 2, out  # fresh workers took over
    assert all(gb < 0.4 for gb in workers.values()), out

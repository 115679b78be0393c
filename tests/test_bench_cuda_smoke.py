"""benchmarks/bench_cuda.py keeps working where there is no GPU.

The GPU benchmark can only really run on a machine with CuPy and a CUDA device,
so its ``--device cpu --quick`` mode runs the same harness (peers, timing,
tables, kernel counts, the summary) on the CPU with NumPy in CuPy's place.
These tests run it in a subprocess (it sets process-wide state such as the CPU
evaluator) and check the tables it writes. Where a GPU is present, the same
checks run on a tiny ``--device cuda`` pass.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cuda.py"
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def run_bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=SCRIPT.parents[1])


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def check_table(path: Path, sizes: list[str], names: set[str], baseline: str | None) -> None:
    """Every size has exactly the expected rows, positive times, and the baseline's ratio 1."""
    rows = read_rows(path)
    assert {r["size"] for r in rows} == set(sizes), (path.name, rows)
    for size in sizes:
        found = {r["name"]: r for r in rows if r["size"] == size}
        assert set(found) == names, (path.name, size, sorted(found))
        for row in found.values():
            seconds = float(row["seconds"])
            assert math.isfinite(seconds) and 0 < seconds < 10, (path.name, row)
            if baseline in found:
                assert float(row["ratio"]) > 0, (path.name, row)
            else:
                assert row["ratio"] == "", (path.name, row)
        if baseline in found:
            assert float(found[baseline]["ratio"]) == pytest.approx(1.0)


def check_run(out_dir: Path, prefix: str, xp: str, update_sizes, mlp_sizes, extra_peers,
              torch_rows: bool) -> None:
    torch_names = {"torch eager"} if torch_rows else set()
    names = {f"{xp} naive", "ours", "memory floor"} | set(extra_peers) | torch_names
    for update in ("seed", "adam"):
        check_table(out_dir / f"{prefix}_update_{update}.csv", update_sizes, names,
                    f"{xp} naive")
    check_table(out_dir / f"{prefix}_mlp.csv", mlp_sizes, {"ours"} | torch_names,
                "torch eager")
    summary = (out_dir / f"{prefix}_summary.md").read_text()
    for size in mlp_sizes:  # ours' kernels per step, from mt.count_kernels
        match = re.search(rf"\| {re.escape(size)} \| (\d+) \(", summary)
        assert match and int(match.group(1)) > 0, summary
    assert "Failures" not in summary, summary


def test_cpu_smoke_run(tmp_path):
    result = run_bench("--device", "cpu", "--quick", "--min-time", "0.01",
                       "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "smoke mode" in result.stdout
    assert "Kernels per training step" in result.stdout
    check_run(tmp_path, "cpu_smoke", "numpy", ["1000", "10000"],
              ["784-64-10 b16", "784-64-10 b64"], extra_peers=(), torch_rows=HAS_TORCH)
    assert not list(tmp_path.glob("*fuse*")) and "cupy" not in (
        tmp_path / "cpu_smoke_update_seed.csv").read_text()


def test_cpu_smoke_writes_nothing_by_default(tmp_path):
    result = run_bench("--device", "cpu", "--quick", "--min-time", "0.01", "--only", "update",
                       "--sizes", "1e3")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no results written" in result.stdout
    assert not list((SCRIPT.parent / "results").glob("cpu_smoke_*"))


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed: the script may find a GPU here")
def test_without_cupy_it_says_why_in_one_line(tmp_path):
    result = run_bench("--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_cuda: not run: CuPy is not installed")
    assert not any(tmp_path.iterdir())


def _gpu_reason() -> str | None:
    if not HAS_CUPY:
        return "CuPy is not installed"
    try:
        import cupy
        return None if cupy.cuda.runtime.getDeviceCount() > 0 else "no CUDA device"
    except Exception as err:  # no driver, or one too old for this CuPy
        return f"no usable CUDA device ({type(err).__name__})"


@pytest.mark.cuda
def test_cuda_smoke_run(tmp_path):
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(f"needs a GPU: {reason}")
    torch_cuda = False
    if HAS_TORCH:
        import torch
        torch_cuda = torch.cuda.is_available()
    result = run_bench("--quick", "--sizes", "1e5", "--min-time", "0.02", "--no-torch-compile",
                       "--results-dir", str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    check_run(tmp_path, "cuda", "cupy", ["100000"], ["784-256-10 b128", "784-256-10 b1024"],
              extra_peers=("cupy.fuse",), torch_rows=torch_cuda)

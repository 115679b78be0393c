"""Memory along a long elementwise chain, against PyTorch.

``y = y * 1.00001 + 0.0`` on 8 float32 elements, repeated N times (two ops an
iteration), with and without ``requires_grad``, then the result read once
(``y.numpy()``). The arrays are tiny, so what grows is the bookkeeping per op: graph
nodes kept for backward, lazy expressions, caches. Each (framework, requires_grad, N)
runs in a fresh process, so its peak RSS (``ru_maxrss``) is that run's alone:

* ``peak``: the process's peak resident memory, imports included;
* ``growth``: peak minus the resident memory after imports and setup (the leaf made,
  a short chain run and read once so that kernels are compiled and caches warm);
* ``per iteration``: growth / N. Linear growth keeps it flat from one N to the next;
  ``slope`` is the growth per iteration between one N and the one before, which a
  fixed cost cannot blur.

After the measurement the child drops the chain and times that (a deep chain freed
recursively could crash or stall at teardown; it is reported, not hidden).

The goal (the issue): our peak within 2x PyTorch's at every N, and linear growth.

Run: ``python benchmarks/bench_memory.py [--sizes 1e3,1e4,3e4,1e5] [--no-torch]``
writes ``benchmarks/results/memory_chain.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import RESULTS_DIR, _atomic_write_text, print_machine_info  # noqa: E402

FACTOR, SHIFT, ELEMENTS, WARMUP = 1.00001, 0.0, 8, 10
THREADS = 2  # as the other benchmarks compare peers; the arrays are too small to split
GOAL_PEAK_RATIO = 2.0
LINEAR_SLACK = 1.25  # the last slope may exceed the first by this much and count as linear
FRAMEWORKS = ("ours", "torch")
NAME = "memory_chain"


# ---- the child: one run in a fresh process ---------------------------------------------

def _status(field: str) -> int | None:
    """A memory line of Linux's /proc/self/status, in bytes; None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def ru_maxrss_bytes() -> int:
    """``ru_maxrss`` in bytes: KiB on Linux, bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def rss_bytes() -> int:
    """Resident memory now (Linux), else the peak so far."""
    return _status("VmRSS") or ru_maxrss_bytes()


def peak_rss_bytes() -> int:
    """This process's peak resident memory. On Linux ``ru_maxrss`` starts from the
    parent's resident memory at fork (exec keeps it), so a fat parent would hide a
    child's peak: VmHWM, the high-water mark of this program's own memory, is used
    where there is one (the parent also stays slim: it imports no framework)."""
    return _status("VmHWM") or ru_maxrss_bytes()


def ours_setup(requires_grad: bool):
    import numba

    import minitorch_exp as mt
    from minitorch_exp.tensor import cpu_backend
    numba.set_num_threads(min(THREADS, numba.config.NUMBA_NUM_THREADS))
    leaf = mt.ones(ELEMENTS, requires_grad=requires_grad)
    return leaf, (lambda y: y.numpy()), {"backend": cpu_backend()}


def torch_setup(requires_grad: bool):
    import torch

    torch.set_num_threads(THREADS)
    leaf = torch.ones(ELEMENTS, requires_grad=requires_grad)
    return leaf, (lambda y: y.detach().numpy()), {"torch": torch.__version__}


def chain(y, n: int):
    for _ in range(n):
        y = y * FACTOR + SHIFT
    return y


def child(framework: str, n: int, requires_grad: bool) -> None:
    """Print one JSON line of measurements, then one more after freeing the chain."""
    setup = ours_setup if framework == "ours" else torch_setup
    leaf, read, info = setup(requires_grad)
    read(chain(leaf, WARMUP))  # kernels compiled, caches warm
    import gc
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    y = chain(leaf, n)
    value = float(read(y)[0])
    seconds = time.perf_counter() - start
    out = {"framework": framework, "n": n, "requires_grad": requires_grad,
           "rss_after_setup": before, "peak": peak_rss_bytes(),
           "ru_maxrss": ru_maxrss_bytes(), "rss_end": rss_bytes(),
           "seconds": seconds, "value": value, "exact": FACTOR ** n, **info}
    print(json.dumps(out), flush=True)
    start = time.perf_counter()
    del y
    gc.collect()
    print(json.dumps({"teardown_seconds": time.perf_counter() - start,
                      "rss_after_teardown": rss_bytes()}), flush=True)


# ---- the parent: one child per run, then the tables ------------------------------------

def run_child(framework: str, n: int, requires_grad: bool, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--child", framework, str(n), str(int(requires_grad))]
    env = dict(os.environ, **{v: str(THREADS) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                       "OPENBLAS_NUM_THREADS")})
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"framework": framework, "n": n, "requires_grad": requires_grad,
                "error": f"took over {timeout:.0f} s"}
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"framework": framework, "n": n, "requires_grad": requires_grad,
                "error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    row = lines[0]
    if len(lines) > 1:
        row.update(lines[1])
    if proc.returncode != 0:  # measured, but freeing the chain or exiting failed
        row["teardown_error"] = f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return row


def mib(b: float) -> str:
    return f"{b / 2**20:.1f}"


def analyse(rows: list[dict]) -> dict:
    """Growth, per-iteration growth, slopes, ratios to torch, and the verdicts."""
    by_key = {(r["framework"], r["requires_grad"], r["n"]): r for r in rows if "error" not in r}
    for r in by_key.values():
        r["growth"] = max(r["peak"] - r["rss_after_setup"], 0)
        r["per_iter"] = r["growth"] / r["n"]
    verdicts = {}
    for fw in FRAMEWORKS:
        for grad in (False, True):
            series = sorted((n, r) for (f, g, n), r in by_key.items() if f == fw and g == grad)
            for (n0, r0), (n1, r1) in zip(series, series[1:]):
                r1["slope"] = (r1["growth"] - r0["growth"]) / (n1 - n0)
            slopes = [r["slope"] for _, r in series if "slope" in r]
            if len(slopes) >= 2:
                first, last = max(slopes[0], 1.0), slopes[-1]
                verdicts[(fw, grad)] = {"first_slope": slopes[0], "last_slope": last,
                                        "linear": last <= LINEAR_SLACK * first + 64}
    for (fw, grad, n), r in by_key.items():
        peer = by_key.get(("torch", grad, n))
        if fw == "ours" and peer is not None:
            r["peak_ratio"] = r["peak"] / peer["peak"]
            r["growth_ratio"] = r["growth"] / peer["growth"] if peer["growth"] else None
    return {"rows": by_key, "verdicts": verdicts}


COLUMNS = ("framework", "requires_grad", "N", "ops", "time", "us/iter", "rss after setup MiB",
           "peak MiB", "growth MiB", "growth B/iter", "slope B/iter", "peak / torch",
           "growth / torch", "teardown")


def cells(r: dict) -> list[str]:
    if "error" in r:
        return [r["framework"], str(r["requires_grad"]), f"{r['n']:.0e}", str(2 * r["n"]),
                r["error"], *[""] * (len(COLUMNS) - 5)]
    teardown = r.get("teardown_error") or (
        f"{r['teardown_seconds'] * 1e3:.0f} ms" if "teardown_seconds" in r else "?")
    ratio = r.get("growth_ratio")
    return [r["framework"], str(r["requires_grad"]), f"{r['n']:.0e}", str(2 * r["n"]),
            f"{r['seconds']:.2f} s", f"{r['seconds'] / r['n'] * 1e6:.1f}",
            mib(r["rss_after_setup"]), mib(r["peak"]), mib(r["growth"]),
            f"{r['per_iter']:.0f}", f"{r['slope']:.0f}" if "slope" in r else "",
            f"{r['peak_ratio']:.2f}x" if "peak_ratio" in r else "",
            "" if ratio is None else f"{ratio:.2f}x", teardown]


def markdown(result: dict, errors: list[dict]) -> str:
    rows = sorted(result["rows"].values(),
                  key=lambda r: (r["requires_grad"], r["n"], r["framework"]))
    lines = [f"# Memory along an elementwise chain (`{NAME}`)", "",
             f"`y = y * {FACTOR} + {SHIFT}` on {ELEMENTS} float32 elements, N iterations "
             "(2 ops each), then `y` read once; one fresh process per row. `growth` = "
             "peak RSS - RSS after imports and setup; `slope` = growth per iteration "
             "between this N and the one before; ratios are ours / PyTorch at the same N "
             "and requires_grad.", "",
             "| " + " | ".join(COLUMNS) + " |",
             "| " + " | ".join(["---"] * 4 + ["---:"] * (len(COLUMNS) - 5) + ["---"]) + " |"]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows + errors]
    lines += ["", "## Verdicts", ""]
    for (fw, grad), v in sorted(result["verdicts"].items()):
        lines.append(f"- {fw}, requires_grad={grad}: slope {v['first_slope']:.0f} B/iter "
                     f"(first interval) -> {v['last_slope']:.0f} B/iter (last): "
                     f"{'linear' if v['linear'] else 'NOT linear'}")
    ratios = [r["peak_ratio"] for r in rows if "peak_ratio" in r]
    if ratios:
        ok = max(ratios) <= GOAL_PEAK_RATIO
        lines.append(f"- peak ours / PyTorch: {min(ratios):.2f}x .. {max(ratios):.2f}x: "
                     f"{'within' if ok else 'NOT within'} the goal of {GOAL_PEAK_RATIO:.0f}x")
    return "\n".join(lines) + "\n"


def csv_text(result: dict, errors: list[dict]) -> str:
    fields = ["framework", "requires_grad", "n", "seconds", "rss_after_setup", "peak",
              "ru_maxrss",
              "rss_end", "growth", "per_iter", "slope", "peak_ratio", "growth_ratio",
              "teardown_seconds", "rss_after_teardown", "teardown_error", "error", "value",
              "exact", "backend", "torch"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in sorted(result["rows"].values(),
                    key=lambda r: (r["framework"], r["requires_grad"], r["n"])) + errors:
        writer.writerow(r)
    return out.getvalue()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e3,1e4,3e4,1e5",
                        help="iterations N, comma-separated (default 1e3,1e4,3e4,1e5)")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--machine-info", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        framework, n, grad = args.child
        child(framework, int(n), grad == "1")
        return 0
    if args.machine_info:
        print_machine_info()
        return 0
    # in a child: machine_info imports torch and numba, and this process must stay slim
    subprocess.run([sys.executable, __file__, "--machine-info"], check=False)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    frameworks = ["ours"]
    if not args.no_torch and importlib.util.find_spec("torch") is not None:
        frameworks.append("torch")
    else:
        print("PyTorch: left out (not installed, or --no-torch)")
    rows = []
    for grad in (False, True):
        for n in sizes:
            for fw in frameworks:
                row = run_child(fw, n, grad, args.timeout)
                rows.append(row)
                note = row.get("error") or (f"peak {mib(row['peak'])} MiB, growth "
                                            f"{mib(row['peak'] - row['rss_after_setup'])} "
                                            f"MiB, {row['seconds']:.2f} s")
                print(f"  {fw:>5} requires_grad={grad!s:<5} N={n:.0e}: {note}", flush=True)
    errors = [r for r in rows if "error" in r]
    result = analyse(rows)
    text = markdown(result, errors)
    print(text)
    _atomic_write_text(args.results_dir / f"{NAME}.md", text)
    _atomic_write_text(args.results_dir / f"{NAME}.csv", csv_text(result, errors))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

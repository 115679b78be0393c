"""GPU benchmarks: this project's CUDA kernels against CuPy, cupy.fuse and PyTorch (issue #7).

Two parts, both on one CUDA device, every peer in this process:

* updates -- the seed update ``w[...] = -eta * (g + lam * w)`` and the Adam
  update (definitions from ``bench_update.py``) on float32 vectors of 1e5 .. 1e8
  elements: ours (one generated kernel per statement) against naive CuPy (the
  baseline: one kernel and one full-size temporary per op), ``cupy.fuse``,
  PyTorch eager and ``torch.compile``, and the memory floor -- the bytes the
  update must move at the device's copy bandwidth, measured here with a large
  device-to-device copy. Target: ours >= 90% of that bandwidth at 1e8.
* MLP -- one MNIST-shaped training step (forward, cross-entropy, backward, SGD
  with momentum; builders from ``bench_mlp.py``) for 784-256-10 and
  784-2048-2048-10 at batch 128 and 1024: ours against PyTorch eager (the
  baseline). Target: ahead of PyTorch eager at batch 128, where launches
  dominate. Kernels per step are printed: ours from ``mt.count_kernels``, and
  for both frameworks from the PyTorch profiler when it can see the device.

Every timed round ends with a device synchronize, so times are the device's
work, not the launch queue. Tables go to ``benchmarks/results/cuda_*``.

    python benchmarks/bench_cuda.py                    # a GPU machine with CuPy
    python benchmarks/bench_cuda.py --quick            # fewer sizes, shorter rows
    python benchmarks/bench_cuda.py --device cpu --quick   # smoke run, no GPU needed

Without CuPy or a visible CUDA device it prints why in one line and exits 0.
``--device cpu`` runs the same code paths on the CPU, with NumPy in CuPy's
place (no cupy.fuse or torch.compile rows), and writes nothing unless given
``--results-dir``: it keeps this script working on machines without a GPU.
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_mlp  # noqa: E402
import bench_update as upd  # noqa: E402
from common import (  # noqa: E402
    RESULTS_DIR,
    Table,
    _atomic_write_text,
    format_seconds,
    memory_bandwidth,
    print_machine_info,
    timeit,
)

import minitorch_exp as mt  # noqa: E402

UPDATE_SIZES = {"cuda": [10**5, 10**6, 10**7, 10**8], "cpu": [10**3, 10**5, 10**6]}
QUICK_UPDATE_SIZES = {"cuda": [10**5, 10**7], "cpu": [10**3, 10**4]}
MLP_ARCHS = {"784-256-10": [784, 256, 10], "784-2048-2048-10": [784, 2048, 2048, 10]}
MLP_CONFIGS = {  # (arch, batch) per device and mode
    "cuda": [(a, b) for a in MLP_ARCHS for b in (128, 1024)],
    "cpu": [("784-256-10", 32), ("784-256-10", 128)],
}
QUICK_MLP_CONFIGS = {"cuda": [("784-256-10", 128), ("784-256-10", 1024)],
                     "cpu": [("784-64-10", 16), ("784-64-10", 64)]}
SMALL_ARCHS = {"784-64-10": [784, 64, 10]}
MIN_TIME = {"cuda": 0.3, "cpu": 0.1}
QUICK_MIN_TIME = {"cuda": 0.1, "cpu": 0.02}
GPU_COPY_BYTES = 2**30      # each of the two buffers of the bandwidth copy
CPU_COPY_BYTES = 64 * 2**20
QUICK_CPU_COPY_BYTES = 16 * 2**20
FLOOR_TARGET = 0.90         # of the copy bandwidth, at the largest size (issue #7)
# Ours on the device vs NumPy on the host after 5 SGD steps: summation order differs.
GPU_STEP_RTOL, GPU_STEP_ATOL = 2e-3, 2e-5


# ---------------------------------------------------------------- the device

def cuda_unavailable_reason() -> str | None:
    """Why the GPU part cannot run here, or None when CuPy sees a device."""
    try:
        import cupy
    except ImportError as err:
        return (f"CuPy is not installed ({err}); on a machine with an NVIDIA GPU install "
                "it with pip install -e '.[gpu]' (CUDA 12 driver) or '.[gpu-cuda13]'")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CUDARuntimeError without a driver or device
        return f"CuPy {cupy.__version__} sees no usable CUDA device ({type(err).__name__}: {err})"
    return None if count > 0 else f"CuPy {cupy.__version__} sees no CUDA device"


class Env:
    """Where the benchmark runs: the array module, device names, and how to wait for it.

    On ``cuda`` the array module is CuPy and ``sync`` waits for the whole device
    (CuPy and PyTorch share the CUDA context, so one synchronize covers both).
    On ``cpu`` -- the smoke mode -- NumPy stands in for CuPy and ``sync`` is None.
    """

    def __init__(self, device: str, with_compile: bool):
        self.device = device
        self.gpu = device == "cuda"
        if self.gpu:
            import cupy
            self.xp, self.xp_name = cupy, "cupy"
            self.sync: Callable[[], Any] | None = cupy.cuda.Device().synchronize
        else:
            self.xp, self.xp_name, self.sync = np, "numpy", None
        self.torch, self.torch_note = self._find_torch()
        self.with_compile = bool(with_compile and self.gpu and self.torch is not None)
        self.failures: list[str] = []

    def _find_torch(self):
        try:
            import torch
        except ImportError:
            return None, "PyTorch is not installed: its rows are skipped"
        if self.gpu and not torch.cuda.is_available():
            return None, (f"PyTorch {torch.__version__} has no CUDA device (a CPU-only "
                          "build?): its rows are skipped")
        return torch, None

    @property
    def counter_device(self) -> str:
        """The device name the kernel counters use ("cuda" for every cuda:N)."""
        return "cuda" if self.gpu else "cpu"

    def time(self, fn: Callable[[], Any], min_time: float) -> float:
        return timeit(fn, min_time=min_time, sync=self.sync)

    def release(self) -> None:
        """Hand freed device memory back between rows (pools of CuPy and PyTorch)."""
        if self.gpu:
            gc.collect()
            self.xp.get_default_memory_pool().free_all_blocks()
            if self.torch is not None:
                self.torch.cuda.empty_cache()

    def measure(self, table: Table, name: str, size, make: Callable[[], Callable],
                min_time: float) -> float | None:
        """Build one row's step, time it and add it; a failure is reported, not raised."""
        try:
            seconds = self.time(make(), min_time)  # the step is dropped before release()
        except ImportError as err:
            print(f"  {name} at {size}: skipped ({err})")
            return None
        except Exception as err:
            traceback.print_exc()
            self.failures.append(f"{table.name}: {name} at {size}: {type(err).__name__}: {err}")
            print(f"  {name} at {size}: FAILED ({type(err).__name__}: {err})", flush=True)
            return None
        finally:
            self.release()
        table.add(name, size, seconds)
        return seconds


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def device_facts(env: Env) -> dict[str, Any]:
    """GPU name, memory and the CuPy / CUDA / PyTorch versions (the CPU smoke: a note)."""
    facts: dict[str, Any] = {}
    if env.gpu:
        cp = env.xp
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props.get("name", b"?")
        facts["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        facts["gpu_index"] = dev.id
        facts["compute_capability"] = f"{props.get('major')}.{props.get('minor')}"
        facts["gpu_memory_gib"] = f"{props.get('totalGlobalMem', 0) / 2**30:.1f}"
        facts["multiprocessors"] = props.get("multiProcessorCount")
        clock, bus = props.get("memoryClockRate"), props.get("memoryBusWidth")
        if clock and bus:  # kHz, bits; DDR: two transfers per clock
            facts["peak_bandwidth_gbs"] = f"{2 * clock * 1e3 * bus / 8 / 1e9:.0f} (spec sheet)"
        facts["cupy"] = cp.__version__
        facts["cuda_runtime"] = _cuda_version(cp.cuda.runtime.runtimeGetVersion())
        facts["cuda_driver"] = _cuda_version(cp.cuda.runtime.driverGetVersion())
        try:
            major, minor = cp.cuda.nvrtc.getVersion()
            facts["nvrtc"] = f"{major}.{minor}"
        except Exception:
            pass
    else:
        facts["device"] = "cpu (smoke mode: NumPy stands in for CuPy)"
        facts["cpu_backend"] = mt.tensor.cpu_backend()
    if env.torch is not None:
        facts["torch"] = env.torch.__version__
        facts["torch_cuda"] = env.torch.version.cuda
    return facts


def print_facts(facts: dict[str, Any]) -> None:
    for key, value in facts.items():
        print(f"{key:>22}: {value}")


def copy_bandwidth(env: Env, nbytes: int) -> float:
    """Bytes per second (read + write) of the device's best large copy.

    On the GPU, the better of ``cupy.copyto`` and a raw device-to-device
    ``cudaMemcpyAsync`` between two ``nbytes`` buffers, timed with CUDA events;
    on the CPU, ``common.memory_bandwidth`` (a large ``numpy.copyto``).
    """
    if not env.gpu:
        return memory_bandwidth(nbytes)
    seconds = _gpu_copy_seconds(env.xp, nbytes // 4)
    env.release()
    return 2 * (nbytes // 4) * 4 / seconds


def _gpu_copy_seconds(cp, n: int) -> float:
    """Best seconds for one copy of ``n`` float32 elements between two device buffers."""
    src = cp.ones(n, dtype=cp.float32)
    dst = cp.empty_like(src)
    copies = [lambda: cp.copyto(dst, src),
              lambda: dst.data.copy_from_device_async(src.data, src.nbytes)]
    best, reps = math.inf, 4
    for copy in copies:
        copy()
        cp.cuda.Device().synchronize()
        for _ in range(5):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(reps):
                copy()
            end.record()
            end.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(start, end) / 1e3 / reps)
    return best


# ---------------------------------------------------------------- updates

def seed_fuse(n, cp):
    """The seed update as one ``cupy.fuse`` kernel (in place, no temporaries)."""
    w, g = upd.arrays(n, 2, cp)

    @cp.fuse(kernel_name="seed_update")
    def update(w, g):
        w *= upd.LAM
        w += g
        w *= -upd.ETA
    return lambda: update(w, g)


def adam_fuse(n, cp):
    """The three Adam statements as one ``cupy.fuse`` kernel."""
    w, g, m, v = upd.arrays(n, 4, cp)
    b1, b2, step, eps, c2 = upd.B1, upd.B2, upd.STEP, upd.EPS, upd.C2

    @cp.fuse(kernel_name="adam_update")
    def update(w, g, m, v):
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        w -= step * m / (cp.sqrt(v / c2) + eps)
    return lambda: update(w, g, m, v)


UPDATES = {
    "seed": {"naive": upd.seed_naive, "fuse": seed_fuse, "ours": upd.seed_ours,
             "torch eager": upd.seed_torch, "torch.compile": upd.seed_torch_compile},
    "adam": {"naive": upd.adam_naive, "fuse": adam_fuse, "ours": upd.adam_ours,
             "torch eager": upd.adam_torch, "torch.compile": upd.adam_torch_compile},
}


def update_rows(env: Env, update: str) -> dict[str, Callable[[int], Callable]]:
    """Row name -> builder of a step at size n, for the peers this device has."""
    b = UPDATES[update]
    rows: dict[str, Callable[[int], Callable]] = {
        f"{env.xp_name} naive": lambda n: b["naive"](n, env.xp)}
    if env.gpu:
        rows["cupy.fuse"] = lambda n: b["fuse"](n, env.xp)
    rows["ours"] = lambda n: b["ours"](n, env.device)
    if env.torch is not None:
        rows["torch eager"] = lambda n: b["torch eager"](n, env.device)
        if env.with_compile:
            rows["torch.compile"] = lambda n: b["torch.compile"](n, env.device)
    return rows


def run_update(env: Env, update: str, sizes, min_time: float, bandwidth: float,
               prefix: str) -> Table:
    table = Table(f"{prefix}_update_{update}", baseline=f"{env.xp_name} naive")
    for n in sizes:
        for name, make in update_rows(env, update).items():
            env.measure(table, name, n, functools.partial(make, n), min_time)
        table.add("memory floor", n, upd.BYTES_PER_ELEMENT[update] * n / bandwidth)
        print(f"  {update} n={n:.0e} done", flush=True)
    return table


def floor_lines(table: Table, update: str, sizes, bandwidth: float) -> list[str]:
    """Each row's achieved bandwidth as a share of the copy bandwidth, per size."""
    lines = []
    for n in sizes:
        moved = upd.BYTES_PER_ELEMENT[update] * n
        shares = [f"{r.name} {moved / r.seconds / 1e9:.1f} GB/s = "
                  f"{moved / r.seconds / bandwidth:.0%}"
                  for r in table.rows if r.size == str(n) and r.name != "memory floor"]
        lines.append(f"{update} n={n:.0e}: " + "; ".join(shares))
    ours = [r for r in table.rows if r.name == "ours" and r.size == str(10**8)]
    if ours:
        share = upd.BYTES_PER_ELEMENT[update] * 10**8 / ours[0].seconds / bandwidth
        verdict = "met" if share >= FLOOR_TARGET else "missed"
        lines.append(f"{update}: ours reaches {share:.0%} of the copy bandwidth at n=1e8 "
                     f"(target >= {FLOOR_TARGET:.0%}: {verdict})")
    return lines


# ---------------------------------------------------------------- MLP

def profiled_kernels(env: Env, step: Callable[[], Any]) -> str:
    """Device kernels (and memcpy/memset) one step runs, as PyTorch's profiler sees them.

    The profiler (CUPTI) records every kernel of the process, CuPy's and cuBLAS's
    too, so it counts ours and PyTorch's the same way. GPU only; "n/a" otherwise.
    """
    if not env.gpu or env.torch is None:
        return "n/a"
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        step()
        env.sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            env.sync()
        kernels = copies = 0
        for event in prof.events():
            if event.device_type != DeviceType.CUDA:
                continue
            if event.name.startswith(("Memcpy", "Memset")):
                copies += 1
            else:
                kernels += 1
        return f"{kernels} kernels + {copies} memcpy/memset"
    except Exception as err:  # the profiler is a nice-to-have here
        return f"n/a ({type(err).__name__}: {err})"


def mlp_step(builder, weights, data, env: Env) -> Callable[[], Any]:
    """One framework's training step on the env's device (bench_mlp's builders)."""
    return builder(weights, data, env.device)[0]


def run_mlp(env: Env, configs, min_time: float, prefix: str) -> tuple[Table, list[str]]:
    table = Table(f"{prefix}_mlp", baseline="torch eager")
    lines = ["| size | ours: count_kernels | ours: profiler | torch eager: profiler |",
             "| --- | --- | --- | --- |"]
    archs = {**MLP_ARCHS, **SMALL_ARCHS}
    for arch, batch in configs:
        weights, data = bench_mlp.initial_weights(archs[arch]), bench_mlp.batches(batch)
        size = f"{arch} b{batch}"
        rtol, atol = (GPU_STEP_RTOL, GPU_STEP_ATOL) if env.gpu else (1e-4, 1e-6)
        try:
            bench_mlp.check_same_steps(weights, data, env.device, rtol, atol)
        except AssertionError as err:
            env.failures.append(f"{size}: ours on {env.device} and the NumPy reference "
                                f"differ after 5 steps: {err}")
            print(f"  {size}: WARNING: ours differs from the NumPy reference", flush=True)
        except Exception as err:  # the timed rows below will say more
            traceback.print_exc()
            env.failures.append(f"{size}: checking ours against NumPy: "
                                f"{type(err).__name__}: {err}")
        env.measure(table, "ours", size,
                    functools.partial(mlp_step, bench_mlp.minitorch_step, weights, data, env),
                    min_time)
        if env.torch is not None:
            env.measure(table, "torch eager", size,
                        functools.partial(mlp_step, bench_mlp.torch_step, weights, data, env),
                        min_time)
        try:
            counts = bench_mlp.kernels_per_step(
                mlp_step(bench_mlp.minitorch_step, weights, data, env), env.counter_device)
            counted = f"{counts.get('total', 0)} (" + ", ".join(
                f"{k} {v}" for k, v in counts.items() if k != "total") + ")"
            ours_prof = profiled_kernels(
                env, mlp_step(bench_mlp.minitorch_step, weights, data, env))
            torch_prof = "n/a" if env.torch is None else profiled_kernels(
                env, mlp_step(bench_mlp.torch_step, weights, data, env))
        except Exception as err:
            traceback.print_exc()
            env.failures.append(f"{size}: counting kernels: {type(err).__name__}: {err}")
            counted = ours_prof = torch_prof = "failed"
        env.release()
        lines.append(f"| {size} | {counted} | {ours_prof} | {torch_prof} |")
        times = {r.name: r.seconds for r in table.rows if r.size == size}
        print(f"  {size}: " + ", ".join(f"{k} {format_seconds(v)}" for k, v in times.items())
              + f"; ours {counted} kernels/step", flush=True)
    return table, lines


def mlp_verdicts(table: Table) -> list[str]:
    """Ours vs PyTorch eager at batch 128 (the issue's target: ahead, ratio < 1)."""
    lines = []
    for row in table.rows:
        ratio = table.ratio(row)
        if row.name == "ours" and row.size.endswith(" b128") and ratio is not None:
            verdict = "ahead" if ratio < 1 else "behind"
            lines.append(f"{row.size}: ours / torch eager = {ratio:.2f}x ({verdict}; "
                         "target: ahead at batch 128)")
    return lines


# ---------------------------------------------------------------- driver

def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (default), or cpu: a smoke run with NumPy for CuPy")
    parser.add_argument("--quick", action="store_true", help="fewer sizes, shorter rows")
    parser.add_argument("--sizes", help="update sizes, comma-separated (e.g. 1e5,1e8)")
    parser.add_argument("--min-time", type=float, help="seconds of measurement per row")
    parser.add_argument("--only", choices=["update", "mlp"], help="run only this part")
    parser.add_argument("--no-torch-compile", action="store_true",
                        help="skip the torch.compile rows (each size compiles anew)")
    parser.add_argument("--cpu-backend", choices=["numpy", "numba"], default="numpy",
                        help="our CPU evaluator in the smoke run (numpy: no JIT wait)")
    parser.add_argument("--results-dir", type=Path,
                        help="where tables go (default: benchmarks/results on cuda; "
                             "nothing is written on cpu unless this is given)")
    parser.add_argument("--no-write", action="store_true", help="write no files")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        reason = cuda_unavailable_reason()
        if reason is not None:
            print(f"bench_cuda: not run: {reason}. Nothing was written; "
                  "`--device cpu --quick` runs the CPU smoke test of this script.")
            return 0
    with mt.tensor.using_cpu_backend(args.cpu_backend):
        return run(args)


def run(args) -> int:
    device = args.device
    env = Env(device, with_compile=not args.no_torch_compile)
    quick = args.quick
    sizes = ([int(float(s)) for s in args.sizes.split(",")] if args.sizes else
             (QUICK_UPDATE_SIZES if quick else UPDATE_SIZES)[device])
    min_time = args.min_time or (QUICK_MIN_TIME if quick else MIN_TIME)[device]
    configs = (QUICK_MLP_CONFIGS if quick else MLP_CONFIGS)[device]
    out_dir = None if args.no_write else (
        args.results_dir or (RESULTS_DIR if device == "cuda" else None))
    prefix = "cuda" if device == "cuda" else "cpu_smoke"

    print_machine_info()
    facts = device_facts(env)
    print_facts(facts)
    copy_bytes = (GPU_COPY_BYTES if env.gpu else
                  QUICK_CPU_COPY_BYTES if quick else CPU_COPY_BYTES)
    bandwidth = copy_bandwidth(env, copy_bytes)
    print(f"{'copy_bandwidth':>22}: {bandwidth / 1e9:.1f} GB/s (read + write, "
          f"2 x {copy_bytes / 2**20:.0f} MiB)")
    if env.torch_note:
        print(env.torch_note)
    if env.gpu and not env.with_compile and env.torch is not None:
        print("torch.compile: skipped (--no-torch-compile)")
    print()

    tables: list[Table] = []
    summary = [f"# {prefix} benchmarks", "", "```"]
    summary += [f"{k}: {v}" for k, v in facts.items()]
    summary += [f"copy bandwidth: {bandwidth / 1e9:.1f} GB/s", "```", ""]
    if args.only in (None, "update"):
        for update in ("seed", "adam"):
            table = run_update(env, update, sizes, min_time, bandwidth, prefix)
            table.print()
            lines = floor_lines(table, update, sizes, bandwidth)
            print("\n".join(lines) + "\n")
            summary += [f"## {update} update", ""] + [f"- {line}" for line in lines] + [""]
            tables.append(table)
    if args.only in (None, "mlp"):
        table, kernel_lines = run_mlp(env, configs, min_time, prefix)
        table.print()
        verdicts = mlp_verdicts(table)
        print("\n".join(verdicts + ["", "Kernels per training step:"] + kernel_lines) + "\n")
        summary += ["## MLP training step", ""] + [f"- {line}" for line in verdicts]
        summary += ["", "Kernels per training step:", ""] + kernel_lines + [""]
        tables.append(table)

    if env.failures:
        summary += ["## Failures", ""] + [f"- {f}" for f in env.failures] + [""]
    if out_dir is not None:
        for table in tables:
            table.write(out_dir)
        _atomic_write_text(Path(out_dir) / f"{prefix}_summary.md", "\n".join(summary) + "\n")
        print(f"wrote {', '.join(t.name for t in tables)} (.md, .csv) and "
              f"{prefix}_summary.md to {out_dir}")
    else:
        print("no results written (cpu smoke run, or --no-write)")
    if env.failures:
        print(f"{len(env.failures)} failure(s):\n  " + "\n  ".join(env.failures))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Optimizer updates: this project's fused kernels against NumPy, numexpr and PyTorch.

Two updates on float32 vectors of 1e3 .. 1e7 elements:

* ``seed``: ``w[...] = -eta * (g + lam * w)`` (the update the project started from);
* ``adam``: ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g^2``,
  ``w -= step m / (sqrt(v_hat) + eps)`` with ``step = lr / (1 - b1^t)`` folded into
  one number, as ``torch.optim.Adam`` does -- three statements, 13 ops, the same
  arithmetic in every row.

Rows: ours with the NumPy block evaluator and the numba evaluator (1 and 2
threads; with the statements built once and assigned every call, which
replays a prepared kernel call; and for Adam, its three statements as one
``assign_all``, one loop), naive NumPy (full-size temporaries, the
baseline), hand-written NumPy with ``out=``, numexpr, PyTorch eager in place,
optionally ``torch.compile`` (``--torch-compile``; its first compile takes
~30 s here) -- peers with 2 threads, numexpr and torch.compile also with 1 --
and the memory floor for the bytes the update must move at least (each array
read once and written once). The rows of one size take turns, so a busy
neighbour slows them alike. Before them, ``update_overhead``:
each statement at 1e3 elements against one NumPy ufunc call; after them, the
extra memory each needs at 1e7.
``--threshold`` adds the serial/parallel crossover of the numba kernels,
``--threading`` the numba threading layers next to a BLAS call, and ``--ops``
the per-op costs of both CPU evaluators.

Run: ``python benchmarks/bench_update.py [--quick] [--torch-compile] [--threshold]
[--threading] [--ops] [--only threshold|threading|ops]``
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    RESULTS_DIR,
    Table,
    bandwidth_floor,
    interleaved_timeit,
    pin_threads,
    print_machine_info,
    timeit,
)

import minitorch_exp.tensor as mt
from minitorch_exp.tensor import cpu_numba

ETA, LAM = 0.1, 0.01
B1, B2, LR, EPS = 0.9, 0.999, 1e-3, 1e-8
C1, C2 = 1 - B1 ** 10, 1 - B2 ** 10   # bias corrections at step 10
STEP = LR / C1                        # the step size, bias correction folded in
BYTES_PER_ELEMENT = {"seed": 3 * 4, "adam": 7 * 4}  # read g, w (m, v); write w (m, v)


# Each builder below takes the size and, where it can run elsewhere, where to run:
# ``xp`` (an array module: numpy, or cupy for bench_cuda.py) or ``device`` ("cpu",
# "cuda"). The defaults are this script's CPU setup.

def arrays(n: int, count: int, xp=np) -> list:
    """``count`` float32 vectors in [0.5, 1.5), the same numbers on every device."""
    rng = np.random.default_rng(0)
    return [xp.asarray(rng.random(n, dtype=np.float32) + 0.5) for _ in range(count)]


def ours_arrays(n: int, count: int, device="cpu") -> list:
    """:func:`arrays` as this project's Tensors (zero-copy on the CPU)."""
    if device == "cpu":
        return [mt.from_numpy(a) for a in arrays(n, count)]
    return [mt.tensor(a, device=device) for a in arrays(n, count)]


def torch_arrays(n: int, count: int, device="cpu") -> list:
    """:func:`arrays` as PyTorch tensors (sharing memory on the CPU)."""
    import torch
    return [torch.from_numpy(a).to(device) for a in arrays(n, count)]


# ---- the seed update ---------------------------------------------------------

def seed_ours(n, device="cpu"):
    w, g = ours_arrays(n, 2, device)
    return lambda: w.__setitem__(Ellipsis, -ETA * (g + LAM * w))


def seed_ours_built_once(n, device="cpu"):
    """The statement built once and assigned every call (a prepared assignment)."""
    w, g = ours_arrays(n, 2, device)
    update = -ETA * (g + LAM * w)
    return lambda: w.__setitem__(Ellipsis, update)


def seed_naive(n, xp=np):
    w, g = arrays(n, 2, xp)
    return lambda: w.__setitem__(Ellipsis, -ETA * (g + LAM * w))


def seed_out(n):
    w, g = arrays(n, 2)

    def step():
        np.multiply(w, LAM, out=w)
        np.add(w, g, out=w)
        np.multiply(w, -ETA, out=w)
    return step


def seed_numexpr(n):
    import numexpr as ne
    w, g = arrays(n, 2)
    return lambda: ne.evaluate("-eta * (g + lam * w)", out=w,
                               local_dict={"eta": ETA, "lam": LAM, "g": g, "w": w})


def seed_torch(n, device="cpu"):
    w, g = torch_arrays(n, 2, device)
    return lambda: w.mul_(LAM).add_(g).mul_(-ETA)


def seed_torch_compile(n, device="cpu"):
    import torch
    w, g = torch_arrays(n, 2, device)

    @torch.compile(dynamic=False)
    def step(w, g):
        w.copy_(-ETA * (g + LAM * w))
    return lambda: step(w, g)


# ---- the Adam update ---------------------------------------------------------

def adam_statements(w, g, m, v) -> list:
    """Adam's three statements as ``(dst, expression)`` pairs (built, not yet run)."""
    return [(m, B1 * m + (1 - B1) * g), (v, B2 * v + (1 - B2) * g * g),
            (w, w - STEP * m / ((v / C2).sqrt() + EPS))]


def adam_ours(n, device="cpu"):
    w, g, m, v = ours_arrays(n, 4, device)

    def step():  # built every call, as a training loop does; a tree reads when assigned
        for dst, e in adam_statements(w, g, m, v):
            dst[...] = e
    return step


def adam_ours_built_once(n, device="cpu"):
    statements = adam_statements(*ours_arrays(n, 4, device))

    def step():
        for dst, e in statements:
            dst[...] = e
    return step


def adam_ours_one_kernel(n, device="cpu"):
    """The three statements as one ``assign_all``: one loop on the CPU."""
    w, g, m, v = ours_arrays(n, 4, device)
    return lambda: mt.assign_all(adam_statements(w, g, m, v))


def adam_naive(n, xp=np):
    w, g, m, v = arrays(n, 4, xp)

    def step():
        m[...] = B1 * m + (1 - B1) * g
        v[...] = B2 * v + (1 - B2) * g * g
        w[...] = w - STEP * m / (xp.sqrt(v / C2) + EPS)
    return step


def adam_out(n):
    w, g, m, v = arrays(n, 4)
    t = np.empty_like(w)

    def step():
        np.multiply(m, B1, out=m)
        np.multiply(g, 1 - B1, out=t)
        np.add(m, t, out=m)
        np.multiply(v, B2, out=v)
        np.multiply(g, g, out=t)
        np.multiply(t, 1 - B2, out=t)
        np.add(v, t, out=v)
        np.divide(v, C2, out=t)
        np.sqrt(t, out=t)
        np.add(t, EPS, out=t)
        np.divide(m, t, out=t)
        np.multiply(t, STEP, out=t)
        np.subtract(w, t, out=w)
    return step


def adam_numexpr(n):
    import numexpr as ne
    w, g, m, v = arrays(n, 4)
    names = {"b1": B1, "b2": B2, "step": STEP, "eps": EPS, "c2": C2,
             "w": w, "g": g, "m": m, "v": v}

    def step():
        ne.evaluate("b1 * m + (1 - b1) * g", out=m, local_dict=names)
        ne.evaluate("b2 * v + (1 - b2) * g * g", out=v, local_dict=names)
        ne.evaluate("w - step * m / (sqrt(v / c2) + eps)", out=w, local_dict=names)
    return step


def adam_torch(n, device="cpu"):
    w, g, m, v = torch_arrays(n, 4, device)

    def step():
        m.mul_(B1).add_(g, alpha=1 - B1)
        v.mul_(B2).addcmul_(g, g, value=1 - B2)
        denom = (v / C2).sqrt_().add_(EPS)   # one temporary, as torch.optim.Adam has
        w.addcdiv_(m, denom, value=-STEP)
    return step


def adam_torch_compile(n, device="cpu"):
    import torch
    w, g, m, v = torch_arrays(n, 4, device)

    @torch.compile(dynamic=False)
    def step(w, g, m, v):
        m.copy_(B1 * m + (1 - B1) * g)
        v.copy_(B2 * v + (1 - B2) * g * g)
        w.copy_(w - STEP * m / ((v / C2).sqrt() + EPS))
    return lambda: step(w, g, m, v)


PEERS = {
    "seed": {"numpy naive": seed_naive, "numpy out=": seed_out, "numexpr": seed_numexpr,
             "torch eager": seed_torch, "torch.compile": seed_torch_compile},
    "adam": {"numpy naive": adam_naive, "numpy out=": adam_out, "numexpr": adam_numexpr,
             "torch eager": adam_torch, "torch.compile": adam_torch_compile},
}
OURS = {"seed": seed_ours, "adam": adam_ours}
OURS_BUILT_ONCE = {"seed": seed_ours_built_once, "adam": adam_ours_built_once}


# ---- running -----------------------------------------------------------------

def set_threads(n: int) -> None:
    pin_threads(n)
    try:
        import numexpr
        numexpr.set_num_threads(n)
    except ImportError:
        pass


def our_rows(update, n) -> dict:
    """Our rows at size ``n``: name -> (step, what to set before it runs: threads, evaluator)."""
    def using(threads: int, backend: str = "numba"):
        def setup():
            mt.set_cpu_backend(backend)
            set_threads(threads)
        return setup

    rows = {"ours numpy-blocks": (OURS[update](n), using(2, "numpy"))}
    for threads in (1, 2):
        rows[f"ours numba {threads}T"] = (OURS[update](n), using(threads))
    rows["ours numba 1T, built once"] = (OURS_BUILT_ONCE[update](n), using(1))
    if update == "adam":
        for threads in (1, 2):
            rows[f"ours numba {threads}T, assign_all"] = (adam_ours_one_kernel(n),
                                                          using(threads))
    return rows


def overhead_table(min_time, n: int = 1000) -> Table:
    """Per-statement overhead at 1e3 elements against one NumPy ufunc call.

    The issue's yardsticks: a cached statement's evaluation within 3x of one
    ufunc, and the whole statement (build + evaluate) within 2x of naive NumPy
    and ahead of PyTorch eager in place. The rows of each update take turns
    (``interleaved_timeit``), so a busy neighbour slows them alike.
    """
    set_threads(1)
    a, b = arrays(n, 2)
    c = np.empty_like(a)
    table = Table("update_overhead", baseline="numpy: one ufunc (add, out=)")
    with mt.using_cpu_backend("numba"):
        for update in ("seed", "adam"):
            steps = {"numpy: one ufunc (add, out=)": lambda: np.add(a, b, out=c)} \
                if update == "seed" else {}
            steps[f"{update}: ours, built once"] = OURS_BUILT_ONCE[update](n)
            steps[f"{update}: ours, whole statement"] = OURS[update](n)
            if update == "adam":
                steps["adam: ours, whole statements, one assign_all"] = adam_ours_one_kernel(n)
            for name in ("numpy naive", "torch eager"):
                try:
                    steps[f"{update}: {name}"] = PEERS[update][name](n)
                except ImportError as err:
                    print(f"  {name}: skipped ({err})")
            for name, seconds in interleaved_timeit(steps, min_time * len(steps),
                                                    rounds=9).items():
                table.add(name, n, seconds)
    set_threads(2)
    return table


ONE_THREAD_PEERS = ("numexpr", "torch.compile")  # the yardsticks, also at 1 thread


def peer_rows(update, n, with_compile: bool) -> dict:
    """The peers' rows at size ``n``, as in :func:`our_rows`: 2 threads each, and
    numexpr and torch.compile again with 1 (named ``... 1T``)."""
    rows = {}
    for name, make in PEERS[update].items():
        if name == "torch.compile" and not with_compile:
            continue
        try:
            rows[name] = (make(n), lambda: set_threads(2))
            if name in ONE_THREAD_PEERS:
                rows[f"{name} 1T"] = (make(n), lambda: set_threads(1))
        except ImportError as err:
            print(f"  {name}: skipped ({err})")
    return rows


def run_update(update, sizes, min_time, with_compile) -> Table:
    """Every row of one size takes turns (``interleaved_timeit``, long blocks: torch's
    and numba's idle threads slow each other right after a switch), so the ratios
    compare runs made under the same load."""
    table = Table(f"update_{update}", baseline="numpy naive")
    for n in sizes:
        rows = {**peer_rows(update, n, with_compile), **our_rows(update, n)}
        times = interleaved_timeit({name: step for name, (step, _) in rows.items()},
                                   min_time * len(rows),
                                   setups={name: setup for name, (_, setup) in rows.items()})
        for name, seconds in times.items():
            table.add(name, n, seconds)
        table.add("memory floor", n, bandwidth_floor(BYTES_PER_ELEMENT[update] * n))
        print(f"  {update} n={n:.0e} done", flush=True)
    mt.set_cpu_backend("numba")
    set_threads(2)
    return table


# ---- memory ------------------------------------------------------------------

def peak_extra_bytes(step) -> int:
    """Peak bytes allocated (as tracemalloc sees NumPy's buffers) during one call."""
    step()  # warm up: kernels compiled, scratch buffers made
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def memory_table(n: int) -> str:
    rows = []
    for update in ("seed", "adam"):
        for backend in ("numpy", "numba"):
            with mt.using_cpu_backend(backend):
                rows.append((update, f"ours {backend}", peak_extra_bytes(OURS[update](n))))
        for name in ("numpy naive", "numpy out="):
            rows.append((update, name, peak_extra_bytes(PEERS[update][name](n))))
    lines = [f"# Peak extra memory during one update, n = {n:.0e} float32",
             "", f"Each operand is {4 * n / 2**20:.1f} MiB.", "",
             "| update | name | peak extra |", "| --- | --- | ---: |"]
    lines += [f"| {u} | {name} | {b / 2**20:.2f} MiB |" for u, name, b in rows]
    return "\n".join(lines) + "\n"


# ---- serial/parallel crossover of the numba kernels --------------------------

def threshold_table(min_time) -> Table:
    """Serial vs prange variants by size (2 threads), under this process's numba
    threading layer (``NUMBA_THREADING_LAYER`` picks it): the seed kernel, Adam's
    ``w`` kernel, and Adam's three statements as three kernels in a row.

    Times the backend calls alone, so the Python front end does not blur the
    crossover that ``cpu_numba.PARALLEL_MIN_BY_LAYER`` encodes.
    """
    from minitorch_exp.tensor.backends import _cpu_backend
    from minitorch_exp.tensor.plan import make_plan
    set_threads(2)
    import numba
    table = Table(f"numba_parallel_threshold_{numba.threading_layer()}", baseline="serial")
    backend = _cpu_backend("numba")

    def kernels(statements):
        calls = [(dst, *make_plan(e, 1)) for dst, e in statements]
        return lambda: [backend.elementwise(plan, dst, leaves, scalars, "=")
                        for dst, plan, leaves, scalars in calls]

    for k in range(14, 25):
        w, g, m, v = (mt.from_numpy(a) for a in arrays(1 << k, 4))
        steps = {"seed": kernels([(w, -ETA * (g + LAM * w))]),
                 "adam-w": kernels([(w, w - STEP * m / ((v / C2).sqrt() + EPS))]),
                 "adam, 3 kernels": kernels(adam_statements(w, g, m, v))}
        for label, step in steps.items():
            for name, limit in (("serial", 1 << 62), ("parallel", 0)):
                cpu_numba.set_parallel_min(limit)
                table.add(name, f"{label} 2^{k}", timeit(step, min_time=min_time))
    cpu_numba.set_parallel_min(None)
    return table


# ---- per-op costs: which evaluator is faster for which op ----------------------

def op_cost_table(min_time) -> Table:
    """One op over 2^20 float32 elements, serial, backend call only (no Python front end).

    numba compiles exp/log/tanh to one libm call per element; NumPy's ufuncs
    have SIMD loops for them. These numbers fill each registry row's ``cost_ns``.
    """
    from minitorch_exp.tensor.backends import _cpu_backend
    from minitorch_exp.tensor.plan import make_plan
    set_threads(1)
    n = 1 << 20
    x = mt.from_numpy((np.random.default_rng(0).random(n, dtype=np.float32) - 0.5) * 4)
    y = mt.from_numpy(np.empty(n, np.float32))
    exprs = {"exp": x.exp(), "log": abs(x).log(), "tanh": x.tanh(), "sigmoid": x.sigmoid(),
             "pow (x**2)": x ** 2, "pow (x**2.5)": abs(x) ** 2.5, "sqrt": abs(x).sqrt(),
             "where": mt.where(x > 0, x, 0.1), "x * 2 + 1": x * 2 + 1, "relu": x.relu(),
             **{name: mt.apply_op(name, abs(x) if name in ("log1p", "rsqrt") else x)
                for name in ("sin", "cos", "tan", "erf", "log1p", "expm1", "rsqrt", "floor")}}
    table = Table("cpu_op_costs", baseline="numpy blocks")
    saved = cpu_numba.numpy_is_faster
    cpu_numba.numpy_is_faster = lambda plan, elements: False  # always run the kernel
    for label, e in exprs.items():
        plan, leaves, scalars = make_plan(e, 1)
        for name, backend in (("numpy blocks", "numpy"), ("numba kernel", "numba")):
            be = _cpu_backend(backend)
            step = lambda: be.elementwise(plan, y, leaves, scalars, "=")  # noqa: B023,E731
            table.add(name, f"{label} 2^20", timeit(step, min_time=min_time))
    cpu_numba.numpy_is_faster = saved
    set_threads(2)
    return table


# ---- numba threading layer next to BLAS -----------------------------------------

def threading_child() -> None:
    """Print timings of a parallel kernel, a BLAS call, and the two back to back."""
    import json
    import time
    n = 1 << 20
    step = seed_ours(n)
    a, b = (np.random.default_rng(1).random((256, 256), dtype=np.float32) for _ in range(2))
    c = np.empty_like(a)

    def median_time(fn) -> float:
        fn()
        times = []
        for _ in range(300):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    set_threads(2)
    mt.set_cpu_backend("numba")
    cpu_numba.set_parallel_min(0)
    blas = lambda: np.matmul(a, b, out=c)  # noqa: E731
    result = {"kernel": median_time(step), "blas": median_time(blas)}
    result["kernel then blas"] = median_time(lambda: (step(), blas()))
    result["blas then kernel"] = median_time(lambda: (blas(), step()))
    print(json.dumps(result))


def threading_table() -> Table:
    """The same measurement in one process per numba threading layer."""
    import json
    import os
    import subprocess
    table = Table("numba_threading_layer", baseline="tbb: kernel then blas")
    setups = {"tbb": ("tbb", "300000"),  # GOMP_SPINCOUNT: libgomp's default
              "workqueue": ("workqueue", "300000"),
              "omp": ("omp", "300000"), "omp, GOMP_SPINCOUNT=1000": ("omp", "1000")}
    for label, (layer, spin) in setups.items():
        env = dict(os.environ, NUMBA_THREADING_LAYER=layer, GOMP_SPINCOUNT=spin)
        out = subprocess.run([sys.executable, __file__, "--threading-child"], env=env,
                             capture_output=True, text=True, check=True).stdout
        for name, seconds in json.loads(out.strip().splitlines()[-1]).items():
            table.add(f"{label}: {name}", "2^20 / 256^2", seconds)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 1e3 and 1e5 only")
    parser.add_argument("--torch-compile", action="store_true", help="add torch.compile rows")
    parser.add_argument("--threshold", action="store_true", help="numba serial vs parallel")
    parser.add_argument("--threading", action="store_true", help="numba threading layers")
    parser.add_argument("--threading-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ops", action="store_true", help="per-op numba vs NumPy costs")
    parser.add_argument("--only", choices=["threshold", "threading", "ops"],
                        help="run only this part")
    args = parser.parse_args()
    if args.threading_child:
        threading_child()
        return
    print_machine_info()
    sizes = [10**3, 10**5] if args.quick else [10**3, 10**5, 10**6, 10**7]
    min_time = 0.1 if args.quick else 0.3
    if not args.only:
        run_updates(args, sizes, min_time)
    for wanted, make in (("threshold", lambda: threshold_table(min_time)),
                         ("threading", threading_table),
                         ("ops", lambda: op_cost_table(min_time))):
        if getattr(args, wanted) or args.only == wanted:
            table = make()
            table.print()
            table.write()


def run_updates(args, sizes, min_time) -> None:
    overhead = overhead_table(min_time)
    overhead.print()
    overhead.write()
    for update in ("seed", "adam"):
        table = run_update(update, sizes, min_time, args.torch_compile)
        table.print()
        table.write()
    if not args.torch_compile:
        print("torch.compile: skipped (its first compile takes ~30 s on the reference "
              "machine); add --torch-compile")
    memory = memory_table(sizes[-1])
    print(memory)
    (RESULTS_DIR / "update_memory.md").write_text(memory)


if __name__ == "__main__":
    main()

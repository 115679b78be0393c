"""A guided tour of expression templates in minitorch_exp, runnable top to bottom.

    python examples/tour_expression_templates.py [--out runs/tours] [--n 1000000]

It follows the weight update from mshadow's expression-template tutorial,
``w = -eta * (g + lam * w)``: how writing it builds a tree instead of
computing, why eager NumPy pays for temporaries, the one fused pass that runs
instead (its Plan and its source for each device), savers, a user-defined op
fusing with the built-ins, and errors caught before anything runs. Files go
into ``--out``: a chart of eager NumPy against the fused pass, and the
generated kernel sources.
"""

from __future__ import annotations

import argparse
import textwrap
import time
import tracemalloc
from pathlib import Path

import numpy as np

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.tensor.explain import explain

ETA, LAM = 0.1, 0.01


def section(title: str) -> None:
    print(f"\n{'=' * 78}\n{title}\n{'=' * 78}")


def say(text: str) -> None:
    print(textwrap.dedent(text).strip() + "\n")


def only_code(report: str) -> str:
    """The code section of an explain() report, without its headline."""
    return report[report.index("Code of"):]


# ---- 1. a tree, not a result ---------------------------------------------------------

def build_lazily(n: int):
    section("1. Writing the update builds a tree; nothing is computed yet")
    g = T.randn(n)
    w = T.randn(n)
    with mt.count_kernels() as k:
        e = -ETA * (g + LAM * w)
    say(f"""
        e = -eta * (g + lam * w) is a {type(e).__name__} node of shape {e.shape}, and
        building it ran {k.total} kernels: each operator only recorded what to do.
        (Python evaluates -eta first, so -0.1 arrives as one scalar.)
        The tree, one node per line:""")
    print(explain(e, out=w, parts=["tree"]))
    return g, w


# ---- 2. what eager NumPy pays ---------------------------------------------------------

def eager_numpy_cost(n: int) -> dict:
    section("2. Eager NumPy: one temporary array per operator")
    rng = np.random.default_rng(0)
    g_np = rng.standard_normal(n, dtype=np.float32)
    w_np = rng.standard_normal(n, dtype=np.float32)
    say(f"""
        Evaluated eagerly, lam * w makes a new array, g + (that) a second, and
        -eta * (that) a third: 3 allocations of {n * 4 / 2**20:.1f} MiB for a
        {n}-element float32 update, and 3 passes over memory instead of 1.""")
    peak_eager, t_eager = _measure(lambda: -ETA * (g_np + LAM * w_np))
    report("eager NumPy", peak_eager, t_eager)
    return {"peak": peak_eager, "time": t_eager}


def fused_cost(g, w) -> dict:
    def update():
        w[...] = -ETA * (g + LAM * w)
    results = {}
    for backend in ("numpy", "numba"):
        try:
            with T.using_cpu_backend(backend):
                update()  # the first call lowers the Plan (and compiles, for numba)
                results[backend] = _measure(update)
        except ImportError:  # numba is optional at run time
            continue
        report(f"fused ({backend})", *results[backend])
    say("""

        The NumPy evaluator cuts the arrays into cache-sized blocks and runs the
        whole program on each block through a few scratch buffers allocated once;
        numba runs the same Plan as one compiled loop. Either way no temporary as
        large as the operands ever exists, and w is written in place.""")
    return {name: {"peak": p, "time": t} for name, (p, t) in results.items()}


def report(label: str, peak: int, seconds: float) -> None:
    print(f"  {label + ':':<16} peak extra memory {peak / 2**20:6.1f} MiB, "
          f"{seconds * 1e3:7.2f} ms per update")


def _measure(fn, repeat: int = 10) -> tuple[int, float]:
    """Peak memory allocated during one call (tracemalloc), and the best time of ``repeat``."""
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return peak, min(times)


CHART_PANELS = [("peak", "peak extra memory (MiB)", 2**20, "{:.1f} MiB"),
                ("time", "time per update (ms)", 1e-3, "{:.2f} ms")]


def chart(results: dict):
    """Eager against fused, memory and time side by side; every bar carries its value,
    so a bar of height 0 (the fused passes allocate nothing) still reads as 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 3.2))
    FigureCanvasAgg(fig)
    labels = list(results)
    colors = ["#d9665b", "#4a90c2", "#6aa84f"][:len(labels)]
    for i, (key, title, scale, fmt) in enumerate(CHART_PANELS):
        ax = fig.add_subplot(1, 2, i + 1)
        values = [results[name][key] / scale for name in labels]
        bars = ax.bar(labels, values, color=colors)
        ax.bar_label(bars, labels=[fmt.format(v) for v in values], padding=2, fontsize=8)
        ax.set_ylim(0, max(values) * 1.2 or 1)  # room for the labels over the tallest bar
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("w = -eta * (g + lam * w)", fontsize=11)
    fig.tight_layout()
    return fig


def save_chart(results: dict, path: Path) -> None:
    chart(results).savefig(path, dpi=120)
    print(f"  chart saved to {path}")


# ---- 3. the plan and its code -----------------------------------------------------------

def plan_and_sources(g, w, out: Path) -> None:
    section("3. One Plan, one pass: explain() shows the cuts, the Plan, the code, the cost")
    # Every section but the code, which follows once per device.
    report = explain(-ETA * (g + LAM * w), out=w, parts=["tree", "kernels", "plan", "cost"])
    print(report)
    say("""
        The same Plan becomes different code on each device. With numba the
        whole program is one compiled loop; on CUDA one kernel, each thread
        computing elements with every input's own strides (no GPU is needed to
        see the source).""")
    for label, kwargs, filename in [("cpu / numba", {"backend": "numba"}, "update_numba.py"),
                                    ("cuda", {"device": "cuda"}, "update_cuda.cu")]:
        code = only_code(explain(-ETA * (g + LAM * w), out=w, parts=["code"], **kwargs))
        shown = code.splitlines()
        print(f"--- {label}: {shown[0]}")
        print("\n".join(shown[1:28]) + ("\n  ..." if len(shown) > 28 else ""))
        if "NumPy schedule" not in shown[0]:  # the generator exists: keep its source
            (out / filename).write_text("\n".join(line[2:] for line in shown[1:]) + "\n")
            print(f"  (full source saved to {out / filename})\n")


# ---- 4. savers -----------------------------------------------------------------------

def savers(n: int) -> None:
    section("4. Savers: =, +=, -=, *=, /= write straight into the destination")
    g, w = T.randn(n), T.randn(n)
    expected = w.numpy() - ETA * (g.numpy() + LAM * w.numpy())
    with mt.count_kernels() as k:
        w -= ETA * (g + LAM * w)
    assert np.allclose(w.numpy(), expected, rtol=1e-5, atol=1e-6)
    say(f"""
        w -= eta * (g + lam * w) ran {k.total} kernel ({k['fused']} fused): the saver folds
        the subtraction into the same pass, reading w and writing it back in place.
        The seed tutorial's sv::plusto, minusto, multo, divto are these operators.""")
    for saver, apply in [("+=", lambda: w.__iadd__(g * 2)), ("*=", lambda: w.__imul__(0.5))]:
        with mt.count_kernels() as k:
            apply()
        print(f"  w {saver} ...  -> {k.total} kernel")


# ---- 5. a user-defined op -----------------------------------------------------------------

def user_op(g, w) -> None:
    section("5. A user-defined op fuses with the built-ins")
    mt.register_op("my_max", np.maximum, "({0} > {1} ? {0} : {1})", arity=2)
    try:
        e = T.apply_op("my_max", g * 2, w) + 1
        say("""
            register_op('my_max', np.maximum, '({0} > {1} ? {0} : {1})', arity=2) adds
            an op to the same registry the built-ins use: NumPy code for the CPU, a
            CUDA expression (checked token by token before it reaches any kernel).""")
        print(explain(e, parts=["tree", "kernels"]))
        with mt.count_kernels() as k:
            result = e.numpy()
        assert np.allclose(result, np.maximum(g.numpy() * 2, w.numpy()) + 1)
        print(f"\n  evaluated in {k.total} kernel, equal to NumPy's np.maximum(2g, w) + 1")
        cuda = only_code(explain(e, device="cuda", parts=["code"]))
        print("  in the CUDA source: " + next(line.strip() for line in cuda.splitlines()
                                             if "?" in line and "t0" in line))
    finally:
        mt.unregister_op("my_max")


# ---- 6. errors before anything runs --------------------------------------------------------

def early_errors(g) -> None:
    section("6. Shape, device and dtype errors are caught when the tree is built")
    with mt.count_kernels() as k:
        _show_error("shape", lambda: g + T.zeros(3))
        fake_gpu = T.Tensor.meta(g.shape, g.dtype)   # metadata only: no memory, no GPU
        fake_gpu.device = mt.Device("cuda")
        _show_error("device", lambda: g * 2 + fake_gpu)
        counts = T.zeros(g.shape, dtype="int32")
        _show_error("dtype", lambda: counts.__iadd__(g * 0.5))
    say(f"""
        Kernels run while making those mistakes: {k.total}. Every check reads
        only shapes, dtypes and devices, so it happens as the tree is built (or
        when assignment begins), and the message names the op and each operand.""")


def _show_error(kind: str, fn) -> None:
    try:
        fn()
    except (ValueError, TypeError) as err:
        print(f"  {kind:<6} -> {type(err).__name__}: {err}\n")
    else:  # pragma: no cover - a tour step that must fail
        raise AssertionError(f"the {kind} mistake was not caught")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tours"))
    parser.add_argument("--n", type=int, default=1_000_000, help="elements in g and w")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    g, w = build_lazily(args.n)
    results = {"eager NumPy": eager_numpy_cost(args.n)}
    results.update({f"fused ({name})": r for name, r in fused_cost(g, w).items()})
    save_chart(results, args.out / "eager_vs_fused.png")
    plan_and_sources(T.randn(4, 5), T.randn(4, 5), args.out)
    savers(args.n)
    user_op(T.randn(3, 4), T.randn(3, 4))
    early_errors(T.randn(4, 5))
    section("Done")
    print(f"Files written to {args.out}/")


if __name__ == "__main__":
    main()

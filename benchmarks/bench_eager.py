"""Eager speed on small tensors (issue 22): minitorch_exp against NumPy, a plain-Python
autograd over NumPy and PyTorch, all in this process, taking turns.

Sections (``--only`` picks some):

* ``ops``: per-op cost on 2x2 float32 -- one op forward, a chain of 10 forward, a
  chain of 10 forward + backward (``x = x * w``; values realized) -- for NumPy (no
  autograd), ``micrograd`` (the plain-Python autograd below), PyTorch with
  ``requires_grad`` and ours;
* ``tutorials``: a step of PyTorch's "learning PyTorch with examples" polynomial fit
  (autograd version: y = a + b x + c x^2 + d x^3 over 2000 points, ``loss.backward()``,
  SGD by hand under ``no_grad``), and of its dynamic network (64 x 1000 -> 100 -> 10,
  ReLU, the middle layer applied 0-3 times at random, SGD with momentum); 15 short
  rounds, and ours over PyTorch round by round (median, quartiles);
* ``mlp``: the eager training step of ``bench_mlp.py`` (784-256-10 and 784-512-256-10,
  batch 32 and 128, SGD with momentum, cross-entropy) at 1 and 2 threads (on 2, each
  library in a process of its own: PyTorch's OpenMP threads spin between steps);
* ``sweep``: a chain of 10 elementwise ops, forward and backward, at sizes from 16 to
  2^20 elements, computed at once (threshold above the size) and fused (threshold 0):
  where fusing starts to pay is the fusion threshold (node/grad_mode.py);
* ``rows``: each built-in row's NumPy form against its compiled loop on 64K elements,
  and relu computed at once with and without the loop by size (``eager.COMPILED_FROM``);
* ``folds``: reductions of many short rows, along them and across a transposed copy
  (``eager.short_rows``);
* ``--load``: the MNIST MLP step (784-256-10, batch 128, eager and captured) with
  ``3 x cores`` busy processes in the background, default threads against one thread.

Ratios are time over PyTorch's (``ops`` also over NumPy's); below 1.00x is faster. The
machine's load average is printed before each section: compare rows of one run.

Run: ``python benchmarks/bench_eager.py [--quick] [--only ops,tutorials,mlp,sweep,rows,folds]
[--load]``
"""

from __future__ import annotations

import argparse
import functools
import math
import multiprocessing
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_mlp import ARCHS, batches, initial_weights, minitorch_step, torch_step  # noqa: E402
from common import (  # noqa: E402, I001
    Table,
    interleaved_samples,
    interleaved_timeit,
    paired_ratio,
    pin_threads,
    print_machine_info,
)

import minitorch_exp as mt  # noqa: E402
from minitorch_exp import nn  # noqa: E402

try:
    import torch
except ImportError:  # the PyTorch rows are left out
    torch = None

CHAIN = 10


def load_line() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


# ---------------------------------------------------------------- a plain-Python autograd

class Value:
    """micrograd's design over NumPy arrays: each op keeps its inputs and a closure that
    adds its inputs' gradients; backward walks them in reverse topological order."""

    __slots__ = ("data", "grad", "_prev", "_backward")

    def __init__(self, data, prev=()):
        self.data, self.grad, self._prev, self._backward = data, None, prev, None

    def _add_grad(self, g):
        self.grad = g if self.grad is None else self.grad + g

    def __mul__(self, other):
        out = Value(self.data * other.data, (self, other))

        def backward():
            self._add_grad(out.grad * other.data)
            other._add_grad(out.grad * self.data)
        out._backward = backward
        return out

    def sum(self):
        out = Value(self.data.sum(), (self,))

        def backward():
            self._add_grad(np.broadcast_to(out.grad, self.data.shape))
        out._backward = backward
        return out

    def backward(self):
        order, seen, stack = [], set(), [(self, False)]
        while stack:
            v, done = stack.pop()
            if done:
                order.append(v)
            elif id(v) not in seen:
                seen.add(id(v))
                stack.append((v, True))
                stack.extend((p, False) for p in v._prev)
        self.grad = np.ones_like(self.data)
        for v in reversed(order):
            if v._backward is not None:
                v._backward()


# ---------------------------------------------------------------- per-op cost

def op_peers(shape=(2, 2)) -> dict:
    """name -> (a, b, realize): two leaves of ``shape`` and what makes a value computed."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    peers = {"numpy": (a, b, None), "micrograd": (Value(a.copy()), Value(b.copy()), None)}
    if torch is not None:
        peers["pytorch"] = (torch.tensor(a, requires_grad=True),
                            torch.tensor(b, requires_grad=True), None)
    peers["ours"] = (mt.tensor(a, requires_grad=True), mt.tensor(b, requires_grad=True),
                     mt.Node.realize)
    return peers


def op_steps(x0, w, realize, backward: bool):
    """One op, a chain of 10, and (``backward``) a chain of 10 with ``sum().backward()``."""
    def one():
        y = x0 * w
        if realize:
            realize(y)

    def chain():
        x = x0
        for _ in range(CHAIN):
            x = x * w
        if backward:
            x.sum().backward()
        elif realize:
            realize(x)

    return one, chain


MIDSIZE = 50_000  # elements: below the fusion threshold, a 200 KB array each


def scaled_chain(x0):
    """``CHAIN`` times ``h * 0.5 + 1`` and ``sum().backward()``: PyTorch keeps none of
    the intermediates for backward (a number's product and a sum need none); this graph
    keeps every one until backward (docs/eager.md, "Limits")."""
    def step():
        h = x0
        for _ in range(CHAIN):
            h = h * 0.5 + 1.0
        h.sum().backward()
    return step


def per_op(min_time: float) -> Table:
    print(f"\n== per-op cost, 2x2 float32 (and {MIDSIZE} elements), 1 thread ({load_line()})")
    table = Table("eager_ops", baseline="pytorch" if torch is not None else "numpy")
    peers = op_peers()
    mid = op_peers((MIDSIZE,))
    steps = {}
    for name, (a, b, realize) in peers.items():
        one, chain = op_steps(a, b, realize, backward=False)
        steps[(name, "forward, one op")] = (one, 1)
        steps[(name, f"forward, chain of {CHAIN}, per op")] = (chain, CHAIN)
        if name != "numpy":
            steps[(name, f"forward + backward, chain of {CHAIN}, per op")] = (
                op_steps(a, b, realize, backward=True)[1], CHAIN)
        if name in ("ours", "pytorch"):
            steps[(name, f"fwd + bwd, {CHAIN} x (h * 0.5 + 1), {MIDSIZE} elements, per op")] = (
                scaled_chain(mid[name][0]), 2 * CHAIN)
    times = interleaved_timeit({key: fn for key, (fn, _) in steps.items()}, min_time)
    for (name, what), (_, ops) in steps.items():
        table.add(name, what, times[(name, what)] / ops)
    table.print()
    _ratios(table, "ours", "numpy")
    return table


def _ratios(table: Table, name: str, other: str) -> None:
    """Print ``name``'s time over ``other``'s for every size both have."""
    rows = {(r.name, r.size): r.seconds for r in table.rows}
    for (n, size), seconds in rows.items():
        if n == name and (other, size) in rows:
            print(f"  {name} / {other}, {size}: {seconds / rows[(other, size)]:.2f}x")


# ---------------------------------------------------------------- PyTorch's tutorials

def polynomial_step(lib):
    """The tutorial's autograd step (``lib``: ``torch`` or ``mt``), its loss returned."""
    xs = np.linspace(-math.pi, math.pi, 2000, dtype=np.float32)
    x, y = lib.tensor(xs), lib.tensor(np.sin(xs))
    rng = np.random.default_rng(0)
    params = [lib.tensor(np.float32(v), requires_grad=True) for v in rng.standard_normal(4)]
    lr = 1e-6

    def step():
        a, b, c, d = params
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = ((y_pred - y) ** 2).sum()
        loss.backward()
        with lib.no_grad():
            for p in params:
                p -= lr * p.grad
                p.grad = None
        return loss

    return step


def polynomial_numpy_step():
    """The tutorial's NumPy version: the same step with its gradients written by hand."""
    x = np.linspace(-math.pi, math.pi, 2000, dtype=np.float32)
    y = np.sin(x)
    a, b, c, d = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    params = np.array([a, b, c, d], dtype=np.float32)
    lr = np.float32(1e-6)

    def step():
        a, b, c, d = params
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        grad_y_pred = 2.0 * (y_pred - y)
        grads = [grad_y_pred.sum(), (grad_y_pred * x).sum(), (grad_y_pred * x ** 2).sum(),
                 (grad_y_pred * x ** 3).sum()]
        params[:] -= lr * np.array(grads, dtype=np.float32)

    return step


def dynamic_net_step(lib, nn_mod, seed: int = 0):
    """The tutorial's dynamic network: the middle layer reused 0-3 times (the same
    random depths, drawn from ``seed``, for every library), MSE summed, SGD + momentum."""
    rng = np.random.default_rng(seed)
    x = lib.tensor(rng.standard_normal((64, 1000)).astype(np.float32))
    y = lib.tensor(rng.standard_normal((64, 10)).astype(np.float32))
    layers = [nn_mod.Linear(1000, 100), nn_mod.Linear(100, 100), nn_mod.Linear(100, 10)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = (lib.optim if lib is torch else nn_mod.optim).SGD(params, lr=1e-4, momentum=0.9)
    depths = random.Random(seed)

    def step():
        h = layers[0](x).relu()
        for _ in range(depths.randint(0, 3)):
            h = layers[1](h).relu()
        loss = ((layers[2](h) - y) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def tutorials(min_time: float) -> Table:
    print(f"\n== PyTorch's tutorials, time per step, 1 thread ({load_line()})")
    table = Table("eager_tutorials", baseline="pytorch" if torch is not None else "numpy")
    steps = {("numpy", "polynomial"): polynomial_numpy_step(),
             ("ours", "polynomial"): polynomial_step(mt),
             ("ours", "dynamic net"): dynamic_net_step(mt, nn)}
    if torch is not None:
        steps[("pytorch", "polynomial")] = polynomial_step(torch)
        steps[("pytorch", "dynamic net")] = dynamic_net_step(torch, torch.nn)
    samples = interleaved_samples(steps, min_time, rounds=TUTORIAL_ROUNDS)
    for (name, what), seconds in samples.items():
        table.add(name, what, statistics.median(seconds))
    table.print()
    if torch is not None:
        for what in ("polynomial", "dynamic net"):
            print(f"   {what}: ours / pytorch, round by round: "
                  f"{paired_ratio(samples, ('ours', what), ('pytorch', what))}")
    return table


#: The tutorials' rounds: short ones, many, for the paired ratios' quartiles.
TUTORIAL_ROUNDS = 15


# ---------------------------------------------------------------- the eager MLP step

def mlp(min_time: float, thread_counts=(1, 2)) -> Table:
    """The eager MLP step of each library. On one thread they take turns in this process;
    on more, each runs in a process of its own (``_alone``), processes taking turns."""
    table = Table("eager_mlp", baseline="pytorch" if torch is not None else "ours")
    names = ["ours", "pytorch"] if torch is not None else ["ours"]
    for threads in thread_counts:
        pin_threads(threads)
        print(f"\n== eager MLP training step, {threads} thread(s) ({load_line()})")
        for arch in ARCHS:
            for batch in (32, 128):
                if threads == 1:
                    times = interleaved_timeit(_mlp_steps(names, arch, batch), min_time)
                else:
                    times = _alone(names, arch, batch, threads, min_time)
                for name, seconds in times.items():
                    table.add(name, f"{arch} b{batch} t{threads}", seconds)
    table.print()
    return table


def _mlp_steps(names, arch: str, batch: int) -> dict:
    weights, data = initial_weights(ARCHS[arch]), batches(batch)
    makers = {"ours": minitorch_step, "pytorch": torch_step}
    return {name: makers[name](weights, data)[0] for name in names}


def _alone(names, arch: str, batch: int, threads: int, min_time: float,
           rounds: int = 9) -> dict:
    """Each library's step timed in a process of its own, the processes taking turns
    (who goes first alternates); the median over ``rounds``. Not in one process: after
    each parallel region PyTorch's OpenMP threads spin, waiting for the next, and
    meanwhile hold the core the other library's threads need (ours ran the
    784-512-256-10 batch-32 step in 2.6 ms after PyTorch's turns, in 1.4 ms with
    ``OMP_WAIT_POLICY=PASSIVE``). A process per turn, ended after it: kept alive across
    turns (tried), an idle PyTorch process's threads spun into our turns the same way
    (our steps 1.06-1.17x PyTorch's).

    The 2-core VM these numbers come from has slow spells (the same step 2.5 ms, then
    3.9 ms for seconds), so each round's two turns are also compared with each other:
    the median of those ratios and their quartiles are printed."""
    spawn = multiprocessing.get_context("spawn")
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            with spawn.Pool(1) as pool:
                seconds = pool.apply(_time_alone, (name, arch, batch, threads, min_time / 2))
            samples[name].append(seconds)
    if len(names) == 2:
        ratios = [a / b for a, b in zip(*samples.values())]
        low, mid, high = statistics.quantiles(ratios, n=4)
        print(f"   {arch} b{batch} t{threads}: {names[0]} / {names[1]}, round by round: "
              f"median {mid:.3f}, quartiles {low:.3f}-{high:.3f} ({rounds} rounds)")
    return {name: statistics.median(found) for name, found in samples.items()}


def _time_alone(name: str, arch: str, batch: int, threads: int, min_time: float) -> float:
    pin_threads(threads)
    return interleaved_timeit(_mlp_steps([name], arch, batch), min_time)[name]


# ---------------------------------------------------------------- the threshold's crossover

SWEEP_SIZES = [1 << k for k in range(4, 21, 2)] + [3 << 10, 3 << 12, 3 << 14, 3 << 15, 1 << 17]


CHAIN_OPS = {  # the ops of a chain, in turn
    "arithmetic": (lambda h, w, b: h * w, lambda h, w, b: h + b, lambda h, w, b: h * 0.5),
    "with tanh": (lambda h, w, b: h * w, lambda h, w, b: h + b, lambda h, w, b: h.tanh()),
}


def chain_step(n: int, backward: bool, ops):
    """10 elementwise ops (``ops`` in turn) on ``n`` float32 elements; with ``backward``,
    inputs that require grad and ``sum().backward()``, else the result realized."""
    rng = np.random.default_rng(0)
    x, w, b = (mt.tensor(rng.standard_normal(n).astype(np.float32), requires_grad=backward)
               for _ in range(3))

    def step():
        h = x
        for i in range(CHAIN):
            h = ops[i % len(ops)](h, w, b)
        if backward:
            h.sum().backward()
        else:
            h.realize()

    return step


def with_threshold(step, threshold: int):
    def run():
        with mt.fusion(threshold=threshold):
            step()
    return run


def crossover(times: dict, sizes) -> int | None:
    """The smallest size from which fusing is faster at every size measured."""
    found = None
    for n in reversed(sizes):
        if times[("fused", n)] >= times[("at once", n)]:
            break
        found = n
    return found


def sweep(min_time: float) -> Table:
    print(f"\n== computed at once against fused: a chain of {CHAIN} elementwise ops, "
          f"float32, 1 thread ({load_line()})")
    table = Table("eager_sweep", baseline="at once")
    sizes = sorted(SWEEP_SIZES)
    for mix, ops in CHAIN_OPS.items():
        for what, backward in (("forward", False), ("forward + backward", True)):
            times = {}
            for n in sizes:
                step = chain_step(n, backward, ops)
                found = interleaved_timeit({"at once": with_threshold(step, n + 1),
                                            "fused": with_threshold(step, 0)}, min_time)
                for name, seconds in found.items():
                    times[(name, n)] = seconds
                    table.add(name, f"{n:>7} {mix}, {what}", seconds)
            print(f"{mix}, {what}: fusing pays from {crossover(times, sizes)} elements")
    table.print()
    print(f"the default threshold is {mt.get_fusion_threshold()} elements "
          "(MINITORCH_FUSION_THRESHOLD, mt.set_fusion_threshold)")
    return table


# ---------------------------------------------------------------- a busy machine

def _busy(stop) -> None:
    while not stop.is_set():
        pass


def under_load(min_time: float, defaults: dict) -> Table:
    """The MNIST MLP step with ``3 x cores`` busy processes: default threads (``defaults``,
    each library's own) against one."""
    cores = os.cpu_count() or 1
    weights, data = initial_weights(ARCHS["784-256-10"]), batches(128)
    steps = {"ours eager": minitorch_step(weights, data)[0],
             "ours captured": minitorch_step(weights, data, captured=True)[0]}
    if torch is not None:
        steps["pytorch"] = torch_step(weights, data)[0]
    stop = multiprocessing.Event()
    workers = [multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
               for _ in range(3 * cores)]
    for w in workers:
        w.start()
    time.sleep(1.0)
    print(f"\n== MNIST MLP step (784-256-10, batch 128) beside {len(workers)} busy processes "
          f"({load_line()}); default threads: {defaults}")
    table = Table("eager_load", baseline="1 thread")
    try:
        runs = {(name, threads): step for name, step in steps.items()
                for threads in ("default", "1 thread")}
        setups = {key: functools.partial(pin_threads_to, None if key[1] == "default" else 1,
                                         defaults) for key in runs}
        # rounds of ~0.2 s a configuration: the load drifts, and a median over many rounds
        # holds; with rounds of ~45 ms (a few steps each) four runs spread from 0.79x to
        # 1.02x eager default over one thread, with ~0.3 s 1.05x and 1.06x (docs/eager.md)
        times = interleaved_timeit(runs, 20 * min_time, rounds=15, setups=setups)
    finally:
        stop.set()
        for w in workers:
            w.join()
    for (name, threads), seconds in times.items():
        table.add(threads, name, seconds)
    table.print()
    for name in steps:
        d, one = times[(name, "default")], times[(name, "1 thread")]
        print(f"  {name}: {128 / d:,.0f} samples/s default, {128 / one:,.0f} with one "
              f"thread: default = {one / d:.2f}x one thread")
    pin_threads_to(None, defaults)
    return table


def thread_defaults() -> dict:
    """The thread counts each library starts with (what ``pin_threads_to(None)`` restores)."""
    import numba
    from threadpoolctl import threadpool_info
    found = {"numba": numba.get_num_threads(),
             "blas": max((p["num_threads"] for p in threadpool_info()), default=1)}
    if torch is not None:
        found["torch"] = torch.get_num_threads()
    return found


def pin_threads_to(n: int | None, defaults: dict) -> None:
    """Every library to ``n`` threads, or (None) back to its defaults."""
    import numba
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=n or defaults["blas"])
    numba.set_num_threads(n or defaults["numba"])
    if torch is not None:
        torch.set_num_threads(n or defaults["torch"])


# ---------------------------------------------------------------- where the time of an op goes

def cpu_time(fn, number: int = 2000, rounds: int = 15) -> float:
    """Seconds of this thread's CPU per call of ``fn``, the least over ``rounds``: other
    processes on a busy machine slow the wall clock, not this."""
    best = math.inf
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(number):
            fn()
        best = min(best, (time.thread_time() - start) / number)
    return best


def anatomy_pieces() -> dict:
    """What making one ``a * b`` Node (2x2 float32, requires grad) costs, piece by piece,
    lazy (the fused path) and computed at once, and PyTorch's op for scale."""
    from minitorch_exp.node import anomaly
    from minitorch_exp.node.function import Context
    from minitorch_exp.node.node import Node, lazy_value
    from minitorch_exp.node.ops import Elementwise
    from minitorch_exp.tensor import eager
    from minitorch_exp.tensor.engine import realize
    from minitorch_exp.tensor.expr import Map
    from minitorch_exp.tensor.ops import OPS
    from minitorch_exp.tensor.tokens import leaf_tokens

    rng = np.random.default_rng(0)
    arr_a, arr_b = (rng.standard_normal((2, 2)).astype(np.float32) for _ in range(2))
    a, b = mt.tensor(arr_a, requires_grad=True), mt.tensor(arr_b, requires_grad=True)
    ta, tb, mul = a.value, b.value, OPS["mul"]

    def fused_op():
        with mt.fusion(threshold=0):
            return a * b

    pieces = {
        ("lazy", "the op, kept lazy (not computed)"): fused_op,
        ("lazy", "tree node: Map build, checks memoized"): lambda: Map(mul, (ta, tb)),
        ("lazy", "token interning of a new tensor"): lambda: leaf_tokens(eager.wrap(arr_a)),
        ("lazy", "reads tracking (lazy_value)"): lambda: lazy_value(Map(mul, (ta, tb)), True,
                                                                    (a, b), {}),
        ("lazy", "realizing it: plan and launch lookup, kernel"):
            lambda: realize(Map(mul, (ta, tb))),
        ("at once", "the op, computed (Elementwise.apply)"): lambda: a * b,
        ("at once", "threshold, device, capture checks"): lambda: eager.now(ta.shape),
        ("at once", "NumPy ufunc"): lambda: np.multiply(arr_a, arr_b),
        ("at once", "Tensor and Storage for the result"): lambda: eager.wrap(arr_a),
        ("at once", "Node"): lambda: Node(ta),
        ("at once", "Context, saved values and their versions"):
            lambda: Context(Elementwise, (True, True), {"op": "mul"}, True,
                            {}).save_for_backward(ta, tb, ta),
        ("at once", "grad mode and anomaly mode checks"):
            lambda: (mt.is_grad_enabled(), anomaly.is_anomaly_enabled()),
        ("at once", "rule on arrays (backward of mul)"):
            lambda: eager.derivative(mul, ta, ta, (ta, tb), (True, True)),
    }
    if torch is not None:
        pa, pb = torch.tensor(arr_a, requires_grad=True), torch.tensor(arr_b, requires_grad=True)
        pieces[("pytorch", "the op")] = lambda: pa * pb
    return pieces


def anatomy(min_time: float) -> Table:
    print(f"\n== where the time of one op goes, 2x2 float32, CPU time of this thread "
          f"({load_line()})")
    table = Table("eager_anatomy")
    for (path, piece), fn in anatomy_pieces().items():
        table.add(path, piece, cpu_time(fn))
    table.print()
    return table


# ---------------------------------------------------------------- rows NumPy runs slowly

ROW_SIZES = (1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15, 1 << 16)


def row_operands(name: str, n: int, rng) -> list:
    """Arrays of ``n`` float32 values for the row ``name`` (where: a bool condition)."""
    from minitorch_exp.tensor.ops import OPS
    arrays = [rng.uniform(0.5, 2.0 if name == "pow" else 3.0, n).astype(np.float32)
              * (1 if name in ("log", "sqrt", "pow") else rng.choice([-1, 1], n))
              for _ in range(OPS[name].arity)]
    if name == "where":
        arrays[0] = rng.random(n) < 0.5
    return arrays


def compiled_loop(name: str, arrays: list):
    """The engine's kernel of the row ``name`` alone, called on the whole arrays as
    tensor/eager.py calls it for the rows marked ``numpy_slow`` (whatever the row)."""
    from minitorch_exp.tensor import cpu_numba
    from minitorch_exp.tensor.eager import wrap
    from minitorch_exp.tensor.expr import apply_op
    from minitorch_exp.tensor.plan import make_plan

    e = apply_op(name, *[wrap(a) for a in arrays])
    plan, _, scalars = make_plan(e, 1)
    kernel = cpu_numba.flat_module(plan, e.dtype)
    args = [x for a in arrays for x in (a, 0)] + list(scalars)
    return lambda: cpu_numba.run_flat(kernel, arrays[0].shape, args, e.dtype)


def rows(min_time: float) -> Table:
    """Each built-in row's NumPy form against its compiled loop on 64K float32 elements
    (the rows far behind are marked ``numpy_slow``), then relu's forward and forward +
    backward computed at once with and without the loop, by size: where it starts to
    pay is ``eager.COMPILED_FROM``."""
    from minitorch_exp.tensor import eager
    from minitorch_exp.tensor.ops import OPS

    rng = np.random.default_rng(0)
    n = ROW_SIZES[-1]
    print(f"\n== each row's NumPy form against its compiled loop, {n} float32 elements, "
          f"1 thread ({load_line()}); numpy_slow rows = "
          f"{sorted(name for name, op in OPS.items() if op.numpy_slow)}")
    table = Table("eager_rows", baseline="numpy")
    for name in sorted(k for k, op in OPS.items() if op.builtin and op.result != "bool"):
        arrays = row_operands(name, n, rng)
        times = interleaved_timeit({"numpy": functools.partial(OPS[name].numpy, *arrays),
                                    "compiled": compiled_loop(name, arrays)}, min_time / 4)
        for what, seconds in times.items():
            table.add(what, name, seconds)
    print("\n== relu computed at once: NumPy against the compiled loop, float32, 1 thread")
    for size in ROW_SIZES:
        x = mt.tensor(rng.standard_normal(size).astype(np.float32), requires_grad=True)
        g = mt.tensor(rng.standard_normal(size).astype(np.float32))

        def both(x=x, g=g):
            x.grad = None
            x.relu().backward(g)

        for what, step in (("relu", x.relu), ("relu + backward", both)):
            runs = {"numpy": with_eager(step, "COMPILED_FROM", 1 << 62),
                    "compiled": with_eager(step, "COMPILED_FROM", 0)}
            for name, seconds in interleaved_timeit(runs, min_time / 4).items():
                table.add(name, f"{what} {size:>6}", seconds)
    table.print()
    print(f"eager.COMPILED_FROM is {eager.COMPILED_FROM} elements")
    return table


def with_eager(step, name: str, value):
    """``step`` run with ``eager.<name>`` (a module constant: ``COMPILED_FROM``,
    ``MANY_ROWS``) set to ``value``, set back after."""
    from minitorch_exp.tensor import eager

    def run():
        saved = getattr(eager, name)
        setattr(eager, name, value)
        try:
            step()
        finally:
            setattr(eager, name, saved)
    return run


# ---------------------------------------------------------------- folds of short rows

FOLD_SHAPES = [(32, 10), (128, 2), (128, 10), (128, 16), (128, 32), (1024, 10)]


def folds(min_time: float) -> Table:
    """Reductions over the last axis of many short rows (a softmax's row maxima and
    sums): NumPy's reduction over that axis, ``eager.fold`` made to reduce along it
    too ("fold along"), and ``eager.fold`` as it is, which reduces a transposed copy
    where ``eager.short_rows`` says (a last axis of ``SHORT_ROW`` or fewer in
    ``MANY_ROWS`` rows or more; those shapes are marked "across")."""
    from minitorch_exp.tensor import eager

    print(f"\n== reductions of short rows, float32, 1 thread ({load_line()}); "
          f"across a copy from {eager.MANY_ROWS} rows of at most {eager.SHORT_ROW}")
    table = Table("eager_folds", baseline="numpy")
    rng = np.random.default_rng(0)
    for shape in FOLD_SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        across = eager.short_rows(shape, (1,), True)
        for name, ufunc, wide in (("max", np.maximum, None), ("sum", np.add, np.float64)):
            fold = functools.partial(eager.fold, name, x, (1,), True)
            runs = {"numpy": functools.partial(ufunc.reduce, x, axis=1, dtype=wide,
                                               keepdims=True),
                    "fold along": with_eager(fold, "MANY_ROWS", 1 << 62), "fold": fold}
            label = f"{name} {shape}{' across' if across else ''}"
            for what, seconds in interleaved_timeit(runs, min_time / 8).items():
                table.add(what, label, seconds)
    table.print()
    return table


# ---------------------------------------------------------------- driver

SECTIONS = {"ops": per_op, "tutorials": tutorials, "mlp": mlp, "sweep": sweep,
            "anatomy": anatomy, "rows": rows, "folds": folds}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--load", action="store_true",
                        help="also run the MNIST step beside 3 x cores busy processes")
    parser.add_argument("--quick", action="store_true", help="shorter measurements")
    parser.add_argument("--min-time", type=float, default=1.0,
                        help="seconds of measurement per group of rows")
    args = parser.parse_args(argv)
    min_time = 0.25 if args.quick else args.min_time
    defaults = thread_defaults()  # before any section pins them
    print_machine_info()
    print(f"{'load':>22}: {load_line()}")
    for name in filter(None, args.only.split(",")):  # --only "" --load: the load run alone
        if name not in SECTIONS:
            parser.error(f"unknown section {name!r}; expected some of {', '.join(SECTIONS)}")
        if name != "mlp":
            pin_threads(1)
        SECTIONS[name](min_time).write()
    if args.load:
        under_load(min_time, defaults).write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

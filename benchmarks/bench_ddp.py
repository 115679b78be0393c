"""Data parallel over MPI: training throughput with 1 and 2 processes, ours and PyTorch's,
and all-reduce bandwidth against raw mpi4py.

Three measurements, each over processes started with ``mpiexec`` (the mpich wheel's,
next to this Python), one thread per process:

* ``ddp_throughput``: the ``examples/mnist_mlp.py`` training step (784-256-10,
  SGD momentum 0.9, ``mt.capture``, the loss and accuracy read every step) on
  MNIST, 128 samples per process per step, drawn by ``nn.DistributedSampler``.
  Rows: ours with 1 process (the plain model) and 2
  (``nn.parallel.DistributedDataParallel``); PyTorch with 1 and 2 (its
  ``DistributedDataParallel`` over gloo), from the same initial weights on the
  same batches. The launches take turns, round after round, so a busy machine
  slows every row alike; the time is the median round.
* ``ddp_bucketing``: ours with 2 processes, three ways to average the gradient:
  one ``Allreduce`` of the optimizer's flat gradient buffer at the end of backward
  (what ``DistributedDataParallel`` does), and non-blocking ``Iallreduce`` buckets
  started as soon as backward has finished their gradients (2 buckets, and one
  per tensor), waited for at the end of backward. The buckets are an experiment
  made here (they wrap the optimizer's gradient slots); the library keeps what wins.
* ``ddp_allreduce``: seconds per in-place sum of 1e3 .. 1e7 float32 over 2
  processes: ``dist.all_reduce`` on a tensor against ``comm.Allreduce`` on a NumPy
  array, taking turns within each round; the overhead is ours / raw - 1.

Results: ``benchmarks/results/ddp_*.md`` / ``.csv`` and ``ddp_summary.md``.

    python benchmarks/bench_ddp.py                    # all three (a few minutes)
    python benchmarks/bench_ddp.py --only allreduce --rounds 9
    python benchmarks/bench_ddp.py --only throughput --steps 300 --no-torch
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "examples"))

PER_RANK_BATCH = 128
SIZES = [10**3, 10**4, 10**5, 10**6, 10**7]
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1"}


# ================================================================ the driver


def mpiexec() -> str:
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        raise SystemExit("no mpiexec: pip install -e '.[dist]' (mpi4py and mpich)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n: int, *args: str) -> dict:
    """Run this script's worker under ``mpiexec -n n``; rank 0's JSON result."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_"))},
           **THREAD_ENV, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([mpiexec(), "-n", str(n), sys.executable, __file__, "--worker",
                           *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=900, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker {' '.join(args)} (n={n}) failed:\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def load_text() -> str:
    if not hasattr(os, "getloadavg"):
        return "unknown"
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def throughput(args, table, bucket_table, summary: list[str]) -> None:
    from common import Table  # noqa: F401  (the tables come in made)

    configs = [("ours", 1, "plain"), ("ours", 2, "ddp")]
    if not args.no_torch:
        configs += [("torch", 1, "plain"), ("torch", 2, "ddp")]
    if not args.no_bucketing:
        configs += [("ours", 2, "buckets2"), ("ours", 2, "buckets_per_tensor")]
    times: dict = {c: [] for c in configs}
    loads = [load_text()]
    for r in range(args.rounds):
        for framework, n, variant in configs:
            result = launch(n, "train", "--framework", framework, "--variant", variant,
                            "--steps", str(args.steps), "--port", str(free_port()))
            times[(framework, n, variant)].append(result["step_s"])
            print(f"round {r + 1}/{args.rounds} {framework} n={n} {variant}: "
                  f"{result['step_s'] * 1e3:.2f} ms/step", flush=True)
        loads.append(load_text())
    median = {c: statistics.median(v) for c, v in times.items()}
    names = {("ours", 1, "plain"): "minitorch_exp 1 process",
             ("ours", 2, "ddp"): "minitorch_exp 2 processes",
             ("torch", 1, "plain"): "pytorch 1 process",
             ("torch", 2, "ddp"): "pytorch 2 processes (DDP, gloo)",
             ("ours", 2, "buckets2"): "minitorch_exp 2 processes, 2 buckets overlapped",
             ("ours", 2, "buckets_per_tensor"):
                 "minitorch_exp 2 processes, 1 bucket per tensor overlapped"}
    size = f"784-256-10 b{PER_RANK_BATCH}/process"
    for c in configs:
        if c[2] in ("plain", "ddp"):
            table.add(names[c], size, median[c])
    for c in configs:
        if c[0] == "ours" and c[1] == 2:
            bucket_table.add(names[c], size, median[c])

    def samples_s(c):
        return c[1] * PER_RANK_BATCH / median[c]

    summary += ["## Training throughput", "",
                f"Load average before and after each round: {' | '.join(loads)}", "",
                f"Median of {args.rounds} rounds of {args.steps} timed steps (after 30 "
                "warm-up steps) per launch; the launches take turns in each round.", "",
                "| run | time/step | samples/s | speed-up over 1 process |",
                "| --- | ---: | ---: | ---: |"]
    for c in configs:
        if c[2] not in ("plain", "ddp"):
            continue
        one = (c[0], 1, "plain")
        summary.append(f"| {names[c]} | {median[c] * 1e3:.2f} ms | {samples_s(c):,.0f} | "
                       f"{samples_s(c) / samples_s(one):.2f}x |")
    ours = samples_s(("ours", 2, "ddp")) / samples_s(("ours", 1, "plain"))
    summary += ["", f"- ours, 2 processes over 1: **{ours:.2f}x** (goal >= 1.6x: "
                f"{'met' if ours >= 1.6 else 'NOT met'})"]
    if not args.no_torch:
        theirs = samples_s(("torch", 2, "ddp")) / samples_s(("torch", 1, "plain"))
        summary.append(f"- PyTorch, 2 processes over 1: **{theirs:.2f}x** (goal: ours >= "
                       f"PyTorch's: {'met' if ours >= theirs else 'NOT met'})")
        summary.append(f"- 2 processes, ours against PyTorch: {samples_s(('ours', 2, 'ddp')):,.0f}"
                       f" vs {samples_s(('torch', 2, 'ddp')):,.0f} samples/s")
    if not args.no_bucketing:
        summary += ["", "## Bucketing", "",
                    "| averaging | time/step | vs one Allreduce |", "| --- | ---: | ---: |"]
        base = median[("ours", 2, "ddp")]
        for c in configs:
            if c[0] == "ours" and c[1] == 2:
                summary.append(f"| {names[c]} | {median[c] * 1e3:.2f} ms | "
                               f"{median[c] / base:.2f}x |")
        anatomy = launch(2, "anatomy")
        summary += ["", "Where the step's time goes (2 processes, eager step, median of 50): "
                    f"forward {anatomy['forward'] * 1e3:.2f} ms, backward until the first "
                    f"gradient is final {anatomy['until_first'] * 1e3:.2f} ms, from there to "
                    f"the last {anatomy['leaves'] * 1e3:.2f} ms, the all-reduce "
                    f"{anatomy['reduce'] * 1e3:.2f} ms, the optimizer step "
                    f"{anatomy['step'] * 1e3:.2f} ms. Backward finishes every gradient in its "
                    "last stretch (leaves come last in its order), so a bucket started early "
                    f"can hide at most {anatomy['leaves'] * 1e3:.2f} ms of communication."]


def allreduce(args, table, summary: list[str]) -> None:
    result = launch(2, "allreduce", "--rounds", str(args.rounds))
    summary += ["", "## All-reduce, 2 processes, float32 sum in place", "",
                f"Load average after: {load_text()}", "",
                "| elements | mpi4py Allreduce (NumPy) | dist.all_reduce (tensor) | "
                "overhead | GB/s (ours) |", "| ---: | ---: | ---: | ---: | ---: |"]
    worst = 0.0
    for n in SIZES:
        raw, ours = result[str(n)]["raw"], result[str(n)]["ours"]
        table.add("mpi4py Allreduce", f"{n:.0e}", raw)
        table.add("dist.all_reduce", f"{n:.0e}", ours)
        overhead = ours / raw - 1
        if n >= 10**6:
            worst = max(worst, overhead)
        summary.append(f"| {n:.0e} | {raw * 1e6:,.1f} us | {ours * 1e6:,.1f} us | "
                       f"{overhead:+.1%} | {4 * n / ours / 1e9:.2f} |")
    summary += ["", f"- largest overhead at 1e6 and above: {worst:+.1%} (goal <= 5%: "
                f"{'met' if worst <= 0.05 else 'NOT met'})"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=argparse.REMAINDER,
                        help="internal: run a worker (under mpiexec)")
    parser.add_argument("--only", choices=["throughput", "allreduce"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200, help="timed steps per launch")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-bucketing", action="store_true")
    args = parser.parse_args(argv)
    if args.worker is not None:
        return worker(args.worker)

    from common import Table, print_machine_info
    print_machine_info()
    print(f"{'mpiexec':>22}: {mpiexec()}")
    summary = ["# Data parallel over MPI (2 cores, 1 thread per process)", ""]
    if args.only in (None, "throughput"):
        table = Table("ddp_throughput", baseline="minitorch_exp 1 process")
        buckets = Table("ddp_bucketing", baseline="minitorch_exp 2 processes")
        throughput(args, table, buckets, summary)
        for t in (table, buckets):
            if t.rows:
                t.print()
                t.write()
    if args.only in (None, "allreduce"):
        table = Table("ddp_allreduce", baseline="mpi4py Allreduce")
        allreduce(args, table, summary)
        table.print()
        table.write()
    text = "\n".join(summary) + "\n"
    print(text)
    name = "ddp_summary.md" if args.only is None else f"ddp_summary_{args.only}.md"
    (HERE / "results" / name).write_text(text)
    return 0


# ================================================================ the workers (under mpiexec)


def worker(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["train", "allreduce", "anatomy"])
    parser.add_argument("--framework", default="ours")
    parser.add_argument("--variant", default="plain")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--port", type=int, default=29500)
    args = parser.parse_args(argv)
    from common import pin_threads
    pin_threads(1)
    import minitorch_exp.distributed as dist
    dist.init()
    if args.kind == "allreduce":
        result = allreduce_worker(args)
    elif args.kind == "anatomy":
        result = anatomy_worker()
    elif args.framework == "ours":
        result = ours_worker(args)
    else:
        result = torch_worker(args)
    if dist.get_rank() == 0:
        print(json.dumps(result), flush=True)
    return 0


def mnist():
    """The example's training images and labels (noise of the same shape without them)."""
    import mnist_mlp

    from minitorch_exp.nn.idx import load_mnist
    try:
        data = load_mnist()
        return mnist_mlp.prepare(data.train_images), data.train_labels.astype(np.int64)
    except FileNotFoundError:
        rng = np.random.default_rng(0)
        return (rng.standard_normal((60000, 784)).astype(np.float32),
                rng.integers(0, 10, 60000).astype(np.int64))


def batches(x, y):
    """This rank's batches, epoch after epoch, as the example's DataLoader makes them."""
    import minitorch_exp.distributed as dist
    from minitorch_exp import nn
    dataset = nn.TensorDataset(x, y)
    sampler = nn.DistributedSampler(dataset, seed=0)
    loader = nn.DataLoader(dataset, batch_size=PER_RANK_BATCH, sampler=sampler,
                           drop_last=True, seed=0)
    assert sampler.num_replicas == dist.get_world_size()
    while True:
        yield from loader


WARMUP = 30


def timed(step, source, steps: int) -> float:
    """Seconds per step over ``steps`` steps, all ranks starting together."""
    import minitorch_exp.distributed as dist
    for _ in range(WARMUP):
        step(*next(source))
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step(*next(source))
    dist.barrier()
    return (time.perf_counter() - start) / steps


def ours_worker(args) -> dict:
    import mnist_mlp

    import minitorch_exp as mt
    import minitorch_exp.distributed as dist
    from minitorch_exp import nn
    x, y = mnist()
    mt.manual_seed(0)
    model = mnist_mlp.build_model([256])
    trained = model
    if args.variant != "plain":
        trained = nn.parallel.DistributedDataParallel(model)
    opt = nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.variant.startswith("buckets"):
        Buckets(trained, opt, per_tensor=args.variant == "buckets_per_tensor")
    train_step = mnist_mlp.make_train_step(trained, opt, captured=True)

    def step(xb, yb):  # as the example's train_epoch: the loss and accuracy read back
        loss, correct = train_step(xb, yb)
        loss.item()
        correct.item()

    result = {"step_s": timed(step, batches(x, y), args.steps)}
    if args.variant != "plain":
        assert trained.parameters_in_sync()
    result["world"] = dist.get_world_size()
    return result


def torch_worker(args) -> dict:
    import mnist_mlp
    import torch
    import torch.distributed as tdist

    import minitorch_exp as mt
    import minitorch_exp.distributed as dist
    torch.set_num_threads(1)
    x, y = mnist()
    mt.manual_seed(0)
    ours = mnist_mlp.build_model([256])  # the same initial weights as our rows
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    with torch.no_grad():
        for p, q in zip(model.parameters(), ours.parameters()):
            p.copy_(torch.from_numpy(q.numpy()))
    if args.variant == "ddp":
        tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                                 rank=dist.get_rank(), world_size=dist.get_world_size())
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(xb, yb):
        xb, yb = torch.from_numpy(xb.numpy()), torch.from_numpy(yb.numpy())
        opt.zero_grad()
        logits = model(xb)
        loss = torch.nn.functional.cross_entropy(logits, yb)
        loss.backward()
        opt.step()
        loss.item()
        (logits.argmax(1) == yb).sum().item()

    seconds = timed(step, batches(x, y), args.steps)
    if args.variant == "ddp":
        tdist.destroy_process_group()
    return {"step_s": seconds}


class Buckets:
    """The experiment: gradients averaged in buckets, each started (``Iallreduce``) as
    soon as backward has made every gradient in it final, all waited for at the end.

    Backward asks a parameter's gradient sink for its buffer (``take``) just before
    writing that gradient, after every gradient it wrote before is final: each
    parameter's sink is wrapped to see that. Buckets follow the order backward took
    the gradients in the first step; each is a contiguous part of the flat buffer.
    """

    def __init__(self, ddp, opt, per_tensor: bool):
        import minitorch_exp.distributed as dist
        self.dist = dist
        flat = opt._flat[0]  # the optimizer's flat group (one group here)
        self.params = list(opt.param_groups[0]["params"])
        self.buffer = flat.grads.array
        self.regions = [(start, start + p.numel()) for p, start in zip(self.params,
                                                                        flat.starts)]
        for i, (p, slot) in enumerate(zip(self.params, flat.slots)):
            p.set_grad_sink(_ReadySink(slot, self, i))
        self.per_tensor = per_tensor
        self.order: list[int] = []   # parameter indices as backward took them
        self.buckets = None          # lists of parameter indices, in backward's order
        self.started: set[int] = set()
        self.requests: list = []
        ddp._sync.reduce = self.finish  # the sync point at the end of backward

    def taken(self, i: int) -> None:
        if self.buckets is None:
            self.order.append(i)
            return
        for b, members in enumerate(self.buckets):
            if b not in self.started and i not in members and \
                    all(m in self.seen for m in members):
                self.start(b)
        self.seen.add(i)

    def make_buckets(self) -> None:
        if self.per_tensor:
            self.buckets = [[i] for i in self.order]
        else:  # two: the first half of the bytes backward finished, then the rest
            total = sum(e - s for s, e in self.regions)
            first, size = [], 0
            for i in self.order:
                if size >= total / 2:
                    break
                first.append(i)
                size += self.regions[i][1] - self.regions[i][0]
            self.buckets = [first, [i for i in self.order if i not in first]]
            if not self.buckets[1]:
                self.buckets.pop()
        self.views = []
        for members in self.buckets:
            spans = sorted(self.regions[i] for i in members)
            runs = [list(spans[0])]
            for s, e in spans[1:]:
                if s == runs[-1][1]:
                    runs[-1][1] = e
                else:
                    runs.append([s, e])
            self.views.append([self.buffer[s:e] for s, e in runs])

    def start(self, b: int) -> None:
        self.started.add(b)
        views, comm, mpi = self.views[b], self.dist.comm(), self.dist._state.mpi

        def post():
            for v in views:
                self.requests.append(comm.Iallreduce(mpi.IN_PLACE, v, op=mpi.SUM))

        self.dist.host_write(post, [])

    def finish(self, params) -> None:
        """The sync point: start the buckets not started yet, wait for all, scale."""
        if self.buckets is None:  # first step: learn the order, reduce in one call
            self.make_buckets()
            mpi = self.dist._state.mpi

            def whole():
                self.dist.comm().Allreduce(mpi.IN_PLACE, self.buffer, op=mpi.SUM)
                self.buffer *= np.float32(0.5)

            self.dist.host_write(whole, [p.grad.value.storage for p in params])
            self.seen, self.started = set(), set()
            return
        for b in range(len(self.buckets)):
            if b not in self.started:
                self.start(b)
        mpi, scale = self.dist._state.mpi, np.float32(1.0 / self.dist.get_world_size())

        def wait():
            mpi.Request.Waitall(self.requests)
            self.requests.clear()
            self.buffer *= scale

        self.dist.host_write(wait, [p.grad.value.storage for p in params])
        self.seen, self.started = set(), set()


class _ReadySink:
    """A parameter's gradient sink, wrapped to tell ``Buckets`` when backward takes it."""

    def __init__(self, slot, buckets: Buckets, index: int):
        self.slot, self.buckets, self.index = slot, buckets, index

    def take(self, device):
        self.buckets.taken(self.index)
        return self.slot.take(device)

    def holds(self, value) -> bool:
        return self.slot.holds(value)

    def adopt(self, p) -> None:
        self.slot.adopt(p)


def anatomy_worker() -> dict:
    """An eager step (2 processes), timed in parts: forward, backward until the first
    gradient is final, the rest of backward until the last, the average, the update."""
    import mnist_mlp

    import minitorch_exp as mt
    from minitorch_exp import nn
    x, y = mnist()
    mt.manual_seed(0)
    model = mnist_mlp.build_model([256])
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    flat = opt._flat[0]
    marks: dict = {}

    class Mark:
        def __init__(self, slot):
            self.slot = slot

        def take(self, device):
            marks.setdefault("first", time.perf_counter())
            marks["last"] = time.perf_counter()
            return self.slot.take(device)

        def holds(self, value):
            return self.slot.holds(value)

    for p, slot in zip(opt.param_groups[0]["params"], flat.slots):
        p.set_grad_sink(Mark(slot))
    reduce = ddp._sync.reduce

    def timed_reduce(params):
        marks["sync"] = time.perf_counter()
        reduce(params)
        marks["reduced"] = time.perf_counter()

    ddp._sync.reduce = timed_reduce
    parts = {k: [] for k in ("forward", "until_first", "leaves", "reduce", "step")}
    source = batches(x, y)
    for i in range(70):
        xb, yb = next(source)
        marks.clear()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(xb), yb)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if i >= 20:
            parts["forward"].append(t1 - t0)
            parts["until_first"].append(marks["first"] - t1)
            parts["leaves"].append(marks["sync"] - marks["first"])
            parts["reduce"].append(marks["reduced"] - marks["sync"])
            parts["step"].append(t3 - t2)
    return {k: statistics.median(v) for k, v in parts.items()}


def allreduce_worker(args) -> dict:
    import minitorch_exp as mt
    import minitorch_exp.distributed as dist
    comm, mpi = dist.comm(), dist._state.mpi
    result = {}
    for n in SIZES:
        node = mt.zeros(n)  # zeros stay zeros: every call does the same arithmetic
        raw = np.zeros(n, np.float32)
        calls = {"ours": lambda node=node: dist.all_reduce(node),
                 "raw": lambda raw=raw: comm.Allreduce(mpi.IN_PLACE, raw, op=mpi.SUM)}
        reps = args.rounds * max(10, min(200, int(2e7 // n)))
        times = {k: [] for k in calls}
        for fn in calls.values():
            fn()
        for _ in range(reps):
            for name, fn in calls.items():  # one call each in turn, the ranks aligned first
                comm.Barrier()
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        # every rank's median, the slowest rank's counts (a collective ends on all)
        medians = {k: statistics.median(v) for k, v in times.items()}
        gathered = comm.allgather(medians)
        result[str(n)] = {k: max(g[k] for g in gathered) for k in medians}
    return result


if __name__ == "__main__":
    sys.exit(main())

"""Data parallel over MPI: training throughput with 1 and 2 processes, ours and PyTorch's,
the gradient average through shared memory against MPI's Allreduce, and all-reduce
bandwidth against raw mpi4py.

Each measurement runs in one job of 2 processes started with ``mpiexec -bind-to core``
(the mpich wheel's, next to this Python), one thread per process:

* ``ddp_throughput``: the ``examples/mnist_mlp.py`` training step (784-256-10,
  SGD momentum 0.9, ``mt.capture``, the loss and accuracy read back every step)
  on MNIST, 128 samples per process per step, each process's batches drawn by
  ``nn.DistributedSampler``. Rows: ours with 1 process (the plain model) and
  with 2 (``nn.parallel.DistributedDataParallel``: its default average through
  shared memory; with ``shared_memory=False``, one ``Allreduce``; and with the
  optimizer made before wrapping, so that the gradients are copied into shared
  memory and back); PyTorch with 1 and 2 (its ``DistributedDataParallel`` over
  gloo), from the same initial weights on the same batches; and, for each, 2
  processes that train without averaging anything: the speed two processes
  reach on this machine before any communication. Every row is built once, then
  the rows take turns, a block of steps each per round, so a busy machine slows
  them all alike (a 1-process row runs on rank 0 while rank 1 sleeps).
* ``ddp_bucketing``: ours with 2 processes, ways to average the gradient: the
  rows above, one ``Allreduce`` of the optimizer's flat gradient buffer at the end
  of backward (what ``DistributedDataParallel`` does across machines), and
  non-blocking ``Iallreduce`` buckets
  started as soon as backward has finished their gradients (2 buckets, and one
  per tensor), waited for at the end of backward. The buckets are an experiment
  made here (they wrap the optimizer's gradient slots); the library keeps what
  wins. Also where an eager step's time goes, and, in the captured step, how long
  the average takes once both ranks are there and how long the first waits for the
  other, for both ways to average (``anatomy``).
* ``ddp_average``: seconds per average (sum, then scale by 1/2) of 1e3 .. 1e7 float32
  over 2 processes, each rank's buffer freshly written before each call as backward
  leaves it: ``comm.Allreduce`` + scale (what ``shared_memory=False`` does), the
  shared-memory average in place (``dist.SharedBuffer``, the gradients already in
  the window) and copied in and out of it; the three in turn, a barrier before each.
* ``ddp_allreduce``: seconds per in-place sum of 1e3 .. 1e7 float32 over 2
  processes: ``dist.all_reduce`` on a tensor against ``comm.Allreduce`` on a NumPy
  array, one call of each in turn after a barrier; the overhead is ours / raw - 1.

* ``--only check``: what the ranks' agreement on each collective's shapes and dtypes
  costs (``dist.Signature.agree``, one 8-byte ``Allgather``): alone, inside a
  1e3-float ``dist.all_reduce`` and inside an eager DDP step of the MLP, with the
  check and without it in turn.
* ``--only divergence``: how far 2 processes (DDP, 64 samples each) drift from one
  process on the same 128-sample batches over 3 epochs of MNIST (lr 0.1, momentum
  0.9, captured steps), against how far one process drifts from itself when each
  batch's samples come in reverse order (the same sums, rounded differently).

Results: ``benchmarks/results/ddp_*.md`` / ``.csv`` and ``ddp_summary.md``.

    python benchmarks/bench_ddp.py                    # all four (a few minutes)
    python benchmarks/bench_ddp.py --only allreduce --rounds 9
    python benchmarks/bench_ddp.py --only average
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
    proc = subprocess.run([mpiexec(), "-bind-to", "core", "-n", str(n), sys.executable,
                           __file__, "--worker",
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


#: (row name, framework, processes, averaging) of the throughput rows, in the order run.
#: The 2-process rows of ours: the library's default (shared memory), and the others.
OURS = "minitorch_exp 2 processes"
ALLREDUCE = "minitorch_exp 2 processes, Allreduce (shared_memory=False)"
STAGED = "minitorch_exp 2 processes, shared memory, gradients copied in and out"
CONFIGS = [
    ("minitorch_exp 1 process", "ours", 1, "none"),
    ("minitorch_exp 2 processes, no averaging (floor)", "ours", 2, "none"),
    (OURS, "ours", 2, "ddp"),
    (ALLREDUCE, "ours", 2, "allreduce"),
    (STAGED, "ours", 2, "staged"),
    ("pytorch 1 process", "torch", 1, "none"),
    ("pytorch 2 processes, no averaging (floor)", "torch", 2, "none"),
    ("pytorch 2 processes (DDP, gloo)", "torch", 2, "ddp"),
    ("minitorch_exp 2 processes, 2 buckets overlapped", "ours", 2, "buckets2"),
    ("minitorch_exp 2 processes, 1 bucket per tensor overlapped", "ours", 2, "buckets_per_tensor"),
]


def throughput(args, table, bucket_table, summary: list[str]) -> None:
    configs = [c for c in CONFIGS if not (args.no_torch and c[1] == "torch")
               and not (args.no_bucketing and c[3].startswith("buckets"))]
    before = load_text()
    result = launch(2, "train", "--rounds", str(args.rounds), "--steps", str(args.steps),
                    "--port", str(free_port()),
                    *[arg for c in configs for arg in ("--config", c[0])])
    after = load_text()
    median = {name: statistics.median(times) for name, times in result["times"].items()}
    best = {name: min(times) for name, times in result["times"].items()}
    size = f"784-256-10 b{PER_RANK_BATCH}/process"
    for name, framework, n, averaging in configs:
        if not averaging.startswith("buckets"):
            table.add(name, size, median[name])
        if framework == "ours" and n == 2 and averaging != "none":
            bucket_table.add(name, size, median[name])

    def rate(name, n, times=median):
        return n * PER_RANK_BATCH / times[name]

    def speedup(name, n, one):
        """The median over rounds of each round's own speed-up: the rows of one round ran
        seconds apart, so a round's ratio is little moved by the machine's other work."""
        return statistics.median(n * t1 / t for t1, t in zip(result["times"][one],
                                                              result["times"][name]))

    summary += ["## Training throughput", "",
                f"Load average before and after: {before} | {after} (the run's own 2 "
                "processes count)", "",
                f"One job of 2 processes runs every row in turn: {args.steps} steps of each, "
                f"{args.rounds} rounds, after 30 warm-up steps each; a 1-process row runs on "
                "rank 0 while rank 1 sleeps. Time/step is the median round (the best round "
                "in brackets); the speed-up is the median of the rounds' own speed-ups. `no "
                "averaging` is each process training on its own: the speed two processes "
                "reach here before any communication, the ceiling of data parallelism on "
                "this machine.", "",
                "| run | time/step | samples/s | speed-up over 1 process |",
                "| --- | ---: | ---: | ---: |"]
    one = {"ours": "minitorch_exp 1 process", "torch": "pytorch 1 process"}
    for name, framework, n, averaging in configs:
        if averaging.startswith("buckets"):
            continue
        summary.append(f"| {name} | {median[name] * 1e3:.2f} ms ({best[name] * 1e3:.2f}) | "
                       f"{rate(name, n):,.0f} | {speedup(name, n, one[framework]):.2f}x |")
    ours = speedup(OURS, 2, one["ours"])
    floor = speedup("minitorch_exp 2 processes, no averaging (floor)", 2, one["ours"])
    summary += ["", f"- ours, 2 processes over 1: **{ours:.2f}x** (goal >= 1.6x: "
                f"{'met' if ours >= 1.6 else 'NOT met'}; two processes without any "
                f"communication reach {floor:.2f}x here)"]
    if ALLREDUCE in median:
        paired = statistics.median(a / b for a, b in zip(result["times"][ALLREDUCE],
                                                         result["times"][OURS]))
        summary.append(f"- the same with one Allreduce instead of shared memory: "
                       f"{speedup(ALLREDUCE, 2, one['ours']):.2f}x; a step with Allreduce "
                       f"takes {paired:.2f}x the time of one through shared memory (median "
                       "of the rounds' ratios)")
    if not args.no_torch:
        theirs = speedup("pytorch 2 processes (DDP, gloo)", 2, one["torch"])
        summary.append(f"- PyTorch, 2 processes over 1: **{theirs:.2f}x** (goal: ours >= "
                       f"PyTorch's: {'met' if ours >= theirs else 'NOT met'})")
        summary.append(f"- 2 processes, ours against PyTorch: "
                       f"{rate(OURS, 2):,.0f} vs "
                       f"{rate('pytorch 2 processes (DDP, gloo)', 2):,.0f} samples/s")
    if not args.no_bucketing:
        summary += ["", "## Bucketing", "",
                    "The buckets and the Allreduce row with `shared_memory=False`; the "
                    "other two through shared memory.", "",
                    "| averaging | time/step | vs one Allreduce |", "| --- | ---: | ---: |"]
        base = median[ALLREDUCE]
        for name, framework, n, averaging in configs:
            if framework == "ours" and n == 2 and averaging != "none":
                summary.append(f"| {name} | {median[name] * 1e3:.2f} ms | "
                               f"{median[name] / base:.2f}x |")
        anatomy = launch(2, "anatomy")
        summary += ["", "Where the step's time goes (2 processes, eager step, median of 50): "
                    f"forward {anatomy['forward'] * 1e3:.2f} ms, backward until the first "
                    f"gradient is final {anatomy['until_first'] * 1e3:.2f} ms, from there to "
                    f"the last {anatomy['leaves'] * 1e3:.2f} ms, the average "
                    f"{anatomy['reduce'] * 1e3:.2f} ms, the optimizer step "
                    f"{anatomy['step'] * 1e3:.2f} ms. Backward writes the gradients into the "
                    "parameters last (leaves come last in its order), so a bucket started "
                    f"early can overlap at most {anatomy['leaves'] * 1e3:.2f} ms of backward.",
                    "", "In the captured step (both ways in turn, 6 blocks of 50 steps each), "
                    "the average of 814 KB once both ranks are there, and how long the rank "
                    "that gets there first waits for the other (medians; mean in brackets): "
                    "two processes never take exactly the same time for the same work, and "
                    "a collective waits for the slower.", "",
                    "| averaging | average | wait for the other rank |",
                    "| --- | ---: | ---: |"]
        for mode, label in (("shared", "shared memory, in place"),
                            ("allreduce", "one Allreduce, then the 1/2 scale")):
            part = anatomy[mode]
            summary.append(f"| {label} | {part['average'] * 1e6:.0f} us | "
                           f"{part['skew'] * 1e6:.0f} us ({part['skew_mean'] * 1e6:.0f}) |")


def allreduce(args, table, summary: list[str]) -> None:
    result = launch(2, "allreduce", "--rounds", str(args.rounds))
    summary += ["", "## All-reduce, 2 processes, float32 sum in place", "",
                f"Load average after: {load_text()}", "",
                "One call of each in turn (ABBA), a barrier before each; the "
                "median call of the slower rank. The baseline is mpi4py's `Allreduce` on a "
                "NumPy view of the tensor's own memory, so that the difference is what "
                "`dist.all_reduce` adds; the last column is mpi4py on a NumPy array "
                "allocated apart, which lands elsewhere in memory and alone moved the time "
                "by up to 20% here.", "",
                "| elements | mpi4py Allreduce (NumPy view) | dist.all_reduce (tensor) | "
                "ratio of medians | overhead, paired | GB/s (ours) | "
                "mpi4py, array of its own |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    worst = 0.0
    for n in SIZES:
        raw, ours, own, paired = (result[str(n)][k]
                                  for k in ("raw", "ours", "raw_own", "paired"))
        table.add("mpi4py Allreduce", f"{n:.0e}", raw)
        table.add("dist.all_reduce", f"{n:.0e}", ours)
        table.add("mpi4py Allreduce, array of its own", f"{n:.0e}", own)
        overhead = paired / raw
        if n >= 10**6:
            worst = max(worst, overhead)
        summary.append(f"| {n:.0e} | {raw * 1e6:,.1f} us | {ours * 1e6:,.1f} us | "
                       f"{ours / raw:.2f}x | {overhead:+.1%} ({paired * 1e6:+.1f} us) | "
                       f"{4 * n / ours / 1e9:.2f} | {own * 1e6:,.1f} us |")
    summary += ["", "`overhead, paired`: the median of (ours - mpi4py) over pairs of calls made "
                "one after the other, over mpi4py's median: what the wrapper adds, with the "
                "slow drifts of a shared machine cancelled.", "",
                f"- largest paired overhead at 1e6 and above: {worst:+.1%} (goal <= 5%: "
                f"{'met' if worst <= 0.05 else 'NOT met'})"]


def average(args, table, summary: list[str]) -> None:
    result = launch(2, "average", "--rounds", str(args.rounds))
    summary += ["", "## The gradient average alone, 2 processes, float32", "",
                f"Load average after: {load_text()}", "",
                "Sum over the 2 ranks, then the scale by 1/2, of a buffer each rank has just "
                "written (as backward leaves the gradients). The three ways in turn, a "
                "barrier before each call; the median call of the slower rank. `paired` is "
                "the median over rounds of Allreduce's time over the shared average's "
                "(calls made one after the other).", "",
                "| elements | Allreduce + scale | shared, in place | shared, copied in and out "
                "| in place, paired | copied, paired |",
                "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n in SIZES:
        r = result[str(n)]
        table.add("Allreduce + scale", f"{n:.0e}", r["allreduce"])
        table.add("shared memory, in place", f"{n:.0e}", r["shared"])
        table.add("shared memory, copied in and out", f"{n:.0e}", r["staged"])
        summary.append(f"| {n:.0e} | {r['allreduce'] * 1e6:,.1f} us | {r['shared'] * 1e6:,.1f} "
                       f"us | {r['staged'] * 1e6:,.1f} us | {r['paired_shared']:.2f}x | "
                       f"{r['paired_staged']:.2f}x |")
    summary += ["", "Every call's result was checked: the shared average gives Allreduce's "
                "bits (a float32 sum of two values does not depend on the order)."]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=argparse.REMAINDER,
                        help="internal: run a worker (under mpiexec)")
    parser.add_argument("--only", choices=["throughput", "average", "allreduce", "check",
                                           "divergence"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=100, help="steps per row per round")
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
        buckets = Table("ddp_bucketing", baseline=ALLREDUCE)
        throughput(args, table, buckets, summary)
        for t in (table, buckets):
            if t.rows:
                t.print()
                t.write()
    if args.only in (None, "average"):
        table = Table("ddp_average", baseline="Allreduce + scale")
        average(args, table, summary)
        table.print()
        table.write()
    if args.only in (None, "allreduce"):
        table = Table("ddp_allreduce", baseline="mpi4py Allreduce")
        allreduce(args, table, summary)
        table.print()
        table.write()
    if args.only in ("check", "divergence"):  # measured on request only
        summary += REPORTS[args.only](launch(2, args.only))
    text = "\n".join(summary) + "\n"
    print(text)
    name = "ddp_summary.md" if args.only is None else f"ddp_summary_{args.only}.md"
    (HERE / "results" / name).write_text(text)
    return 0


# ================================================================ the workers (under mpiexec)


def worker(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["train", "allreduce", "average", "anatomy", "check",
                                         "divergence"])
    parser.add_argument("--config", action="append", default=[])
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
    elif args.kind == "average":
        result = average_worker(args)
    elif args.kind == "anatomy":
        result = anatomy_worker()
    elif args.kind in ("check", "divergence"):
        result = check_worker() if args.kind == "check" else divergence_worker()
    else:
        result = train_worker(args)
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


def batches(x, y, processes: int | None = None):
    """This rank's batches, epoch after epoch, as the example's DataLoader makes them
    (``processes``: shards of that many; default the job's)."""
    import minitorch_exp.distributed as dist
    from minitorch_exp import nn
    dataset = nn.TensorDataset(x, y)
    n = dist.get_world_size() if processes is None else processes
    sampler = nn.DistributedSampler(dataset, n, dist.get_rank() if n > 1 else 0, seed=0)
    loader = nn.DataLoader(dataset, batch_size=PER_RANK_BATCH, sampler=sampler,
                           drop_last=True, seed=0)
    while True:
        yield from loader


WARMUP = 30


def idle_barrier(comm) -> None:
    """A barrier that sleeps while it waits (MPI's spins, taking a core)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(2e-4)


def train_worker(args) -> dict:
    """Every config's step, built once, then run in turn: ``--steps`` steps of each per
    round, so that whatever else the machine does slows them all alike."""
    import minitorch_exp.distributed as dist
    rank, comm = dist.get_rank(), dist.comm()
    x, y = mnist()
    wanted = [c for c in CONFIGS if c[0] in args.config]
    steps = {}
    for name, framework, n, averaging in wanted:  # build everything before capturing
        make = ours_step if framework == "ours" else torch_step
        steps[name] = (n, make(averaging, args.port), batches(x, y, n))
    for n, step, source in steps.values():  # warm up (capture records here)
        if rank < n:
            for _ in range(WARMUP):
                step(*next(source))
        idle_barrier(comm)
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, (n, step, source) in steps.items():
            idle_barrier(comm)
            start = time.perf_counter()
            if rank < n:
                for _ in range(args.steps):
                    step(*next(source))
            if n > 1:
                comm.Barrier()  # the slower rank's time counts
            elapsed = (time.perf_counter() - start) / args.steps
            times[name].append(elapsed)
    for name, (_, step, _) in steps.items():
        check = getattr(step, "in_sync", None)
        if check is not None:
            assert check(), name
    return {"times": times}


def ours_step(averaging: str, port: int):
    import mnist_mlp

    import minitorch_exp as mt
    from minitorch_exp import nn
    mt.manual_seed(0)
    model = mnist_mlp.build_model([256])
    if averaging == "staged":  # made before wrapping: its gradient buffer is its own
        opt = nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    trained = model if averaging == "none" else nn.parallel.DistributedDataParallel(
        model, shared_memory=averaging in ("ddp", "staged"))
    if averaging != "staged":
        opt = nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if averaging.startswith("buckets"):
        Buckets(trained, opt, per_tensor=averaging == "buckets_per_tensor")
    train_step = mnist_mlp.make_train_step(trained, opt, captured=True)

    def step(xb, yb):  # as the example's train_epoch: the loss and accuracy read back
        loss, correct = train_step(xb, yb)
        loss.item()
        correct.item()

    if averaging != "none":
        step.in_sync = trained.parameters_in_sync
    return step


_TORCH_GROUP = []


def torch_step(averaging: str, port: int):
    import mnist_mlp
    import torch
    import torch.distributed as tdist

    import minitorch_exp as mt
    import minitorch_exp.distributed as dist
    torch.set_num_threads(1)
    mt.manual_seed(0)
    ours = mnist_mlp.build_model([256])  # the same initial weights as our rows
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    with torch.no_grad():
        for p, q in zip(model.parameters(), ours.parameters()):
            p.copy_(torch.from_numpy(q.numpy()))
    if averaging == "ddp":
        if not _TORCH_GROUP:
            tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                     rank=dist.get_rank(), world_size=dist.get_world_size())
            _TORCH_GROUP.append(True)
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

    return step


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
    result = {k: statistics.median(v) for k, v in parts.items()}

    # the captured step (as trained), both ways to average in turn: when each rank
    # reaches the averaging, and how long it takes once both are there (perf_counter is
    # one clock for the machine)
    import minitorch_exp.distributed as dist
    from minitorch_exp.nn import parallel
    plain_run, stamps = parallel._Plan.run, {"shared": [], "allreduce": []}
    mode = ["shared"]

    def run(plan):
        start = time.perf_counter()
        plain_run(plan)
        stamps[mode[0]].append((start, time.perf_counter()))

    parallel._Plan.run = run
    steps = {}
    for name in stamps:
        mt.manual_seed(0)
        model = mnist_mlp.build_model([256])
        ddp = nn.parallel.DistributedDataParallel(model, shared_memory=name == "shared")
        opt = nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        steps[name] = mnist_mlp.make_train_step(ddp, opt, captured=True)
    for block in range(7):  # the first block warms up (and records the captures)
        for name, step in steps.items():
            mode[0] = name
            for _ in range(50):
                loss, correct = step(*next(source))
                loss.item()
                correct.item()
            if block == 0:
                stamps[name].clear()
    parallel._Plan.run = plain_run
    for name, marks in stamps.items():
        both = dist.comm().allgather(marks)
        skew = [abs(a[0] - b[0]) for a, b in zip(*both)]
        average = [max(a[1], b[1]) - max(a[0], b[0]) for a, b in zip(*both)]
        result[name] = {"skew": statistics.median(skew), "skew_mean": statistics.fmean(skew),
                        "average": statistics.median(average)}
    return result


def average_calls(n: int) -> dict:
    """name -> (the average of ``n`` float32 over the ranks, the buffer it averages)."""
    import minitorch_exp.distributed as dist
    comm, mpi = dist.comm(), dist._state.mpi
    private, staged = np.zeros(n, np.float32), np.zeros(n, np.float32)
    shared = dist.shared_buffer(n, np.float32)
    assert shared is not None, "shared memory is not usable here"
    runs, scale = [(0, n)], np.float32(1.0 / dist.get_world_size())

    def allreduce():
        comm.Allreduce(mpi.IN_PLACE, private, op=mpi.SUM)
        np.multiply(private, scale, out=private)

    def in_place():
        shared.average(runs)

    def copied():
        shared.segment[:] = staged
        shared.average(runs)
        staged[:] = shared.segment

    return {"allreduce": (allreduce, private), "shared": (in_place, shared.segment),
            "staged": (copied, staged)}


def average_worker(args) -> dict:
    """Each size: the average over the ranks of a buffer each rank has just written, by
    ``Allreduce`` + scale, by the shared-memory average in place, and copied into the
    shared buffer and back; the three in turn (rotating the order), a barrier before
    each call. Checks that all three give the same bits."""
    import minitorch_exp.distributed as dist
    comm, rank = dist.comm(), dist.get_rank()
    result = {}
    for n in SIZES:
        calls = average_calls(n)
        values = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        reps = args.rounds * max(20, min(200, int(2e7 // n)))
        times = {k: [] for k in calls}
        names = list(calls)
        for rep in range(reps + 1):  # the first round warms up (compiles the kernel)
            for name in names[rep % 3:] + names[:rep % 3]:
                fn, buffer = calls[name]
                np.copyto(buffer, values)  # as backward leaves it: just written
                comm.Barrier()
                start = time.perf_counter()
                fn()
                if rep:
                    times[name].append(time.perf_counter() - start)
            if rep < 3:
                first, *others = (buffer.tobytes() for _, buffer in calls.values())
                assert all(o == first for o in others), "the averages differ"
        medians = {k: statistics.median(v) for k, v in times.items()}
        for k in ("shared", "staged"):
            medians[f"paired_{k}"] = statistics.median(
                a / b for a, b in zip(times["allreduce"], times[k]))
        gathered = comm.allgather(medians)
        result[str(n)] = {k: max(g[k] for g in gathered) for k in medians}
    return result


def allreduce_worker(args) -> dict:
    """Each size: ``dist.all_reduce`` on a tensor and ``comm.Allreduce`` on a NumPy view of
    the same memory, one call of each in turn; then ``comm.Allreduce`` on a NumPy array
    of its own. The ranks are aligned by a barrier before each call."""
    import minitorch_exp as mt
    import minitorch_exp.distributed as dist
    comm, mpi = dist.comm(), dist._state.mpi
    result = {}
    for n in SIZES:
        node = mt.zeros(n)  # zeros stay zeros: every call does the same arithmetic
        view = node.numpy()  # a plain ndarray over the tensor's memory
        own = np.zeros(n, np.float32)
        calls = {"ours": lambda node=node: dist.all_reduce(node),
                 "raw": lambda view=view: comm.Allreduce(mpi.IN_PLACE, view, op=mpi.SUM),
                 "raw_own": lambda own=own: comm.Allreduce(mpi.IN_PLACE, own, op=mpi.SUM)}
        reps = args.rounds * max(20, min(200, int(2e7 // n)))
        times = {k: [] for k in calls}
        for fn in calls.values():
            fn()
        # ours and mpi4py on the same memory in turn, ABBA, so that each follows itself
        # and the other equally often (what the last call left in the caches matters)
        for rep in range(reps):
            for name in (("ours", "raw") if rep % 2 == 0 else ("raw", "ours")):
                comm.Barrier()
                start = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - start)
        for _ in range(reps):
            comm.Barrier()
            start = time.perf_counter()
            calls["raw_own"]()
            times["raw_own"].append(time.perf_counter() - start)
        # every rank's median; the slowest rank's counts (a collective ends on all). The
        # paired difference of calls made one after the other cancels the drifts that
        # move whole stretches of calls (the machine's other work, memory placement)
        medians = {k: statistics.median(v) for k, v in times.items()}
        medians["paired"] = statistics.median(a - b for a, b in zip(times["ours"],
                                                                    times["raw"]))
        gathered = comm.allgather(medians)
        result[str(n)] = {k: max(g[k] for g in gathered) for k in medians}
    return result



# ================================================================ the check's cost, divergence


def paired(fn, unchecked, blocks: int = 40, calls: int = 50) -> tuple[float, float]:
    """Median seconds per call of ``fn`` with the ranks' signature check and with it
    turned off (``unchecked``: the same call without it), in alternating blocks."""
    import minitorch_exp.distributed as dist
    times = {True: [], False: []}
    for b in range(2 * blocks):
        checked = b % 2 == 0
        dist.comm().Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            (fn if checked else unchecked)()
        times[checked].append((time.perf_counter() - start) / calls)
    return statistics.median(times[True]), statistics.median(times[False])


def check_worker() -> dict:
    import mnist_mlp

    import minitorch_exp as mt
    import minitorch_exp.distributed as dist
    from minitorch_exp import nn
    agree = dist.Signature.agree
    off = without(dist.Signature, "agree")
    sig = dist.signature("all_reduce(sum)", (("the tensor", (1000,), np.dtype(np.float32)),))
    t = mt.zeros(1000)
    mt.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(mnist_mlp.build_model([256]))
    opt = nn.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = mnist_mlp.make_train_step(model, opt, captured=False)
    x, y = mnist()
    xb, yb = mt.tensor(x[:PER_RANK_BATCH]), mt.tensor(y[:PER_RANK_BATCH])
    for _ in range(20):
        step(xb, yb)
    result = {"agree": paired(sig.agree, lambda: None, calls=200)[0]}
    result["all_reduce"] = paired(lambda: dist.all_reduce(t), off(lambda: dist.all_reduce(t)))
    result["ddp_step"] = paired(lambda: step(xb, yb), off(lambda: step(xb, yb)), blocks=20,
                                calls=20)
    assert dist.Signature.agree is agree
    return result


def without(owner, name: str):
    """``off(fn)``: ``fn`` run with ``owner.name`` replaced by a no-op."""
    def off(fn):
        def run():
            real = getattr(owner, name)
            setattr(owner, name, lambda self: None)
            try:
                fn()
            finally:
                setattr(owner, name, real)
        return run
    return off


def check_report(result: dict) -> list[str]:
    lines = ["", "## The ranks' agreement on shapes and dtypes (2 processes)", "",
             f"Load average after: {load_text()}", "",
             "| what | with the check | without | added |", "| --- | ---: | ---: | ---: |",
             f"| `Signature.agree()` alone | {result['agree'] * 1e6:.1f} us | | |"]
    for key, label in (("all_reduce", "`dist.all_reduce`, 1e3 float32"),
                       ("ddp_step", "DDP step, eager (784-256-10, 128 per rank)")):
        on, off = result[key]
        lines.append(f"| {label} | {on * 1e6:,.1f} us | {off * 1e6:,.1f} us | "
                     f"{(on - off) * 1e6:+.1f} us ({on / off - 1:+.1%}) |")
    return lines + ["", "A captured step checks when it is recorded, not in its replays."]


DIVERGENCE_STEPS = (1, 3, 10, 30, 100, 300, 469, 938, 1407)


def divergence_worker(epochs: int = 3) -> dict:
    """Rank 0 also trains the one-process model and its reversed-order twin."""
    import mnist_mlp

    import minitorch_exp as mt
    import minitorch_exp.distributed as dist
    from minitorch_exp import nn
    from minitorch_exp.nn.idx import load_mnist
    rank, size = dist.get_rank(), dist.get_world_size()
    data = load_mnist()
    x, y = mnist_mlp.prepare(data.train_images), data.train_labels.astype(np.int64)
    test_x, test_y = mnist_mlp.prepare(data.test_images), data.test_labels.astype(np.int64)
    dataset = nn.TensorDataset(x, y)

    def trainer(wrap: bool, loader):
        mt.manual_seed(0)
        model = mnist_mlp.build_model([256])
        trained = nn.parallel.DistributedDataParallel(model) if wrap else model
        opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, trained, mnist_mlp.make_train_step(trained, opt), loader

    sampler = nn.DistributedSampler(dataset, seed=0)
    runs = {"ddp": trainer(True, nn.DataLoader(dataset, batch_size=128 // size,
                                               sampler=sampler, seed=0))}
    if rank == 0:
        for name in ("one", "reversed"):
            runs[name] = trainer(False, nn.DataLoader(dataset, batch_size=128, shuffle=True,
                                                      seed=0))

    def gap(a, b) -> float:
        return max(float(np.abs(p.numpy() - q.numpy()).max())
                   for p, q in zip(runs[a][0].parameters(), runs[b][0].parameters()))

    rows, accuracy, done = [], [], 0
    for _ in range(epochs):
        for batches in zip(*(run[3] for run in runs.values())):
            for (name, (_, _, step, _)), (xb, yb) in zip(runs.items(), batches):
                if name == "reversed":
                    xb, yb = (mt.from_numpy(t.numpy()[::-1].copy()) for t in (xb, yb))
                step(xb, yb)
            done += 1
            if done in DIVERGENCE_STEPS and rank == 0:
                rows.append([done, gap("ddp", "one"), gap("reversed", "one")])
        if rank == 0:
            accuracy.append([mnist_mlp.evaluate(runs[name][0], test_x, test_y, "cpu")[1]
                             for name in ("one", "ddp", "reversed")])
    largest = max(float(np.abs(p.numpy()).max()) for p in runs["ddp"][0].parameters())
    return {"rows": rows, "accuracy": accuracy, "largest": largest,
            "in_sync": runs["ddp"][1].parameters_in_sync()}


def divergence_report(result: dict) -> list[str]:
    lines = ["", "## 2 processes against 1 on the same batches (MNIST, 784-256-10)", "",
             f"Load average after: {load_text()}", "",
             "| step | max abs(2 processes - 1) | max abs(1, reversed batches - 1) |",
             "| ---: | ---: | ---: |"]
    lines += [f"| {step} | {a:.2e} | {b:.2e} |" for step, a, b in result["rows"]]
    lines += ["", f"Largest weight: {result['largest']:.2f}; ranks bit-identical at the "
              f"end: {result['in_sync']}", "", "| epoch | test accuracy, 1 process | "
              "2 processes | 1, reversed |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {i + 1} | {a:.2%} | {b:.2%} | {c:.2%} |"
              for i, (a, b, c) in enumerate(result["accuracy"])]
    return lines


REPORTS = {"check": check_report, "divergence": divergence_report}


if __name__ == "__main__":
    sys.exit(main())

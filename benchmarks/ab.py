"""This tree's speed against another checkout's, on the everyday workloads, in one run.

"No slowdown" is a claim about two versions of the code on one machine at one time,
so both run here, each in processes of its own, taking turns round by round: a
round runs every workload once in a child process per tree, and the ratio of each
round's pair (this tree's time over the other's) is what is kept. The table shows
each workload's median ratio and its quartiles over the rounds: below 1.00x this
tree is faster. The workloads come from this tree's benchmark scripts; only the
package under test changes (the child's ``PYTHONPATH``).

    git worktree add /tmp/base <commit>           # the version to compare against
    python benchmarks/ab.py --base /tmp/base      # 7 rounds, 1 thread
    python benchmarks/ab.py --base /tmp/base --threads 2 --only mlp,update

Results go to ``benchmarks/results/ab_t<threads>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _mlp(batch: int, captured: bool):
    import bench_mlp
    weights = bench_mlp.initial_weights(bench_mlp.ARCHS["784-256-10"])
    step, _ = bench_mlp.minitorch_step(weights, bench_mlp.batches(batch), captured=captured)
    return step


def _update(kind: str, n: int):
    import bench_update
    return {"seed": bench_update.seed_ours, "adam": bench_update.adam_ours}[kind](n)


def _lenet(captured: bool):
    import bench_cnn
    step, _ = bench_cnn.minitorch_lenet(bench_cnn.initial_state(), bench_cnn.lenet_data(),
                                        captured=captured)
    return step


def _tiny_chain():
    """A chain of 10 multiplications on (2, 2) tensors and its backward (per-op cost)."""
    import bench_eager

    import minitorch_exp as mt
    x0 = mt.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    _, chain = bench_eager.op_steps(x0, mt.tensor([[0.5, 1.5], [1.0, 0.9]]), None, True)
    return chain


def _tutorial(which: str):
    """A step of PyTorch's "learning PyTorch with examples": the polynomial fit or the
    dynamic network (``bench_eager.py --only tutorials`` runs them beside PyTorch)."""
    import bench_eager

    import minitorch_exp as mt
    if which == "polynomial":
        return bench_eager.polynomial_step(mt)
    return bench_eager.dynamic_net_step(mt, mt.nn)


#: name -> (group, a function returning the step to time)
WORKLOADS = {
    "mlp eager b32": ("mlp", lambda: _mlp(32, False)),
    "mlp eager b128": ("mlp", lambda: _mlp(128, False)),
    "mlp captured b128": ("mlp", lambda: _mlp(128, True)),
    "seed update 1e6": ("update", lambda: _update("seed", 10**6)),
    "adam update 1e6": ("update", lambda: _update("adam", 10**6)),
    "seed update 1e7": ("update", lambda: _update("seed", 10**7)),
    "lenet eager": ("lenet", lambda: _lenet(False)),
    "lenet captured": ("lenet", lambda: _lenet(True)),
    "tiny chain fwd+bwd": ("eager", _tiny_chain),
    "tutorial polynomial": ("eager", lambda: _tutorial("polynomial")),
    "tutorial dynamic net": ("eager", lambda: _tutorial("dynamic")),
}


def child(names: list[str], threads: int, min_time: float) -> None:
    """Time each workload once in this process; print ``{name: seconds}`` as JSON."""
    from common import pin_threads, timeit

    # the tree under test (PYTHONPATH), before a bench script puts its own first on sys.path
    import minitorch_exp

    tree = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0]).resolve()
    if tree not in Path(minitorch_exp.__file__).resolve().parents:
        raise RuntimeError(f"ab.py: imported {minitorch_exp.__file__}, not {tree}'s package")
    pin_threads(threads)
    print(json.dumps({name: timeit(WORKLOADS[name][1](), min_time=min_time)
                      for name in names}))


def _run_child(tree: Path, names: list[str], threads: int, min_time: float) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(HERE)]))
    out = subprocess.run([sys.executable, __file__, "--child", "--threads", str(threads),
                          "--min-time", str(min_time), *names],
                         env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(base: Path, names: list[str], rounds: int, threads: int,
            min_time: float) -> dict[str, list[float]]:
    """Each workload's ratios (this tree over ``base``), one per round; the two trees
    take turns going first."""
    ratios: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = [HERE.parent, base] if r % 2 == 0 else [base, HERE.parent]
        times = {tree: _run_child(tree, names, threads, min_time) for tree in order}
        for name in names:
            ratios[name].append(times[HERE.parent][name] / times[base][name])
        print(f"round {r + 1}/{rounds}: " + ", ".join(
            f"{name} {ratios[name][-1]:.3f}" for name in names), flush=True)
    return ratios


def table(ratios: dict[str, list[float]], base: Path, threads: int) -> str:
    from common import machine_info
    lines = [f"# This tree over `{base}` ({threads} thread(s), {len(next(iter(ratios.values())))}"
             " rounds, each tree in its own processes, taking turns)", "",
             f"Machine: {machine_info().get('cpu', '?')}", "",
             "| workload | median ratio | quartiles |", "| --- | ---: | ---: |"]
    for name, values in ratios.items():
        q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        lines.append(f"| {name} | {statistics.median(values):.3f}x | "
                     f"{q[0]:.3f}-{q[2]:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="the other checkout's root")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-time", type=float, default=0.3)
    parser.add_argument("--only", default="", help="groups: mlp,update,lenet,eager")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("names", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.names, args.threads, args.min_time)
        return 0
    if args.base is None or not (args.base / "minitorch_exp").is_dir():
        parser.error(f"--base must be a checkout with minitorch_exp/ in it, got {args.base}")
    groups = set(filter(None, args.only.split(",")))
    names = [n for n, (group, _) in WORKLOADS.items() if not groups or group in groups]
    ratios = compare(args.base.resolve(), names, args.rounds, args.threads, args.min_time)
    text = table(ratios, args.base, args.threads)
    print(text)
    from common import _atomic_write_text
    _atomic_write_text(HERE / "results" / f"ab_t{args.threads}.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the host's time goes in a CUDA statement and a CUDA training step.

``bench_cuda.py`` says how far ours is from CuPy and PyTorch; this says why. For
each case (the seed and Adam updates at 1e5 elements, the 784-256-10 MLP step
at batch 128, eager and captured) it prints

* the time per call (``common.timeit``) with a device synchronize around each
  round of calls, and with one after every call: equal times mean the host is
  the bottleneck;
* a cProfile table of the calls, by own time and by cumulative time.

    python benchmarks/profile_cuda.py                 # on a GPU machine with CuPy
    python benchmarks/profile_cuda.py --device cpu    # the same cases on the CPU

Nothing is written; the tables go to standard output.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_mlp  # noqa: E402
import bench_update as upd  # noqa: E402
from common import print_machine_info, timeit  # noqa: E402

import minitorch_exp as mt  # noqa: E402

MLP = [784, 256, 10]


def cases(device: str) -> dict[str, Callable[[], Callable[[], object]]]:
    """Case name -> builder of its call."""
    def mlp(captured: bool):
        weights, data = bench_mlp.initial_weights(MLP), bench_mlp.batches(128)
        return bench_mlp.minitorch_step(weights, data, device, captured=captured)[0]
    return {
        "seed update n=1e5": lambda: upd.seed_ours(100_000, device),
        "adam update n=1e5": lambda: upd.adam_ours(100_000, device),
        "mlp 784-256-10 b128 eager": lambda: mlp(False),
        "mlp 784-256-10 b128 captured": lambda: mlp(True),
    }


def profile_table(call, sync, calls: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    sync()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--calls", type=int, default=300, help="calls profiled")
    parser.add_argument("--top", type=int, default=30, help="rows of each profile table")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not mt.cuda.is_available():
        print("profile_cuda: not run: no CUDA device (or no CuPy)")
        return 0
    sync = mt.cuda.synchronize if args.device == "cuda" else (lambda: None)
    print_machine_info()
    for name, build in cases(args.device).items():
        if args.only and args.only not in name:
            continue
        call = build()
        for _ in range(20):  # compile, capture, warm the caches
            call()
        sync()
        at_end = timeit(call, sync=sync)  # a synchronize around each round of calls
        each = timeit(lambda call=call: (call(), sync()), sync=sync)
        print(f"\n==== {name}: {at_end * 1e6:.1f} us a call (sync after each round), "
              f"{each * 1e6:.1f} us (sync after each call)")
        print(profile_table(call, sync, args.calls, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())

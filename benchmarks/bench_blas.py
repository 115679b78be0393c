"""Matrix products: OpenBLAS whole (one thread, its own threads) against
minitorch_exp's tiles and blocks (``tensor/blas.py``), alone and inside the captured
MLP step.

Each product of an MLP's training step (784-256-10 and 784-512-256-10, batches 32,
128 and 512: ``x @ W.T``, ``g @ W`` and ``g.T @ x``) runs four ways, taking turns:

* ``one thread``: OpenBLAS on one thread, one whole call (``set_parallel_min(0)``);
* ``openblas``: OpenBLAS on the pool's threads, as plain NumPy;
* ``ours, one thread``: minitorch_exp's default with one BLAS thread: small-matrix
  tiles where they pay (float32 on CPUs whose OpenBLAS has those kernels), else
  one whole call;
* ``ours``: minitorch_exp's default on the pool's threads: the tiles, or blocks of
  rows or columns, shared between numba's threads (the caller among them).

Then the captured 784-256-10 training step at batch 128 under each. ``--load`` runs
everything beside ``3 x cores`` busy processes, where a thread may wait a timeslice
for its partner. Ratios are time over ``one thread``'s. Results go to
``benchmarks/results/blas_blocks[_load].{md,csv}``.

Run: ``python benchmarks/bench_blas.py [--threads 2] [--load] [--min-time 0.5]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import numpy as np
from bench_eager import ARCHS, _busy, batches, initial_weights, load_line, minitorch_step
from common import Table, interleaved_timeit, print_machine_info
from threadpoolctl import threadpool_limits

from minitorch_exp.tensor import blas


def products(arch: list[int], batch: int):
    """The step's products that BLAS would thread, ``(name, a, b)``, laid out as the
    engine calls BLAS: forward ``x @ W.T``, the input gradient ``g @ W`` and the weight
    gradient ``g.T @ x``."""
    rng = np.random.default_rng(0)
    found = []
    for n_in, n_out in zip(arch, arch[1:]):
        x = rng.standard_normal((batch, n_in), dtype=np.float32)
        w = rng.standard_normal((n_out, n_in), dtype=np.float32)
        g = rng.standard_normal((batch, n_out), dtype=np.float32)
        found += [(f"x@W.T {batch}x{n_in}x{n_out}", x, w.T),
                  (f"g@W {batch}x{n_out}x{n_in}", g, w),
                  (f"g.T@x {n_out}x{batch}x{n_in}", g.T, x)]
    return [p for p in found if blas._work(p[1], p[2]) >= blas._BLAS_SERIAL_BELOW]


def ways(threads: int) -> dict:
    """Setup per way of running a product: BLAS's thread count and the sharing bound,
    after a pause: OpenBLAS's threads spin for a while after a product (2^28 cycles by
    default), and would take a core from the next way's helper."""
    def setting(blas_threads, bound):
        def setup():
            time.sleep(0.3)
            threadpool_limits(blas_threads, user_api="blas")
            blas.set_parallel_min(bound)
        return setup
    return {"one thread": setting(1, 0), "openblas": setting(threads, 0),
            "ours, one thread": setting(1, None), "ours": setting(threads, None)}


def run(threads: int, min_time: float, name: str) -> Table:
    table = Table(name, baseline="one thread")
    setups = ways(threads)
    seen = set()
    for arch in ARCHS.values():
        for batch in (32, 128, 512):
            for label, a, b in products(arch, batch):
                if label in seen:
                    continue
                seen.add(label)
                out = np.empty((a.shape[0], b.shape[1]), np.float32)
                steps = {way: (lambda a=a, b=b, out=out: blas.matmul(a, b, out=out))
                         for way in setups}
                for way, seconds in interleaved_timeit(steps, min_time, setups=setups).items():
                    table.add(way, label, seconds)
    weights, data = initial_weights(ARCHS["784-256-10"]), batches(128)
    step = minitorch_step(weights, data, captured=True)[0]
    times = interleaved_timeit({way: step for way in setups}, 4 * min_time, setups=setups)
    for way, seconds in times.items():
        table.add(way, "captured step 784-256-10 b128", seconds)
    ways(threads)["ours"]()
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--load", action="store_true", help="beside 3 x cores busy processes")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds per timing")
    args = parser.parse_args()
    print_machine_info()
    workers = []
    if args.load:
        stop = multiprocessing.Event()
        workers = [multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
                   for _ in range(3 * (os.cpu_count() or 1))]
        for w in workers:
            w.start()
        time.sleep(1.0)
    print(f"\n== products on {args.threads} threads ({load_line()}"
          f"{f', beside {len(workers)} busy processes' if workers else ''})")
    try:
        table = run(args.threads, args.min_time, "blas_blocks_load" if args.load else "blas_blocks")
    finally:
        if workers:
            stop.set()
            for w in workers:
                w.join()
    table.print()
    table.write()


if __name__ == "__main__":
    main()

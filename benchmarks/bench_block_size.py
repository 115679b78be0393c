"""Block size of the NumPy block evaluator, measured on the Adam update at 1e7.

The NumPy evaluator (``cpu_numpy.py``) runs a Plan block by block through
scratch buffers of ``BLOCK`` elements. Small blocks pay Python and ufunc
overhead per block; large blocks push the intermediates out of cache. This
times the three fused Adam statements on float32 vectors of 1e7 elements for
``BLOCK = 2**12 .. 2**20`` and reports the fastest; set it in ``cpu_numpy.py``
(or per run with ``MINITORCH_BLOCK``).

Run: ``python benchmarks/bench_block_size.py [--n N]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_update import adam_ours
from common import Table, pin_threads, print_machine_info, timeit

import minitorch_exp.tensor as mt
from minitorch_exp.tensor import cpu_numpy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**7, help="elements per vector")
    args = parser.parse_args()
    print_machine_info()
    pin_threads(1)  # the block evaluator is single-threaded; keep BLAS pools quiet
    default = cpu_numpy.BLOCK
    table = Table("numpy_block_size", baseline=f"BLOCK=2^{default.bit_length() - 1}")
    with mt.using_cpu_backend("numpy"):
        for k in range(12, 21):
            cpu_numpy.BLOCK = 1 << k
            table.add(f"BLOCK=2^{k}", args.n, timeit(adam_ours(args.n), min_time=1.0))
            print(f"  2^{k} done", flush=True)
    cpu_numpy.BLOCK = default
    table.print()
    table.write()
    best = min(table.rows, key=lambda row: row.seconds)
    print(f"fastest: {best.name} ({best.seconds * 1e3:.2f} ms per Adam step)")


if __name__ == "__main__":
    main()

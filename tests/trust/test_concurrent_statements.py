"""User threads that evaluate statements at the same time each get their own right
result.

The NumPy evaluator computes a large statement block by block through scratch
buffers it keeps between calls, and the numba evaluator hands it every statement
whose ops NumPy computes faster (tanh, exp: ``cpu_numba.numpy_is_faster``). NumPy
lets the interpreter lock go inside each pass, so threads sharing those buffers
wrote into each other's intermediates: 98 of 120 large ``tanh`` statements from
four threads came out wrong on the default evaluator.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import minitorch_exp.tensor as T
from minitorch_exp.tensor import cpu_numpy

N = 1 << 19  # two blocks of the NumPy evaluator (``cpu_numpy.BLOCK``)


def _statements_from_threads(statement, threads: int = 4, repeats: int = 15) -> list:
    """Run ``statement(x, w)`` into a fresh ``out`` over each thread's own data, at the
    same time; the (thread, repeat) of every wrong result."""
    wrong, start = [], threading.Barrier(threads)

    def work(seed):
        rng = np.random.default_rng(seed)
        a, b = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
        x, w, out = T.from_numpy(a), T.from_numpy(b), T.empty(N)
        out[...] = statement(x, w)
        want = out.numpy().copy()  # computed alone, before the others start
        start.wait()
        for i in range(repeats):
            out[...] = statement(x, w)
            if not np.array_equal(out.numpy(), want):
                wrong.append((seed, i))

    pool = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return wrong


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_large_statements_from_four_threads_at_once_are_each_right(backend):
    assert N > cpu_numpy.BLOCK  # blocks, through the scratch buffers
    with T.using_cpu_backend(backend):
        wrong = _statements_from_threads(lambda x, w: (x * w + 1.0).tanh() * 0.5 + x * w)
    assert wrong == []


def test_each_thread_has_its_own_scratch_buffers():
    mine = cpu_numpy.scratch_buffer(np.float32, 0)
    found = []
    t = threading.Thread(target=lambda: found.append(cpu_numpy.scratch_buffer(np.float32, 0)))
    t.start()
    t.join()
    assert found[0] is not mine and cpu_numpy.scratch_buffer(np.float32, 0) is mine

"""Debug output describes the kernels that run without it: grouping is kept under debug."""

from __future__ import annotations

import numpy as np

import minitorch_exp.tensor as T
from minitorch_exp.tensor import counters


def _adam_like(m, v, w, g):
    return [(m, 0.9 * m + 0.1 * g), (v, 0.99 * v + 0.01 * g * g),
            (w, 0.001 * m / (v.sqrt() + 1e-8), "-=")]


def test_assign_all_is_one_kernel_with_and_without_debug(capsys):
    g = T.randn(4, 5)
    results = []
    for level in (0, 1):
        m, v, w = T.zeros(4, 5), T.ones(4, 5), T.ones(4, 5)
        old = counters.debug_level()
        counters.set_debug(level)
        try:
            with T.count_kernels() as k:
                T.assign_all(_adam_like(m, v, w, g))
        finally:
            counters.set_debug(old)
        assert k.total == 1, (level, k)
        results.append(w.numpy().copy())
    np.testing.assert_array_equal(results[0], results[1])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[mt #")]
    assert len(lines) == 1 and "3 statements" in lines[0], lines

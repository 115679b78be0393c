"""benchmarks/bench_mlp.py's steps do the work they claim to time."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_mlp
        yield bench_mlp
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("bench_mlp", None)


def test_framework_steps_match_numpy(bench) -> None:
    weights = bench.initial_weights([784, 12, 7, 10])
    bench.check_same_steps(weights, bench.batches(6))


def test_matmul_floor_runs_every_product_of_a_step(bench) -> None:
    (w1, _), (w2, _) = weights = bench.initial_weights([784, 9, 10])
    data = bench.batches(5)
    step, grads_w = bench.matmul_floor_step(weights, data)
    step()
    x = data[0][0].astype(np.float64)
    h1 = x @ w1.T
    g = h1 @ w2.T                    # the floor feeds the logits back as the gradient
    expected_w2 = g.T @ h1
    expected_w1 = (g @ w2).T @ x     # no product for the first layer's input gradient
    np.testing.assert_allclose(grads_w()[1], expected_w2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads_w()[0], expected_w1, rtol=1e-4, atol=1e-4)

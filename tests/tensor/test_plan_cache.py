"""Plans are cached by structure, never by data, sizes or scalar values."""

from __future__ import annotations

import numpy as np

from minitorch_exp.tensor import exp, from_numpy, relu
from minitorch_exp.tensor.plan import plan_cache_size

from .strategies import assert_matches


def sgd_step(w, g, eta, lam):
    w[...] = -eta * (g + lam * w)


def test_same_statement_with_new_data_and_scalars_reuses_the_plan():
    rng = np.random.default_rng(0)
    w = from_numpy(rng.normal(size=(4, 3)))
    sgd_step(w, from_numpy(rng.normal(size=(4, 3))), 0.1, 0.01)  # warm up
    size = plan_cache_size()
    for i in range(5):
        ref_w = rng.normal(size=(4, 3))
        g = rng.normal(size=(4, 3))
        eta, lam = 0.05 * (i + 1), 10.0 ** -i
        w = from_numpy(ref_w.copy())
        sgd_step(w, from_numpy(g), eta, lam)
        assert_matches(w, -eta * (g + lam * ref_w))
    assert plan_cache_size() == size


def test_sizes_and_strides_of_the_same_ndim_reuse_the_plan():
    rng = np.random.default_rng(1)
    (relu(from_numpy(rng.normal(size=(2, 3))) * 1.5) + 2.0).eval()
    size = plan_cache_size()
    for shape in [(5, 7), (1, 9), (0, 4), (3, 3)]:
        a = rng.normal(size=shape)
        for t, ref in [(from_numpy(a), a), (from_numpy(a.T.copy()).T, a)]:
            assert_matches((relu(t * -0.5) + 3.0).eval(), np.maximum(ref * -0.5, 0) + 3.0)
    assert plan_cache_size() == size


def test_reductions_over_fused_inputs_reuse_the_plan():
    rng = np.random.default_rng(2)
    (exp(from_numpy(rng.normal(size=(3, 4)))) * 2.0).sum(axis=1).eval()
    size = plan_cache_size()
    for scale in (0.5, 3.0, -1.0):
        a = rng.normal(size=(6, 2))
        assert_matches((exp(from_numpy(a)) * scale).sum(axis=1).eval(),
                       (np.exp(a) * scale).sum(axis=1))
    assert plan_cache_size() == size


def test_a_new_structure_adds_exactly_one_plan():
    a = from_numpy(np.arange(6.0))
    (a * 2 - a).eval()
    size = plan_cache_size()
    (a * 2 - a).eval()
    assert plan_cache_size() == size
    (a * 2 - a.exp() + 17.25 * a.tanh()).eval()  # a statement not seen before
    assert plan_cache_size() == size + 1

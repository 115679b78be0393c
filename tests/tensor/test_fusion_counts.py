"""Fusion pinned by kernel counts: a regression in what fuses fails here, not in a benchmark."""

from __future__ import annotations

import numpy as np
import pytest

from minitorch_exp.tensor import (
    count_kernels,
    exp,
    from_numpy,
    kernel_counts,
    relu,
    reset_kernel_counts,
    sigmoid,
    tanh,
    where,
)

from .strategies import assert_matches

RNG = np.random.default_rng(0)


def pair(*shape):
    """(Tensor, reference array) over separate memory, so writes leave the reference alone."""
    a = RNG.normal(size=shape)
    return from_numpy(a.copy()), a


def test_sgd_update_is_one_fused_pass():
    tw, w = pair(5, 4)
    tg, g = pair(5, 4)
    eta, lam = 0.1, 1e-2
    with count_kernels() as k:
        tw[...] = -eta * (tg + lam * tw)
    assert k["fused"] == 1 and k.total == 1
    assert_matches(tw, -eta * (g + lam * w))
    with count_kernels() as k:
        tw -= eta * tg
    assert k["fused"] == 1 and k.total == 1


def test_reduction_over_a_fused_input_is_one_reduce_pass():
    ta, a = pair(3, 7)
    tb, b = pair(3, 7)
    dst = from_numpy(np.zeros(3))
    with count_kernels() as k:
        dst[...] = (ta * tb).sum(axis=1)
    assert k["reduce"] == 1 and k["fused"] == 0 and k.total == 1
    assert_matches(dst, (a * b).sum(axis=1))
    with count_kernels() as k:
        out = (ta * tb + 1).max(axis=0).eval()
    assert k["reduce"] == 1 and k.total == 1
    assert_matches(out, (a * b + 1).max(axis=0))


def test_dot_then_map_is_one_blas_and_one_fused():
    ta, a = pair(3, 4)
    tb, b = pair(4, 5)
    tc, c = pair(5)
    with count_kernels() as k:
        out = ((ta @ tb) + tc).eval()
    assert k["blas"] == 1 and k["fused"] == 1 and k.total == 2
    assert_matches(out, a @ b + c)
    with count_kernels() as k:
        out = relu((ta @ tb) * 2 - tc).eval()
    assert k["blas"] == 1 and k["fused"] == 1 and k.total == 2


def test_dot_with_map_operands_evaluates_them_first():
    ta, a = pair(3, 4)
    tb, b = pair(4, 5)
    with count_kernels() as k:
        out = ((ta * 2) @ tb).eval()
    assert k["fused"] == 1 and k["blas"] == 1 and k.total == 2
    assert_matches(out, (a * 2) @ b)


def test_long_chains_and_views_of_maps_stay_one_pass():
    ta, a = pair(4, 6)
    tb, b = pair(6)
    e = ta
    ref = a
    for i in range(12):
        e = tanh(e * 0.9 + tb) - 0.1 * i
        ref = np.tanh(ref * 0.9 + b) - 0.1 * i
    with count_kernels() as k:
        out = e.eval()
    assert k["fused"] == 1 and k.total == 1
    assert_matches(out, ref)
    with count_kernels() as k:
        out = (sigmoid(ta + tb[None]).T * exp(-ta.T)).unsqueeze(0).squeeze(0).T.eval()
    assert k["fused"] == 1 and k.total == 1
    assert_matches(out, (1 / (1 + np.exp(-(a + b)))) * np.exp(-a))
    with count_kernels() as k:
        out = (sigmoid(ta) * 2).reshape(3, 8).eval()  # the leaves' strides allow the view
    assert k["fused"] == 1 and k.total == 1
    assert_matches(out, (1 / (1 + np.exp(-a)) * 2).reshape(3, 8))


def test_reshape_that_cannot_be_pushed_down_costs_no_extra_copy():
    """A reshape of a transposed broadcast cannot view the leaves: the map is
    computed first, and the reshape is a view of that result (still one pass)."""
    ta, a = pair(4, 6)
    tb, b = pair(6)
    with count_kernels() as k:
        out = (sigmoid(ta + tb).T * exp(-ta.T)).reshape(-1).eval()
    assert k["fused"] == 1 and k.total == 1
    assert_matches(out, (1 / (1 + np.exp(-(a + b)))).T.reshape(-1) * np.exp(-a.T).reshape(-1))
    dst = from_numpy(np.zeros(24))
    with count_kernels() as k:
        dst[...] = (ta + tb).T.reshape(-1)  # into a given dst: compute, then copy
    assert k["fused"] == 2 and k.total == 2
    assert_matches(dst, (a + b).T.reshape(-1))


def test_where_astype_and_broadcast_fuse():
    ta, a = pair(4, 6)
    tb, b = pair(1, 6)
    with count_kernels() as k:
        out = where(ta > tb, ta.astype("float32"), (tb * 2).astype("float32")).eval()
    assert k["fused"] == 1 and k.total == 1
    assert_matches(out, np.where(a > b, a.astype(np.float32), (b * 2).astype(np.float32)))


def test_softmax_counts_its_boundaries():
    ta, a = pair(3, 5)
    with count_kernels() as k:
        m = ta.max(axis=1, keepdims=True)
        z = exp(ta - m)
        out = (z / z.sum(axis=1, keepdims=True)).eval()
    # max (reduce) -> sum over a fused exp (reduce) -> one fused divide pass.
    assert k["reduce"] == 2 and k["fused"] == 1 and k.total == 3
    e = np.exp(a - a.max(axis=1, keepdims=True))
    assert_matches(out, e / e.sum(axis=1, keepdims=True))


def test_kernel_counts_and_reset():
    ta, _ = pair(3)
    reset_kernel_counts()
    assert kernel_counts()["total"] == 0
    (ta + 1).eval()
    (ta + 1).sum().eval()
    counts = kernel_counts()
    assert counts["fused"] == 1 and counts["reduce"] == 1 and counts["total"] == 2
    assert kernel_counts("cuda")["total"] == 0


@pytest.mark.parametrize("block", [None, 4])
def test_contiguous_copy_is_one_pass(monkeypatch, block):
    if block:
        from minitorch_exp.tensor import cpu_numpy
        monkeypatch.setattr(cpu_numpy, "BLOCK", block)
    ta, a = pair(5, 6)
    with count_kernels() as k:
        c = ta.T.contiguous()
    assert k["fused"] == 1 and k.total == 1
    assert_matches(c, a.T)


def test_counts_by_device_name_include_the_device_index():
    from minitorch_exp.tensor import counters
    before = counters.kernel_counts("cuda")
    counters.count("cuda", "fused")  # what the CUDA backend records for any cuda:N
    try:
        assert counters.kernel_counts("cuda:0")["fused"] == before.get("fused", 0) + 1
        assert counters.kernel_counts("cuda:1")["total"] == before["total"] + 1
    finally:
        counters._COUNTS[("cuda", "fused")] -= 1

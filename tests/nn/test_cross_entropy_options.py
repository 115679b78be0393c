"""F.cross_entropy / nn.CrossEntropyLoss with ``weight``, ``ignore_index``, ``reduction``,
``label_smoothing`` and inputs (N, C, d1, ...): against a NumPy reference of PyTorch's
formula, by float64 finite differences, and against PyTorch where it is installed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.nn.functional as F
from minitorch_exp import nn


def reference(z, t, weight, ignore_index, reduction, smoothing):
    """PyTorch's documented formula, in float64 NumPy; classes on axis 1."""
    c = z.shape[1]
    zr = np.moveaxis(z, 1, -1).reshape(-1, c).astype(np.float64)
    tr = t.reshape(-1)
    w = np.ones(c) if weight is None else weight.astype(np.float64)
    logp = zr - zr.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    counted = tr != ignore_index
    safe = np.where(counted, tr, 0)
    q = np.eye(c)[safe] * (1 - smoothing) + smoothing / c
    loss = -(q * w * logp).sum(1) * counted
    if reduction == "none":
        return loss.reshape((z.shape[0], *z.shape[2:]))
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (w[safe] * counted).sum()


@st.composite
def cases(draw):
    n, c = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    extra = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c, *extra)) * 3
    t = rng.integers(0, c, (n, *extra))
    ignore = draw(st.sampled_from([-100, 1]))
    t = np.where(rng.random(t.shape) < 0.3, ignore, t)
    if (t == ignore).all():
        t.flat[0] = 0 if ignore != 0 else 1
    weight = rng.uniform(0.2, 2.0, c) if draw(st.booleans()) else None
    return z, t, weight, ignore, draw(st.sampled_from(["mean", "sum", "none"])), \
        draw(st.sampled_from([0.0, 0.2]))


def _mine(z, t, weight, ignore, reduction, smoothing, dtype=np.float64, requires_grad=False):
    x = mt.tensor(z.astype(dtype), requires_grad=requires_grad)
    w = None if weight is None else mt.tensor(weight.astype(dtype))
    return x, F.cross_entropy(x, mt.tensor(t), w, ignore_index=ignore, reduction=reduction,
                              label_smoothing=smoothing)


@settings(max_examples=40, deadline=None)
@given(case=cases())
def test_against_numpy(case):
    z, t, weight, ignore, reduction, smoothing = case
    _, loss = _mine(*case)
    np.testing.assert_allclose(loss.numpy(), reference(*case), rtol=1e-10, atol=1e-12)


@settings(max_examples=15, deadline=None)
@given(case=cases())
def test_gradients_by_finite_differences(case):
    z, t, weight, ignore, reduction, smoothing = case
    x = mt.tensor(z, requires_grad=True)
    w = None if weight is None else mt.tensor(weight)
    assert mt.gradcheck(lambda a: F.cross_entropy(a, t, w, ignore_index=ignore,
                                                  reduction=reduction,
                                                  label_smoothing=smoothing), [x])


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_against_torch(case):
    torch = pytest.importorskip("torch")
    z, t, weight, ignore, reduction, smoothing = case
    x, loss = _mine(z, t, weight, ignore, reduction, smoothing, np.float32, True)
    xt = torch.tensor(z.astype(np.float32), requires_grad=True)
    wt = None if weight is None else torch.tensor(weight.astype(np.float32))
    module = torch.nn.CrossEntropyLoss(wt, ignore_index=ignore, reduction=reduction,
                                       label_smoothing=smoothing)
    lt = module(xt, torch.tensor(t))
    np.testing.assert_allclose(loss.numpy(), lt.detach().numpy(), rtol=1e-4, atol=1e-5)
    up = np.random.default_rng(0).uniform(0.5, 1.5, lt.shape).astype(np.float32)
    loss.backward(mt.tensor(up))
    lt.backward(torch.tensor(up))
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_the_module_takes_torch_s_arguments_and_keeps_weight_as_a_buffer():
    w = mt.tensor([1.0, 2.0, 0.5])
    loss = nn.CrossEntropyLoss(w, ignore_index=0, reduction="sum")
    assert loss.weight is not None and list(loss.state_dict()) == ["weight"]
    z = mt.tensor([[1.0, 2.0, 3.0], [0.5, 0.1, 0.2]])
    want = reference(z.numpy(), np.array([0, 2]), w.numpy(), 0, "sum", 0.0)
    np.testing.assert_allclose(loss(z, mt.tensor([0, 2])).item(), want, rtol=1e-6)
    with pytest.raises(TypeError, match="reduction="):
        nn.CrossEntropyLoss(size_average=True)


def test_everything_ignored_gives_nan_as_torch_and_bad_targets_are_named():
    z = mt.randn(2, 3)
    assert np.isnan(F.cross_entropy(z, mt.tensor([-100, -100])).item())
    with pytest.raises(ValueError, match=r"class targets must be in \[0, 3\)"):
        F.cross_entropy(z, mt.tensor([-100, 3]))
    with pytest.raises(ValueError, match="target of shape"):
        F.cross_entropy(mt.randn(2, 3, 4), mt.tensor([0, 1]))


def test_a_captured_step_with_weights_and_ignored_targets_matches_eager():
    w = mt.tensor([1.0, 2.0, 0.5])
    x = mt.tensor(np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32),
                  requires_grad=True)

    def step(t):
        x.grad = None
        loss = F.cross_entropy(x, t, w, ignore_index=-100)
        loss.backward()
        return loss

    captured = mt.capture(step)
    for t in ([0, -100, 2, 1], [2, 2, -100, -100], [1, 0, 0, 2]):
        got = captured(mt.tensor(t)).item()
        grad = x.grad.numpy().copy()
        want = step(mt.tensor(t)).item()
        assert got == pytest.approx(want, rel=1e-6)
        np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(want, reference(x.numpy(), np.array(t), w.numpy(), -100,
                                                   "mean", 0.0), rtol=1e-5)

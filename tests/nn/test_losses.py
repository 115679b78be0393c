"""Losses against PyTorch and finite differences; bad targets raise clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import functional as F

from ..devices import DEVICES, tolerance

RNG = np.random.default_rng(1)
N, C = 6, 5


def logits(dtype=np.float32, scale=2.0):
    return (RNG.standard_normal((N, C)) * scale).astype(dtype)


def targets(n=N):
    return RNG.integers(0, C, n).astype(np.int64)


def ce_reference(z, t, smoothing=0.0):
    """Per-sample cross-entropy in float64 NumPy."""
    z = z.astype(np.float64)
    m = z.max(1, keepdims=True)
    logp = z - m - np.log(np.exp(z - m).sum(1, keepdims=True))
    q = np.full(z.shape, smoothing / z.shape[1])
    q[np.arange(len(t)), t] += 1 - smoothing
    return -(q * logp).sum(1)


# ---- values against NumPy ---------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_against_numpy(device, reduction, smoothing):
    z, t = logits(), targets()
    got = nn.CrossEntropyLoss(reduction=reduction, label_smoothing=smoothing)(
        mt.tensor(z, device=device), t).numpy()
    ref = ce_reference(z, t, smoothing)
    ref = {"mean": ref.mean(), "sum": ref.sum(), "none": ref}[reduction]
    rtol, atol = tolerance(device, 1e-5, 1e-6)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_extreme_logits_stay_finite(device):
    z = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 0.0], [1000.0, 1000.0, -1000.0]],
                 np.float32)
    t = np.array([0, 0, 1])
    x = mt.tensor(z, requires_grad=True, device=device)
    loss = F.cross_entropy(x, t, reduction="none")
    rtol, atol = tolerance(device, 1e-6, 1e-6)
    np.testing.assert_allclose(loss.numpy(), [0.0, 2000.0, np.log(2)], rtol=rtol, atol=atol)
    mt.sum(loss).backward()
    g = x.grad.numpy()
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, [[0, 0, 0], [-1, 1, 0], [0.5, -0.5, 0]], atol=atol)
    smoothed = F.cross_entropy(mt.tensor(z, device=device), t, label_smoothing=0.2)
    assert np.isfinite(smoothed.item())


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_and_mse_against_numpy(device):
    z, t = logits(), targets()
    lp = z - np.log(np.exp(z).sum(1, keepdims=True))

    def on(a):
        return mt.tensor(a, device=device)

    def close(actual, expected, rtol):
        np.testing.assert_allclose(actual, expected, rtol=tolerance(device, rtol, 0.0)[0])

    close(nn.NLLLoss()(on(lp), t).item(), -lp[np.arange(N), t].mean(), 1e-6)
    close(F.nll_loss(on(lp), t, reduction="sum").item(), -lp[np.arange(N), t].sum(), 1e-6)
    a, b = logits(), logits()
    close(nn.MSELoss()(on(a), on(b)).item(), ((a - b) ** 2).mean(), 1e-6)
    close(F.mse_loss(on(a), on(b), "none").numpy(), (a - b) ** 2, 1e-6)
    close(F.mse_loss(on(a), b, "sum").item(), ((a - b) ** 2).sum(), 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_functional_forms_agree(device):
    z, t = mt.tensor(logits(), device=device), targets()
    assert nn.CrossEntropyLoss()(z, t).item() == F.cross_entropy(z, t).item()
    lp = F.log_softmax(z, 1)
    assert nn.NLLLoss(reduction="sum")(lp, t).item() == F.nll_loss(lp, t, "sum").item()
    np.testing.assert_allclose(F.nll_loss(lp, t).item(), F.cross_entropy(z, t).item(),
                               rtol=tolerance(device, 1e-6, 0.0)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_targets_as_node_list_or_array(device):
    z, t = mt.tensor(logits(), device=device), targets()
    want = F.cross_entropy(z, t).item()
    assert F.cross_entropy(z, mt.tensor(t, device=device)).item() == want
    assert F.cross_entropy(z, t.tolist()).item() == want
    assert F.cross_entropy(z, t.astype(np.int32)).item() == want


# ---- PyTorch ------------------------------------------------------------------------

CASES = [
    ("ce_mean", lambda x, t: F.cross_entropy(x, t),
     lambda tf, x, t: tf.cross_entropy(x, t)),
    ("ce_sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
     lambda tf, x, t: tf.cross_entropy(x, t, reduction="sum")),
    ("ce_none", lambda x, t: F.cross_entropy(x, t, reduction="none"),
     lambda tf, x, t: tf.cross_entropy(x, t, reduction="none")),
    ("ce_smooth", lambda x, t: nn.CrossEntropyLoss(label_smoothing=0.15)(x, t),
     lambda tf, x, t: tf.cross_entropy(x, t, label_smoothing=0.15)),
    ("ce_smooth_sum", lambda x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.3),
     lambda tf, x, t: tf.cross_entropy(x, t, reduction="sum", label_smoothing=0.3)),
    ("nll", lambda x, t: nn.NLLLoss()(F.log_softmax(x, 1), t),
     lambda tf, x, t: tf.nll_loss(tf.log_softmax(x, 1), t)),
    ("nll_none", lambda x, t: F.nll_loss(x, t, "none"),
     lambda tf, x, t: tf.nll_loss(x, t, reduction="none")),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,mine,theirs", CASES, ids=[c[0] for c in CASES])
def test_class_losses_match_torch(device, name, mine, theirs):
    torch = pytest.importorskip("torch")
    z, t = logits(), targets()
    x = mt.tensor(z, requires_grad=True, device=device)
    xt = torch.from_numpy(z.copy()).requires_grad_(True)
    loss, lt = mine(x, t), theirs(torch.nn.functional, xt, torch.from_numpy(t))
    rtol, atol = tolerance(device, 1e-5, 1e-6)
    np.testing.assert_allclose(loss.numpy(), lt.detach().numpy(), rtol=rtol, atol=atol)
    g = RNG.uniform(0.5, 1.5, loss.shape).astype(np.float32)
    loss.backward(mt.tensor(g, device=device))
    lt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_matches_torch(device, reduction):
    torch = pytest.importorskip("torch")
    a, b = logits(), logits()
    x = mt.tensor(a, requires_grad=True, device=device)
    y = mt.tensor(b, requires_grad=True, device=device)
    xt, yt = (torch.from_numpy(v.copy()).requires_grad_(True) for v in (a, b))
    loss = nn.MSELoss(reduction)(x, y)
    lt = torch.nn.functional.mse_loss(xt, yt, reduction=reduction)
    np.testing.assert_allclose(loss.numpy(), lt.detach().numpy(),
                               rtol=tolerance(device, 1e-5, 0.0)[0])
    g = np.ones(loss.shape, np.float32)
    loss.backward(mt.tensor(g, device=device))
    lt.backward(torch.from_numpy(g))
    rtol, atol = tolerance(device, 1e-5, 1e-7)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("device", DEVICES)
def test_mse_of_a_0d_input_and_a_number_is_0d(device):
    x = mt.tensor(np.float32(1.5), requires_grad=True, device=device)
    loss = F.mse_loss(x, 0.5)
    assert loss.shape == ()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0)  # d(x - 0.5)^2/dx at 1.5


@pytest.mark.parametrize("device", DEVICES)
def test_extreme_logits_match_torch(device):
    torch = pytest.importorskip("torch")
    z = np.array([[1000.0, -1000.0, 3.0], [-1000.0, 999.0, 1000.0]], np.float32)
    t = np.array([2, 1])
    x = mt.tensor(z, requires_grad=True, device=device)
    xt = torch.from_numpy(z.copy()).requires_grad_(True)
    loss = F.cross_entropy(x, t, label_smoothing=0.1)
    lt = torch.nn.functional.cross_entropy(xt, torch.from_numpy(t), label_smoothing=0.1)
    rtol, atol = tolerance(device, 1e-6, 1e-6)
    np.testing.assert_allclose(loss.item(), lt.item(), rtol=rtol)
    loss.backward()
    lt.backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=atol)


# ---- finite differences -------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_gradcheck(device, reduction):
    t = targets()
    z = mt.tensor(logits(np.float64), requires_grad=True, device=device)
    assert mt.gradcheck(lambda x: F.cross_entropy(x, t, reduction=reduction), [z])
    assert mt.gradcheck(lambda x: F.cross_entropy(x, t, reduction=reduction,
                                                  label_smoothing=0.2), [z])
    assert mt.gradcheck(lambda x: F.nll_loss(F.log_softmax(x, 1), t, reduction), [z])
    y = mt.tensor(logits(np.float64), requires_grad=True, device=device)
    assert mt.gradcheck(lambda a, b: F.mse_loss(a, b, reduction), [z, y])


# ---- bad targets -----------------------------------------------------------------

def test_bad_targets_raise_clear_errors():
    z = mt.tensor(logits())
    with pytest.raises(ValueError, match=r"class targets must be in \[0, 5\)"):
        F.cross_entropy(z, np.array([0, 1, 2, 3, 4, 5]))
    with pytest.raises(ValueError, match=r"class targets must be in \[0, 5\)"):
        F.nll_loss(z, np.array([0, -1, 2, 3, 4, 0]))
    with pytest.raises(TypeError, match="must be integers, got float"):
        F.cross_entropy(z, np.zeros(N, np.float32))
    with pytest.raises(TypeError, match="must be integers"):
        nn.NLLLoss()(z, mt.zeros(N))
    for bad in (np.zeros(N - 1, np.int64), np.zeros((N, 1), np.int64), np.array(1)):
        with pytest.raises(ValueError, match=r"shape \(N, C\) and target of shape \(N,\)"):
            F.cross_entropy(z, bad)
    with pytest.raises(ValueError, match=r"shape \(N, C\)"):
        F.cross_entropy(mt.tensor(np.zeros(C, np.float32)), np.array([1]))
    with pytest.raises(ValueError, match="reduction must be"):
        F.cross_entropy(z, targets(), reduction="avg")
    with pytest.raises(ValueError, match="mse_loss: input shape"):
        F.mse_loss(z, mt.zeros(N, C + 1))

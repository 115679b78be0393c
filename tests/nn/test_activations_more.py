"""SiLU, ELU, SELU, Softplus, Hardtanh, ReLU6, Hardswish, Mish, LogSigmoid and PReLU:
values and gradients against PyTorch (at the kinks too), float64 gradcheck, both sides
of the fusion policy, and one kernel for a forward chain."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import functional as F

# name, keyword options, the module and its arguments
CASES = [
    ("silu", {}, nn.SiLU, {}),
    ("elu", {"alpha": 0.7}, nn.ELU, {"alpha": 0.7}),
    ("selu", {}, nn.SELU, {}),
    ("softplus", {}, nn.Softplus, {}),
    ("softplus", {"beta": 2.0, "threshold": 5.0}, nn.Softplus, {"beta": 2.0, "threshold": 5.0}),
    ("hardtanh", {"min_val": -0.5, "max_val": 2.0}, nn.Hardtanh,
     {"min_val": -0.5, "max_val": 2.0}),
    ("relu6", {}, nn.ReLU6, {}),
    ("hardswish", {}, nn.Hardswish, {}),
    ("mish", {}, nn.Mish, {}),
    ("logsigmoid", {}, nn.LogSigmoid, {}),
]
IDS = [f"{name}-{'-'.join(map(str, kw.values()))}" for name, kw, _, _ in CASES]
#: Where the formulas change branch (and where PyTorch's gradient is defined there).
KINKS = [-3.0, -2.5, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 2.5, 3.0, 6.0, 20.0, 20.5]


def torch_fn(name: str):
    torch = pytest.importorskip("torch")
    return getattr(torch.nn.functional, name)


def both(name, kw, x: np.ndarray, weights: np.ndarray):
    """(value, gradient) of ``sum(f(x) * weights)`` from here and from PyTorch."""
    import torch
    a = mt.tensor(x, requires_grad=True)
    y = getattr(F, name)(a, **kw)
    (y * mt.tensor(weights)).sum().backward()
    t = torch.tensor(x, requires_grad=True)
    ty = torch_fn(name)(t, **kw)
    (ty * torch.tensor(weights)).sum().backward()
    return (y.numpy(), a.grad.numpy()), (ty.detach().numpy(), t.grad.numpy())


@pytest.mark.parametrize("name,kw,module,margs", CASES, ids=IDS)
@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=0, max_size=3), seed=st.integers(0, 2**16))
def test_values_and_gradients_match_torch(name, kw, module, margs, shape, seed):
    torch_fn(name)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-8, 8, shape)
    w = rng.uniform(0.5, 1.5, shape)
    mine, theirs = both(name, kw, x, w)
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name,kw,module,margs", CASES, ids=IDS)
def test_kinks_and_extremes_match_torch(name, kw, module, margs):
    """At each branch point PyTorch picks one side's gradient; so do these. Far out
    (+-1000) nothing overflows into NaN: the branch not taken never sees the input."""
    torch_fn(name)
    for dtype in (np.float64, np.float32):
        x = np.array(KINKS + [-k for k in KINKS] + [1000.0, -1000.0, 89.0, -89.0], dtype)
        mine, theirs = both(name, kw, x, np.ones_like(x))
        tol = 1e-12 if dtype == np.float64 else 2e-6
        for a, b in zip(mine, theirs):
            assert np.isfinite(a).all()
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,kw,module,margs", CASES, ids=IDS)
def test_gradcheck_float64(name, kw, module, margs):
    rng = np.random.default_rng(0)
    x = rng.uniform(-6, 6, (3, 4))
    x = x[np.min(np.abs(x[..., None] - np.array(KINKS + [-k for k in KINKS])), -1) > 0.01]
    a = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda v: getattr(F, name)(v, **kw), [a])


@pytest.mark.parametrize("name,kw,module,margs", CASES, ids=IDS)
def test_fusion_policy_both_sides(name, kw, module, margs):
    """Below the fusion threshold the op runs at once with NumPy; with threshold 0 it
    fuses -- the same values either way, and the forward with its sum is one kernel."""
    x = mt.tensor(np.random.default_rng(1).uniform(-5, 5, (7, 9)), dtype=mt.float32)
    eager = getattr(F, name)(x, **kw).numpy()
    with mt.fusion(threshold=0):
        with mt.count_kernels() as k:
            total = getattr(F, name)(x, **kw).sum()
        assert k.total == 1, k
        fused = getattr(F, name)(x, **kw).numpy()
    np.testing.assert_allclose(fused, eager, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(total.item(), eager.sum(dtype=np.float64), rtol=1e-5)


@pytest.mark.parametrize("name,kw,module,margs", CASES, ids=IDS)
def test_module_is_the_functional_form(name, kw, module, margs):
    x = mt.randn(4, 5)
    m = module(**margs)
    np.testing.assert_array_equal(m(x).numpy(), getattr(F, name)(x, **kw).numpy())
    assert len(m.state_dict()) == 0
    try:
        import torch
    except ImportError:
        return
    assert repr(m) == repr(getattr(torch.nn, module.__name__)(**margs))


@pytest.mark.parametrize("name,kw,module,margs", CASES, ids=IDS)
def test_fuses_with_the_arithmetic_around_it(name, kw, module, margs):
    """A layer's affine part before, a scale after and the sum: one kernel forward."""
    x = mt.randn(32, 16, requires_grad=True)
    with mt.fusion(threshold=0):
        with mt.count_kernels() as k:
            y = (getattr(F, name)(x * 2.0 + 1.0, **kw) * 3.0 - 1.0).sum()
        assert k.total == 1, k
        y.backward()
    assert np.isfinite(x.grad.numpy()).all()


def test_hardtanh_refuses_min_above_max():
    with pytest.raises(ValueError, match="min_val"):
        nn.Hardtanh(1.0, -1.0)
    with pytest.raises(ValueError, match="min_val"):
        F.hardtanh(mt.randn(3), 1.0, -1.0)


# ---- PReLU: a learnable slope ---------------------------------------------------------

@pytest.mark.parametrize("num_parameters,shape", [(1, (4, 3, 5)), (3, (4, 3, 5)),
                                                  (3, (2, 3)), (1, (6,)),
                                                  (1, ())])
def test_prelu_matches_torch(num_parameters, shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    m = nn.PReLU(num_parameters, init=0.1, dtype=np.float64)
    m.weight.value[...] = rng.uniform(0.05, 0.5, num_parameters)
    tm = torch.nn.PReLU(num_parameters, init=0.1, dtype=torch.float64)
    with torch.no_grad():
        tm.weight.copy_(torch.from_numpy(m.weight.numpy().copy()))
    a = mt.tensor(x, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    y, ty = m(a), tm(t)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(m.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-12)
    assert list(m.state_dict()) == list(tm.state_dict()) == ["weight"]


def test_prelu_gradcheck_and_defaults():
    m = nn.PReLU()
    assert m.weight.shape == (1,) and m.weight.numpy()[0] == np.float32(0.25)
    x = mt.tensor(np.array([[-1.5, 0.3], [2.0, -0.7]]), requires_grad=True)
    w = mt.tensor(np.array([0.2, 0.4]), requires_grad=True)
    assert mt.gradcheck(F.prelu, [x, w])


def test_prelu_refuses_a_channel_count_that_does_not_match():
    with pytest.raises(ValueError, match="channel"):
        F.prelu(mt.randn(2, 4), mt.ones(3))
    with pytest.raises(ValueError, match="channel"):
        F.prelu(mt.randn(3), mt.ones(3))  # a 1-D input has one channel, as in PyTorch

"""Modules in float16: ``half()`` and ``to(float16)``, forward, backward and optimizers.

A float16 module keeps float16 parameters, buffers and gradients; each op computes
in float32 and rounds its result to float16 (tensor/dtypes.py), so its values
follow the same module in float32 -- and PyTorch's ``.half()`` module -- to
float16's precision, never exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.nn.functional as F
from minitorch_exp import nn
from minitorch_exp.nn import optim

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
PATHS = {"fused": 0, "at once": 1 << 40}  # fusion thresholds: every op lazy, or at once


def mlp(seed: int = 0) -> nn.Module:
    mt.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.LayerNorm(16), nn.Linear(16, 4))


def batch(rng, n: int = 10):
    x = rng.standard_normal((n, 6)).astype(F16)
    return x, rng.integers(0, 4, n)


def grads(model, x, y) -> tuple[float, dict]:
    """The cross-entropy of ``model`` on ``(x, y)`` and each parameter's gradient."""
    for p in model.parameters():
        p.grad = None
    loss = F.cross_entropy(model(mt.tensor(x, dtype=model[0].weight.dtype)), mt.tensor(y))
    loss.backward()
    return loss.item(), {k: p.grad.numpy() for k, p in model.named_parameters()}


# ---- converting ------------------------------------------------------------------------

@pytest.mark.parametrize("convert", [lambda m: m.half(), lambda m: m.to(mt.float16),
                                     lambda m: m.to("half"), lambda m: m.to("cpu", mt.half)])
def test_half_converts_floating_parameters_and_buffers_only(convert):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    model(mt.randn(5, 3)).sum().backward()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    assert convert(model) is model
    state = model.state_dict()
    assert state["1.num_batches_tracked"].dtype == np.int64  # integers keep theirs
    for k, v in state.items():
        if k != "1.num_batches_tracked":
            assert v.dtype == F16, k
            np.testing.assert_array_equal(v.numpy(), before[k].astype(F16))
    assert all(p.grad.dtype == F16 for p in model.parameters())  # gradients follow


def test_half_then_float_round_trips_through_float16_values():
    model = mlp()
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.half().float()
    for k, v in model.state_dict().items():
        assert v.dtype == F32
        np.testing.assert_array_equal(v.numpy(), weights[k].astype(F16).astype(F32))
    model.to(mt.float16).double()
    assert all(p.dtype == np.float64 for p in model.parameters())


def test_a_half_state_dict_loads_into_a_float_module_and_back(tmp_path):
    half = mlp().half()
    mt.save(half.state_dict(), tmp_path / "h.npz")
    full = mlp(seed=1)
    full.load_state_dict(mt.load(tmp_path / "h.npz"))
    assert full[0].weight.dtype == F32
    np.testing.assert_array_equal(full[0].weight.numpy(), half[0].weight.numpy())


# ---- forward and backward ----------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_half_mlp_follows_the_same_mlp_in_float32(path):
    rng = np.random.default_rng(0)
    x, y = batch(rng)
    half = mlp().half()
    full = mlp().half().float()  # the same (float16-rounded) weights, in float32
    with mt.fusion(threshold=PATHS[path]):
        loss16, g16 = grads(half, x, y)
        loss32, g32 = grads(full, x, y)
    assert abs(loss16 - loss32) < 5e-3 * max(1.0, abs(loss32))
    for k, g in g16.items():
        assert g.dtype == F16, k
        scale = np.abs(g32[k]).max()
        np.testing.assert_allclose(g.astype(F32), g32[k], rtol=0, atol=1e-2 * scale + 1e-4)


def test_a_half_mlp_matches_pytorch_s_half_module():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, y = batch(rng)
    mine = mlp().half()
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),
                                 torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)).half()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in mine.state_dict().items()})
    loss, g = grads(mine, x, y)
    ref = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y))
    ref.backward()
    assert abs(loss - ref.item()) < 1e-2
    for k, p in theirs.named_parameters():
        want = p.grad.numpy()
        assert p.grad.dtype == torch.float16 and g[k].dtype == F16
        np.testing.assert_allclose(g[k].astype(F32), want.astype(F32), rtol=0,
                                   atol=2e-2 * np.abs(want.astype(F32)).max() + 1e-4)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_conv_and_norm_layers_run_and_keep_float16(path):
    mt.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 3, 6, 6)).astype(F16)
    weights = {k: v.numpy().copy() for k, v in model.half().state_dict().items()}
    with mt.fusion(threshold=PATHS[path]):
        xi = mt.tensor(x, requires_grad=True)
        out = model(xi)
        out.sum().backward()
        assert out.dtype == F16 and xi.grad.dtype == F16
        assert all(p.grad.dtype == F16 for p in model.parameters())
        assert model[1].running_mean.dtype == F16 and model[1].running_var.dtype == F16
        full = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
        full.load_state_dict({k: v.astype(F32) for k, v in weights.items()})
        xf = mt.tensor(x.astype(F32), requires_grad=True)
        ref = full(xf)
        ref.sum().backward()
    np.testing.assert_allclose(out.numpy().astype(F32), ref.numpy(), rtol=1e-2, atol=2e-2)
    np.testing.assert_allclose(xi.grad.numpy().astype(F32), xf.grad.numpy(), rtol=1e-2,
                               atol=2e-2 * np.abs(xf.grad.numpy()).max())


# ---- optimizers ----------------------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_step_float16_parameters_as_the_float32_ones(name):
    rng = np.random.default_rng(3)
    half, full = mlp().half(), mlp().half().float()
    opt16, opt32 = OPTIMIZERS[name](half.parameters()), OPTIMIZERS[name](full.parameters())
    for _ in range(3):
        x, y = batch(rng)
        for model, opt in ((half, opt16), (full, opt32)):
            opt.zero_grad()
            grads(model, x, y)
            opt.step()
    for i, ((k, p16), p32) in enumerate(zip(half.named_parameters(), full.parameters())):
        assert p16.dtype == F16, k
        state = opt16.state_dict()["state"][i]  # running statistics: float32 (optim.state_like)
        assert all(v.dtype == F32 for v in state.values() if isinstance(v, mt.Node)), k
        np.testing.assert_allclose(p16.numpy().astype(F32), p32.numpy(), rtol=0,
                                   atol=3e-2 * np.abs(p32.numpy()).max() + 1e-3)


def test_adam_leaves_a_parameter_with_zero_gradients_finite():
    """eps = 1e-8 is 0 in float16; Adam's update computes in float32, where it is not,
    so a gradient of 0 moves nothing instead of making 0/0 = nan."""
    w = mt.tensor(np.array([1.0, -2.0], F16), requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    for g in ([0.0, 0.5], [0.0, 0.0]):
        w.grad = mt.tensor(np.array(g, F16))
        opt.step()
    assert np.isfinite(w.numpy()).all() and w.numpy()[0] == 1.0 and w.dtype == F16

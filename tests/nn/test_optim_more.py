"""RMSprop, Adagrad, NAdam and LBFGS against torch.optim (parameter trajectories from
the same start, float64), one kernel per flat group for each step, and the schedules
ReduceLROnPlateau and OneCycleLR against PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import optim

SHAPES = [(4, 3), (3,), (2, 2, 2)]
STEPS = 10

CONFIGS = [
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, weight_decay=0.1, momentum=0.8)),
    ("RMSprop", dict(lr=0.01, centered=True, eps=1e-6)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.05)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.3)),
    ("NAdam", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
]
IDS = [f"{name}-{'-'.join(f'{k}{v}' for k, v in kw.items())}" for name, kw in CONFIGS]
# PyTorch keeps NAdam's running product of momenta in a float32 tensor: its float64
# trajectories drift from exact ones by ~1e-10 (here the product is a Python float).
RTOL = {"NAdam": 1e-8}


def _start(dtype):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def _grads(step: int, dtype):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
def test_trajectories_match_torch(name, kw, dtype):
    torch = pytest.importorskip("torch")
    values = _start(dtype)
    params = [nn.Parameter(v.copy()) for v in values]
    tparams = [torch.from_numpy(v.copy()).requires_grad_(True) for v in values]
    opt, topt = getattr(optim, name)(params, **kw), getattr(torch.optim, name)(tparams, **kw)
    rtol = RTOL.get(name, 1e-12) if dtype == np.float64 else 2e-5
    for t in range(STEPS):
        for p, tp, g in zip(params, tparams, _grads(t, dtype)):
            p.grad, tp.grad = mt.tensor(g), torch.from_numpy(g.copy())
        opt.step()
        topt.step()
        for p, tp in zip(params, tparams):
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=rtol,
                                       atol=rtol * 1e-2, err_msg=f"step {t}")
    assert sorted(opt.state_dict()["state"][0]) == sorted(topt.state_dict()["state"][0])


def _model_step(opt, model, x, y):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    with mt.fusion(threshold=0), mt.count_kernels() as k:  # every write a kernel
        opt.step()
    return k.total


@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
def test_a_step_is_one_kernel_per_flat_group(name, kw):
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x, y = mt.randn(4, 6), mt.tensor([0, 1, 2, 1])
    one = getattr(optim, name)(model.parameters(), **kw)
    first = _model_step(one, model, x, y)  # Adagrad's first fills its accumulator too
    assert first == 1 + bool(kw.get("initial_accumulator_value"))
    assert [_model_step(one, model, x, y) for _ in range(3)] == [1, 1, 1]
    layers = [model[0], model[2]]
    two = getattr(optim, name)([{"params": m.parameters()} for m in layers], **kw)
    _model_step(two, model, x, y)
    assert [_model_step(two, model, x, y) for _ in range(2)] == [2, 2]


@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
def test_flat_and_per_parameter_updates_agree(name, kw):
    runs = []
    for flat in (True, False):
        mt.manual_seed(3)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
        opt = getattr(optim, name)(model.parameters(), **kw)
        if not flat:
            opt._flat = [None] * len(opt._flat)
        for _ in range(4):
            _model_step(opt, model, mt.ones(4, 6), mt.tensor([0, 1, 2, 1]))
        runs.append([p.numpy().copy() for p in model.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_invalid_arguments_are_refused():
    p = [nn.Parameter(np.zeros(2))]
    for cls, kw in [(optim.RMSprop, dict(lr=-1)), (optim.RMSprop, dict(alpha=-0.1)),
                    (optim.Adagrad, dict(lr_decay=-1)), (optim.NAdam, dict(betas=(1.0, 0.9))),
                    (optim.NAdam, dict(momentum_decay=-1)), (optim.LBFGS, dict(lr=-1)),
                    (optim.LBFGS, dict(line_search_fn="armijo"))]:
        with pytest.raises(ValueError):
            cls(p, **kw)
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": p}, {"params": [nn.Parameter(np.zeros(1))]}])


# ---- LBFGS --------------------------------------------------------------------------

def _problem(lib):
    """A least-squares term, a quartic and a coupling: curved enough that the line
    search brackets and zooms."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 5)), rng.standard_normal(8)
    w, c = rng.standard_normal(5), rng.standard_normal(3)
    if lib is mt:
        return nn.Parameter(w), nn.Parameter(c), mt.tensor(a), mt.tensor(b)
    return (lib.tensor(w, requires_grad=True), lib.tensor(c, requires_grad=True),
            lib.tensor(a), lib.tensor(b))


def _lbfgs_run(lib, opt_cls, kw, steps, flat=True):
    w, c, a, b = _problem(lib)
    opt = opt_cls([w, c], **kw)
    if not flat:
        opt._flat = [None]

    def closure():
        opt.zero_grad()
        r = a @ w - b
        loss = (r * r).sum() + ((c - 1.0) ** 4).sum() + (w.tanh() * c[0]).sum()
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach()) for _ in range(steps)]
    evals = opt.state[0 if lib is mt else w]["func_evals"]
    return losses, [w.detach().numpy(), c.detach().numpy()], evals, opt


LBFGS_CONFIGS = [dict(), dict(lr=0.5, max_iter=5), dict(line_search_fn="strong_wolfe"),
                 dict(history_size=3, max_iter=7, line_search_fn="strong_wolfe"),
                 dict(max_iter=50, tolerance_change=1e-4, line_search_fn="strong_wolfe")]


@pytest.mark.parametrize("flat", [True, False], ids=["flat", "per-parameter"])
@pytest.mark.parametrize("kw", LBFGS_CONFIGS, ids=[str(k) for k in LBFGS_CONFIGS])
def test_lbfgs_matches_torch(kw, flat):
    torch = pytest.importorskip("torch")
    mine = _lbfgs_run(mt, optim.LBFGS, kw, 4, flat)
    theirs = _lbfgs_run(torch, torch.optim.LBFGS, kw, 4)
    np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-10)
    for a, b in zip(mine[1], theirs[1]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert mine[2] == theirs[2]  # the same number of closure calls
    assert (mine[3]._flat_group() is not None) == flat


def test_lbfgs_moves_the_flat_parameters_in_one_kernel():
    _, _, _, opt = _lbfgs_run(mt, optim.LBFGS, dict(max_iter=2), 1)
    d = opt.state[0]["d"]
    with mt.count_kernels() as k:
        opt._write_params(0.5 * d, "+=")
    assert k.total == 1


def test_lbfgs_reaches_the_minimum_of_a_quadratic():
    target = np.arange(6.0)
    x = nn.Parameter(np.zeros(6))
    opt = optim.LBFGS([x], line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((x - mt.tensor(target)) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    np.testing.assert_allclose(x.numpy(), target, atol=1e-8)


# ---- schedules --------------------------------------------------------------------

def _pair(torch, opt_name, **kw):
    p = [nn.Parameter(np.zeros(2))]
    tp = [torch.zeros(2, requires_grad=True)]
    return getattr(optim, opt_name)(p, **kw), getattr(torch.optim, opt_name)(tp, **kw)


PLATEAU = [dict(), dict(mode="max", factor=0.5, patience=1, threshold=0.05),
           dict(patience=0, threshold_mode="abs", threshold=0.3, cooldown=2, min_lr=0.02),
           dict(mode="max", threshold_mode="abs", patience=2, factor=0.3, eps=0.05)]


@pytest.mark.parametrize("kw", PLATEAU, ids=[str(k) for k in PLATEAU])
def test_reduce_lr_on_plateau_matches_torch(kw):
    torch = pytest.importorskip("torch")
    opt, topt = _pair(torch, "SGD", lr=1.0)
    mine = optim.ReduceLROnPlateau(opt, **kw)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
    metrics = np.r_[np.linspace(1, 0.5, 5), np.full(8, 0.5), np.linspace(0.5, 0.9, 10),
                    np.full(14, 0.2)]
    for m in metrics:
        mine.step(m)
        theirs.step(m)
        assert mine.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-15)
        assert mine.num_bad_epochs == theirs.num_bad_epochs
    assert mine.get_last_lr()[0] < 1.0


ONE_CYCLE = [("SGD", dict(lr=0.1, momentum=0.9), dict(max_lr=1.0, total_steps=40)),
             ("Adam", dict(lr=0.1), dict(max_lr=0.01, epochs=4, steps_per_epoch=7,
                                          anneal_strategy="linear", pct_start=0.4)),
             ("SGD", dict(lr=0.1, momentum=0.9), dict(max_lr=0.5, total_steps=30,
                                                     three_phase=True, div_factor=10.0)),
             ("SGD", dict(lr=0.1), dict(max_lr=0.5, total_steps=11, cycle_momentum=False,
                                        final_div_factor=100.0))]


@pytest.mark.parametrize("opt_name,okw,kw", ONE_CYCLE, ids=[str(c[2]) for c in ONE_CYCLE])
def test_one_cycle_matches_torch(opt_name, okw, kw):
    torch = pytest.importorskip("torch")
    opt, topt = _pair(torch, opt_name, **okw)
    mine = optim.OneCycleLR(opt, **kw)
    theirs = torch.optim.lr_scheduler.OneCycleLR(topt, **kw)
    key = "betas" if opt_name == "Adam" else "momentum"
    total = kw.get("total_steps") or kw["epochs"] * kw["steps_per_epoch"]
    for _ in range(total):
        assert opt.param_groups[0]["lr"] == pytest.approx(topt.param_groups[0]["lr"],
                                                          rel=1e-12)
        assert np.allclose(opt.param_groups[0][key], topt.param_groups[0][key], rtol=1e-12)
        opt.step()
        topt.step()
        mine.step()
        theirs.step()
    with pytest.raises(ValueError, match="total"):
        mine.step()


def test_schedules_refuse_bad_arguments():
    opt = optim.SGD([nn.Parameter(np.zeros(2))], lr=0.1)
    with pytest.raises(ValueError, match="Factor"):
        optim.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="total_steps"):
        optim.OneCycleLR(opt, max_lr=1.0)
    adagrad = optim.Adagrad([nn.Parameter(np.zeros(2))])
    with pytest.raises(ValueError, match="momentum"):
        optim.OneCycleLR(adagrad, max_lr=1.0, total_steps=5)
    assert mt.optim.lr_scheduler.OneCycleLR is optim.OneCycleLR

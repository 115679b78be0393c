"""Optimizers, schedulers and gradient clipping: NumPy references and torch.optim."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import optim

from ..devices import DEVICES, tolerance

SHAPES = [(4, 3), (3,), (2, 2, 2)]
STEPS = 5


def initial(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def grads(step: int, dtype=np.float64):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def make_params(values, device="cpu"):
    if device == "cpu":
        return [nn.Parameter(v.copy()) for v in values]
    return [nn.Parameter(mt.tensor(v, device=device)) for v in values]


def set_grads(params, gs):
    for p, g in zip(params, gs):
        p.grad = mt.tensor(g, device=p.device)


# ---- NumPy references (PyTorch's documented update rules) --------------------------

def sgd_reference(ps, steps, lr, momentum=0.0, dampening=0.0, nesterov=False,
                  weight_decay=0.0):
    ps = [p.copy() for p in ps]
    bufs = [None] * len(ps)
    for t in range(steps):
        for i, (p, g) in enumerate(zip(ps, grads(t, ps[0].dtype))):
            d = g + weight_decay * p
            if momentum:
                bufs[i] = d.copy() if bufs[i] is None else \
                    momentum * bufs[i] + (1 - dampening) * d
                d = d + momentum * bufs[i] if nesterov else bufs[i]
            p -= lr * d
    return ps


def adam_reference(ps, steps, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                   decoupled=False):
    b1, b2 = betas
    ps = [p.copy() for p in ps]
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    for t in range(1, steps + 1):
        for i, (p, g) in enumerate(zip(ps, grads(t - 1, ps[0].dtype))):
            if decoupled:
                p *= 1 - lr * weight_decay
            elif weight_decay:
                g = g + weight_decay * p
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mhat = m[i] / (1 - b1 ** t)
            vhat = v[i] / (1 - b2 ** t)
            p -= lr * mhat / (np.sqrt(vhat) + eps)
    return ps


CONFIGS = [
    ("sgd", optim.SGD, dict(lr=0.1), sgd_reference),
    ("sgd_wd", optim.SGD, dict(lr=0.1, weight_decay=0.01), sgd_reference),
    ("sgd_momentum", optim.SGD, dict(lr=0.05, momentum=0.9), sgd_reference),
    ("sgd_dampening", optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.3,
                                      weight_decay=0.02), sgd_reference),
    ("sgd_nesterov", optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True,
                                     weight_decay=0.01), sgd_reference),
    ("adam", optim.Adam, dict(lr=0.01), adam_reference),
    ("adam_wd", optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
     adam_reference),
    ("adamw", optim.AdamW, dict(lr=0.01, weight_decay=0.1),
     lambda ps, n, **kw: adam_reference(ps, n, decoupled=True, **kw)),
]
TORCH_NAMES = {optim.SGD: "SGD", optim.Adam: "Adam", optim.AdamW: "AdamW"}


def run(cls, kwargs, values, steps=STEPS, dtype=np.float64, device="cpu"):
    params = make_params(values, device)
    opt = cls(params, **kwargs)
    for t in range(steps):
        set_grads(params, grads(t, dtype))
        opt.step()
    return params, opt


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,cls,kwargs,reference", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_matches_numpy_reference(device, name, cls, kwargs, reference):
    values = initial()
    params, _ = run(cls, kwargs, values, device=device)
    want = reference(values, STEPS, **kwargs)
    rtol, atol = tolerance(device, 1e-12, 1e-14)
    for p, w, v in zip(params, want, values):
        assert p.dtype == np.float64 and p.device == mt.tensor.as_device(device)
        np.testing.assert_allclose(p.numpy(), w, rtol=rtol, atol=atol)
        assert np.abs(p.numpy() - v).min() > 1e-4  # every element moved


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,cls,kwargs,reference", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_matches_torch_optim(device, name, cls, kwargs, reference):
    torch = pytest.importorskip("torch")
    values = initial(np.float32)
    params = make_params(values, device)
    tparams = [torch.from_numpy(v.copy()).requires_grad_(True) for v in values]
    opt = cls(params, **kwargs)
    topt = getattr(torch.optim, TORCH_NAMES[cls])(tparams, **kwargs)
    for t in range(STEPS):
        gs = grads(t, np.float32)
        set_grads(params, gs)
        for tp, g in zip(tparams, gs):
            tp.grad = torch.from_numpy(g.copy())
        opt.step()
        topt.step()
        rtol, atol = tolerance(device, 2e-6, 2e-7)
        for p, tp in zip(params, tparams):
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"step {t}")


@pytest.mark.parametrize("device", DEVICES)
def test_step_builds_no_graph_and_skips_params_without_grad(device):
    params = make_params(initial(), device)
    before = [p.numpy().copy() for p in params]
    opt = optim.Adam(params, lr=0.1)
    params[0].grad = mt.tensor(grads(0)[0], device=device)
    opt.step()  # grad mode is on: the update must still not be recorded
    for p in params:
        assert p.is_leaf and p.grad_fn is None and p.requires_grad
        assert isinstance(p, nn.Parameter)
    assert not np.array_equal(params[0].numpy(), before[0])
    np.testing.assert_array_equal(params[1].numpy(), before[1])  # no grad: untouched
    assert 1 not in opt.state  # and no state for it
    # a model trained with it stays trainable
    params[0].grad = None
    mt.sum(params[0] * params[0]).backward()
    np.testing.assert_allclose(params[0].grad.numpy(), 2 * params[0].numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_step_updates_in_place(device):
    params = make_params(initial(), device)
    opt = optim.SGD(params, lr=0.1, momentum=0.9)  # may move params into one flat buffer
    storage = [p.value.storage for p in params]
    for t in range(2):
        set_grads(params, grads(t))
        opt.step()
    assert [p.value.storage for p in params] == storage


@pytest.mark.parametrize("device", DEVICES)
def test_zero_grad(device):
    params = make_params(initial(), device)
    opt = optim.SGD(params, lr=0.1)
    set_grads(params, grads(0))
    opt.zero_grad(set_to_none=False)
    for p in params:
        assert p.grad is not None and not p.grad.numpy().any()
    opt.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("device", DEVICES)
def test_param_groups_have_their_own_lr(device):
    values = initial()
    params = make_params(values, device)
    opt = optim.SGD([{"params": params[:1], "lr": 1.0}, {"params": params[1:]}], lr=0.1)
    set_grads(params, grads(0))
    opt.step()
    g = grads(0)
    np.testing.assert_allclose(params[0].numpy(), values[0] - 1.0 * g[0])
    np.testing.assert_allclose(params[1].numpy(), values[1] - 0.1 * g[1])


def test_invalid_arguments():
    p = make_params(initial())
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.SGD(p, lr=-1.0)
    with pytest.raises(ValueError):
        optim.Adam(p, betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="requires_grad"):
        optim.SGD([mt.ones(3)], lr=0.1)


# ---- state dicts -----------------------------------------------------------------

@pytest.mark.parametrize("name,cls,kwargs,reference", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_state_dict_round_trip_continues_identically(name, cls, kwargs, reference, tmp_path):
    values = initial(np.float32)
    params, opt = run(cls, kwargs, values, steps=3, dtype=np.float32)
    path = tmp_path / "opt.npz"
    mt.save({"params": [p.detach() for p in params], "opt": opt.state_dict()}, path)
    loaded = mt.load(path)
    params2 = make_params([p.numpy() for p in loaded["params"]])
    opt2 = cls(params2, lr=123.0)  # hyper-parameters come back from the state dict
    opt2.load_state_dict(loaded["opt"])
    assert opt2.param_groups[0]["lr"] == kwargs["lr"]
    for t in range(3, 6):
        gs = grads(t, np.float32)
        set_grads(params, gs)
        set_grads(params2, gs)
        opt.step()
        opt2.step()
    for p, q in zip(params, params2):
        assert p.numpy().tobytes() == q.numpy().tobytes()


def test_state_dict_is_a_snapshot_after_load():
    params, opt = run(optim.SGD, dict(lr=0.1, momentum=0.9), initial(), steps=2)
    params2 = make_params([p.numpy() for p in params])
    opt2 = optim.SGD(params2, lr=0.1, momentum=0.9)
    opt2.load_state_dict(opt.state_dict())
    buf = opt.state[0]["momentum_buffer"]
    buf2 = opt2.state[0]["momentum_buffer"]
    assert buf2.storage is not buf.storage  # the loaded state is a copy
    np.testing.assert_array_equal(buf.numpy(), buf2.numpy())


def test_load_state_dict_rejects_a_different_layout():
    _, opt = run(optim.SGD, dict(lr=0.1, momentum=0.9), initial(), steps=1)
    other = optim.SGD(make_params(initial())[:2], lr=0.1)
    with pytest.raises(ValueError, match="different number"):
        other.load_state_dict(opt.state_dict())
    # same count, different shapes: a clear error, and the optimizer is left as it was
    values = initial()
    values[0] = np.zeros((3, 4))
    params = make_params(values)
    other = optim.SGD(params, lr=0.5, momentum=0.5)
    set_grads(params, [np.ones_like(v) for v in values])
    other.step()
    with pytest.raises(ValueError, match=r"parameter 0 has shape \(4, 3\).*\(3, 4\)"):
        other.load_state_dict(opt.state_dict())
    assert other.param_groups[0]["lr"] == 0.5
    assert sorted(other.state) == [0, 1, 2]
    np.testing.assert_array_equal(other.state[0]["momentum_buffer"].numpy(), np.ones((3, 4)))


# ---- schedulers -----------------------------------------------------------------

def lrs(sched, epochs):
    out = [sched.get_last_lr()[0]]
    for _ in range(epochs):
        sched.step()
        out.append(sched.get_last_lr()[0])
    return out


def test_step_lr_values():
    opt = optim.SGD(make_params(initial()), lr=1.0)
    got = lrs(optim.StepLR(opt, step_size=3, gamma=0.5), 7)
    np.testing.assert_allclose(got, [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25])
    assert opt.param_groups[0]["lr"] == got[-1]


def test_cosine_values():
    opt = optim.SGD(make_params(initial()), lr=1.0)
    got = lrs(optim.CosineAnnealingLR(opt, T_max=4, eta_min=0.1), 4)
    want = [0.1 + 0.9 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(5)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[-1] == pytest.approx(0.1)


@pytest.mark.parametrize("kind", ["step", "cosine"])
def test_schedulers_match_torch(kind):
    torch = pytest.importorskip("torch")
    opt = optim.SGD(make_params(initial()), lr=0.3, momentum=0.9)
    topt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.3, momentum=0.9)
    if kind == "step":
        mine = optim.StepLR(opt, step_size=4, gamma=0.3)
        theirs = torch.optim.lr_scheduler.StepLR(topt, step_size=4, gamma=0.3)
    else:
        mine = optim.CosineAnnealingLR(opt, T_max=6, eta_min=0.01)
        theirs = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=6, eta_min=0.01)
    want = [theirs.get_last_lr()[0]]
    for _ in range(15):  # past T_max too
        topt.step()
        theirs.step()
        want.append(theirs.get_last_lr()[0])
    np.testing.assert_allclose(lrs(mine, 15), want, rtol=1e-9, atol=1e-12)


def test_scheduler_state_dict_resumes():
    opt = optim.SGD(make_params(initial()), lr=1.0)
    sched = optim.CosineAnnealingLR(opt, T_max=10)
    lrs(sched, 3)
    state = sched.state_dict()
    opt2 = optim.SGD(make_params(initial()), lr=1.0)
    opt2.load_state_dict(opt.state_dict())
    sched2 = optim.CosineAnnealingLR(opt2, T_max=10)
    sched2.load_state_dict(state)
    assert lrs(sched, 4) == lrs(sched2, 4)


# ---- gradient clipping ----------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_numpy_and_torch(device, max_norm):
    values = initial(np.float32)
    params = make_params(values, device)
    gs = grads(0, np.float32)
    set_grads(params, gs)
    total = optim.clip_grad_norm_(params, max_norm)
    want = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in gs))
    rtol, _ = tolerance(device, 1e-6, 0.0)
    assert total == pytest.approx(want, rel=rtol)
    scale = min(1.0, max_norm / (want + 1e-6))
    for p, g in zip(params, gs):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=rtol)
    clipped = math.sqrt(sum(float((p.grad.numpy().astype(np.float64) ** 2).sum())
                            for p in params))
    assert clipped <= max_norm * (1 + rtol)
    torch = pytest.importorskip("torch")
    tparams = [torch.from_numpy(v.copy()).requires_grad_(True) for v in values]
    for tp, g in zip(tparams, gs):
        tp.grad = torch.from_numpy(g.copy())
    ttotal = torch.nn.utils.clip_grad_norm_(tparams, max_norm)
    assert total == pytest.approx(ttotal.item(), rel=rtol)
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_clip_grad_norm_single_tensor_and_no_grads(device):
    p = nn.Parameter(mt.ones(2, 2, device=device))
    p.grad = mt.tensor(np.full((2, 2), 3.0, np.float32), device=device)  # norm 6
    assert optim.clip_grad_norm_(p, 1.0) == pytest.approx(6.0)
    np.testing.assert_allclose(p.grad.numpy(), 0.5 / (1 + 1e-6 / 6), rtol=1e-6)
    q = nn.Parameter(mt.ones(3, device=device))
    assert optim.clip_grad_norm_([q], 1.0) == 0.0


def _flat_setup(opt_cls, device="cpu", **kw):
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to(device)
    opt = opt_cls(model.parameters(), **kw)
    x = mt.randn(4, 6, device=device)
    y = mt.tensor([0, 1, 2, 1])
    return model, opt, x, y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt_cls, kw, statements", [
    (optim.SGD, dict(lr=0.1, momentum=0.9), 2),   # buf update + param update, whole model
    (optim.Adam, dict(lr=1e-2), 3),               # m, v, then the parameters
])
def test_flat_update_runs_a_fixed_number_of_kernels(device, opt_cls, kw, statements):
    model, opt, x, y = _flat_setup(opt_cls, device, **kw)
    # On the CPU the statements share one loop (assign_all); on cuda they run in turn.
    kernels = 1 if device == "cpu" else statements
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        with mt.count_kernels(device) as k:
            opt.step()
        assert k.total == kernels, k
    state = opt.state_dict()["state"]
    assert all(not key.startswith("_") for entry in state.values() for key in entry)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt_cls, kw", [(optim.SGD, dict(lr=0.1, momentum=0.9)),
                                         (optim.Adam, dict(lr=1e-2))])
def test_flat_and_per_parameter_updates_agree(device, opt_cls, kw):
    runs = []
    for flat in (True, False):
        mt.manual_seed(3)
        model, opt, x, y = _flat_setup(opt_cls, device, **kw)
        if not flat:
            opt._flat = [None] * len(opt._flat)
        for _ in range(4):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        runs.append([p.numpy().copy() for p in model.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_a_second_optimizer_over_the_same_parameters_is_flat_too():
    """A new optimizer for a model another one flattened (fine-tuning with Adam after
    SGD) updates in one kernel as well; the first, still usable, goes per parameter.
    Both agree with per-parameter updates of the same steps."""
    runs = []
    for flat in (True, False):
        mt.manual_seed(5)
        model, sgd, x, y = _flat_setup(optim.SGD, lr=0.1, momentum=0.9)
        adam = optim.Adam(model.parameters(), lr=1e-2)
        if not flat:
            sgd._flat = [None] * len(sgd._flat)
            adam._flat = [None] * len(adam._flat)
        for opt in (sgd, adam, adam, sgd):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            with mt.count_kernels() as k:
                opt.step()
            if flat and opt is adam:
                assert k.total == 1, k
        runs.append([p.numpy().copy() for p in model.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_a_captured_step_is_not_stale_after_another_optimizer_moves_the_parameters():
    """Making a second optimizer moves the parameters into its flat buffers; a step
    captured before then records itself again instead of replaying the old buffers."""
    runs = []
    for second in (False, True):
        mt.manual_seed(0)
        model, opt, x, y = _flat_setup(optim.SGD, lr=0.1, momentum=0.9)

        def step(x, y, model=model, opt=opt):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

        captured = mt.capture(step)
        for _ in range(4):
            captured(x, y)
        if second:
            optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(3):
            captured(x, y)
        runs.append([p.numpy().copy() for p in model.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)

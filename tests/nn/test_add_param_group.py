"""``Optimizer.add_param_group``: a group added after construction is stepped like the
others (its own flat buffers, its defaults from the optimizer), as in torch.optim.

Fine-tuning is the use: a frozen head is unfrozen and added part-way through. The
runs are compared with torch.optim where torch is installed, and with a NumPy
SGD update written out by hand everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import optim

from ..devices import DEVICES

STEPS_BEFORE, STEPS_AFTER = 3, 4


# ---- a frozen head unfrozen and added, against torch.optim -------------------------------

# name -> (our class, torch's class name, constructor kwargs, the added group's extras)
CONFIGS = {
    "sgd": (optim.SGD, "SGD", dict(lr=0.1), dict(lr=0.05)),
    "sgd_momentum": (optim.SGD, "SGD", dict(lr=0.1, momentum=0.9),
                     dict(lr=0.05, dampening=0.1)),
    "sgd_nesterov_wd": (optim.SGD, "SGD",
                        dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
                        dict(lr=0.05)),
    "adam": (optim.Adam, "Adam", dict(lr=0.01), dict(lr=0.02, betas=(0.8, 0.99))),
    "adam_wd": (optim.Adam, "Adam", dict(lr=0.01, weight_decay=0.1), dict(eps=1e-6)),
    "adamw": (optim.AdamW, "AdamW", dict(lr=0.01), dict(lr=0.03, weight_decay=0.05)),
    "adadelta": (optim.Adadelta, "Adadelta", dict(lr=1.0), dict(lr=0.5, rho=0.8)),
    "adadelta_wd": (optim.Adadelta, "Adadelta", dict(lr=1.0, weight_decay=0.1),
                    dict(eps=1e-4)),
    "rmsprop": (optim.RMSprop, "RMSprop", dict(lr=0.01, momentum=0.9, centered=True),
                dict(lr=0.02, alpha=0.9)),
    "adagrad": (optim.Adagrad, "Adagrad", dict(lr=0.1, lr_decay=0.01),
                dict(lr=0.05, weight_decay=0.1)),
    "nadam": (optim.NAdam, "NAdam", dict(lr=0.01), dict(lr=0.02, momentum_decay=0.003)),
}
#: PyTorch's LBFGS takes one parameter group only ("doesn't support per-parameter
#: options"), so adding one is no test for it.
ONE_GROUP_ONLY = {optim.LBFGS}


def test_every_optimizer_in_optim_is_covered():
    classes = {v for v in vars(optim).values()
               if isinstance(v, type) and issubclass(v, optim.Optimizer) and v is not
               optim.Optimizer}
    assert classes - ONE_GROUP_ONLY <= {cls for cls, *_ in CONFIGS.values()}


def initial_weights(seed: int = 0) -> list[np.ndarray]:
    """body weight, body bias, head weight, head bias."""
    rng = np.random.default_rng(seed)
    shapes = [(8, 4), (8,), (3, 8), (3,)]
    return [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in shapes]


def batches(steps: int):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((16, 4)).astype(np.float32),
             rng.standard_normal((16, 3)).astype(np.float32)) for _ in range(steps)]


def our_run(name: str) -> list[np.ndarray]:
    cls, _, kwargs, extra = CONFIGS[name]
    w1, b1, w2, b2 = (nn.Parameter(w.copy()) for w in initial_weights())
    head = [w2, b2]
    for p in head:
        p.requires_grad_(False)
    opt = cls([w1, b1], **kwargs)
    for step, (x, y) in enumerate(batches(STEPS_BEFORE + STEPS_AFTER)):
        if step == STEPS_BEFORE:
            for p in head:
                p.requires_grad_(True)
            opt.add_param_group({"params": head, **extra})
        opt.zero_grad()
        hidden = (mt.tensor(x) @ w1.T + b1).relu()
        loss = ((hidden @ w2.T + b2 - mt.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
    return [p.numpy().copy() for p in (w1, b1, w2, b2)]


def torch_run(torch, name: str) -> list[np.ndarray]:
    _, torch_name, kwargs, extra = CONFIGS[name]
    w1, b1, w2, b2 = (torch.tensor(w, requires_grad=True) for w in initial_weights())
    head = [w2, b2]
    for p in head:
        p.requires_grad_(False)
    opt = getattr(torch.optim, torch_name)([w1, b1], **kwargs)
    for step, (x, y) in enumerate(batches(STEPS_BEFORE + STEPS_AFTER)):
        if step == STEPS_BEFORE:
            for p in head:
                p.requires_grad_(True)
            opt.add_param_group({"params": head, **extra})
        opt.zero_grad()
        hidden = (torch.tensor(x) @ w1.T + b1).relu()
        loss = ((hidden @ w2.T + b2 - torch.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
    return [p.detach().numpy().copy() for p in (w1, b1, w2, b2)]


@pytest.mark.parametrize("name", CONFIGS)
def test_an_unfrozen_head_added_later_trains_as_in_torch(name):
    torch = pytest.importorskip("torch")
    ours, theirs = our_run(name), torch_run(torch, name)
    start = initial_weights()
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(ours[2], start[2])  # the head moved


@pytest.mark.parametrize("name", CONFIGS)
def test_the_added_group_trains_as_if_it_had_been_there_from_the_start(name):
    """Without torch: the head's steps after joining equal those of an optimizer
    given both groups from the start, with the body held back before."""
    cls, _, kwargs, extra = CONFIGS[name]
    ours = our_run(name)
    w1, b1, w2, b2 = (nn.Parameter(w.copy()) for w in initial_weights())
    body_opt = cls([w1, b1], **kwargs)
    for x, y in batches(STEPS_BEFORE):
        body_opt.zero_grad()
        hidden = (mt.tensor(x) @ w1.T + b1).relu()
        ((hidden @ w2.T + b2 - mt.tensor(y)) ** 2).mean().backward()
        body_opt.step()
    assert np.array_equal(w2.numpy(), initial_weights()[2])
    head_opt = cls([{"params": [w2, b2], **extra}], **kwargs)
    for x, y in batches(STEPS_BEFORE + STEPS_AFTER)[STEPS_BEFORE:]:
        body_opt.zero_grad()
        head_opt.zero_grad()
        hidden = (mt.tensor(x) @ w1.T + b1).relu()
        ((hidden @ w2.T + b2 - mt.tensor(y)) ** 2).mean().backward()
        body_opt.step()
        head_opt.step()
    for got, want in zip(ours, (w1, b1, w2, b2)):
        np.testing.assert_array_equal(got, want.numpy())


# ---- SGD with momentum written out by hand --------------------------------------------------

def grad_values(step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(10 + step)
    return [rng.standard_normal(s).astype(np.float64) for s in ((3, 2), (4,))]


def set_grads(params, step: int) -> None:
    for p, g in zip(params, grad_values(step)):
        p.grad = mt.tensor(g, device=p.device)


def added_by(how: str, opt, group: dict) -> None:
    if how == "add_param_group":
        opt.add_param_group(group)
    elif how == "append":
        opt.param_groups.append(group)
    elif how == "extend":
        opt.param_groups.extend([group])
    else:
        opt.param_groups = [*opt.param_groups, group]


ADDING = ["add_param_group", "append", "extend", "assign"]


@pytest.mark.parametrize("how", ADDING)
@pytest.mark.parametrize("device", DEVICES)
def test_sgd_momentum_by_hand(device, how):
    """a trains from the start (lr 0.1); b joins after 2 steps with lr 0.05 and the
    optimizer's momentum 0.9 (not given in its group: a default)."""
    a0, b0 = (np.arange(n, dtype=np.float64).reshape(s) / 10
              for n, s in ((6, (3, 2)), (4, (4,))))
    a, b = (nn.Parameter(mt.tensor(v, device=device)) for v in (a0, b0))
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    want_a, want_b, buf_a, buf_b = a0.copy(), b0.copy(), None, None
    for step in range(5):
        if step == 2:
            added_by(how, opt, {"params": [b], "lr": 0.05})
        set_grads([a, b] if step >= 2 else [a], step)
        opt.step()
        if step == 2:  # a group appended directly is completed by the step
            assert opt.param_groups[1]["momentum"] == 0.9  # filled from the defaults
            assert opt.param_groups[1]["lr"] == 0.05
        ga, gb = grad_values(step)
        buf_a = ga.copy() if buf_a is None else 0.9 * buf_a + ga  # the first step: g
        want_a -= 0.1 * buf_a
        if step >= 2:
            buf_b = gb.copy() if buf_b is None else 0.9 * buf_b + gb
            want_b -= 0.05 * buf_b
        np.testing.assert_allclose(a.numpy(), want_a, rtol=1e-12)
        np.testing.assert_allclose(b.numpy(), want_b, rtol=1e-12)


@pytest.mark.parametrize("how", ADDING)
def test_the_added_group_is_one_flat_update(how):
    """Stepping with a group added later takes as many kernels as with both from the start."""
    def params():
        return [nn.Parameter(np.ones(s)) for s in ((3, 2), (4,))]

    a, b = params()
    late = optim.SGD([a], lr=0.1, momentum=0.9)
    added_by(how, late, {"params": [b]})
    c, d = params()
    early = optim.SGD([{"params": [c]}, {"params": [d]}], lr=0.1, momentum=0.9)
    counts = []
    for opt, ps in ((late, [a, b]), (early, [c, d])):
        for step in range(3):
            set_grads(ps, step)
            with mt.count_kernels() as k:
                opt.step()
        counts.append(k.total)
    assert counts[0] == counts[1], counts
    np.testing.assert_array_equal(a.numpy(), c.numpy())
    np.testing.assert_array_equal(b.numpy(), d.numpy())


# ---- what add_param_group accepts -----------------------------------------------------------

def test_a_parameter_in_two_groups_is_an_error_naming_it():
    a, b = nn.Parameter(np.ones(3)), nn.Parameter(np.ones((2, 5)))
    opt = optim.SGD([a, b], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter "
                                         r"group.*parameter 1 of the new group.*\(2, 5\)"):
        opt.add_param_group({"params": [nn.Parameter(np.ones(1)), b]})
    assert len(opt.param_groups) == 1  # nothing changed
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": [a]}, {"params": [b, a]}], lr=0.1)


def test_a_duplicate_appended_directly_is_the_same_error_at_the_next_step():
    a = nn.Parameter(np.ones(3))
    opt = optim.SGD([a], lr=0.1)
    opt.param_groups.append({"params": [a]})
    a.grad = mt.tensor(np.ones(3))
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.step()


def test_params_given_as_one_tensor_or_an_unordered_set():
    a, b = nn.Parameter(np.ones(3)), nn.Parameter(np.ones(2))
    opt = optim.SGD([a], lr=0.1)
    opt.add_param_group({"params": b})  # one tensor, as torch allows
    assert opt.param_groups[1]["params"] == [b]
    with pytest.raises(TypeError, match="ordered"):
        opt.add_param_group({"params": {nn.Parameter(np.ones(2))}})
    with pytest.raises(TypeError, match="requires_grad"):
        opt.add_param_group({"params": [mt.tensor(np.ones(2))]})
    with pytest.raises(TypeError, match="dict"):
        opt.add_param_group([nn.Parameter(np.ones(2))])
    assert len(opt.param_groups) == 2


def test_the_group_dict_is_kept_and_given_the_defaults():
    a, b = nn.Parameter(np.ones(3)), nn.Parameter(np.ones(2))
    opt = optim.Adam([a], lr=0.01, betas=(0.8, 0.9))
    group = {"params": (b,), "eps": 1e-3}
    opt.add_param_group(group)
    assert opt.param_groups[-1] is group  # as torch: the dict itself, completed
    assert group == {"params": [b], "lr": 0.01, "betas": (0.8, 0.9), "eps": 1e-3,
                     "weight_decay": 0.0}


def test_removing_or_reordering_groups_is_a_clear_error():
    a, b = nn.Parameter(np.ones(3)), nn.Parameter(np.ones(2))
    opt = optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
    opt.param_groups.reverse()
    a.grad, b.grad = mt.tensor(np.ones(3)), mt.tensor(np.ones(2))
    with pytest.raises(ValueError, match="add_param_group"):
        opt.step()


# ---- checkpoints ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sgd_momentum", "adam", "adamw"])
def test_state_dict_round_trip_with_an_added_group(name):
    cls, _, kwargs, extra = CONFIGS[name]

    def build(values):
        a, b = (nn.Parameter(v.copy()) for v in values)
        opt = cls([a], **kwargs)
        opt.add_param_group({"params": [b], **extra})
        return opt, [a, b]

    values = [np.linspace(-1, 1, 6).reshape(3, 2), np.linspace(0, 1, 4)]
    first, ps = build(values)
    for step in range(3):
        set_grads(ps, step)
        first.step()
    saved = first.state_dict()
    assert [g["params"] for g in saved["param_groups"]] == [[0], [1]]
    assert saved["param_groups"][1] == {**first.defaults, **extra, "params": [1]}
    assert set(saved["state"]) == {0, 1}

    second, qs = build(values)
    for p, q in zip(ps, qs):
        q.data[...] = p.data
    second.load_state_dict(saved)
    for step in range(3, 6):
        for opt, params in ((first, ps), (second, qs)):
            set_grads(params, step)
            opt.step()
    for p, q in zip(ps, qs):
        np.testing.assert_array_equal(p.numpy(), q.numpy())

    fewer = cls([nn.Parameter(values[0].copy())], **kwargs)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        fewer.load_state_dict(saved)


def test_params_from_a_generator_are_all_taken():
    a, b, c = (nn.Parameter(np.ones(2)) for _ in range(3))
    opt = optim.SGD([a], lr=0.5)
    opt.add_param_group({"params": (p for p in (b, c))})
    assert opt.param_groups[1]["params"] == [b, c]
    for p in (a, b, c):
        p.grad = mt.tensor(np.ones(2))
    opt.step()
    for p in (a, b, c):
        np.testing.assert_array_equal(p.numpy(), [0.5, 0.5])

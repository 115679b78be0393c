"""RMSprop, Adagrad and NAdam: per-element step sizes from running gradient statistics.

Each ``_update`` is one ``assign_all`` of a few statements, so a step over a flat group
(``optim.FlatGroup``: the whole model's parameters in one buffer) is one kernel on the
CPU, as SGD's and Adam's are; the statements read the ones before them. The formulas
are PyTorch's step for step (tests/nn/test_optim_more.py follows its trajectories).
"""

from __future__ import annotations

from ..tensor.engine import assign_all
from ..tensor.expr import sqrt
from .optim import Optimizer, state_like


def _begin(state: dict, p, **buffers: float) -> int:
    """Count a step in ``state``, first making each named buffer (``p``'s shape, filled
    with the given value); returns the step number, from 1."""
    if "step" not in state:
        state["step"] = 0
        for name, value in buffers.items():
            t = state[name] = state_like(p)
            if value:
                t[...] = value
    state["step"] += 1
    return state["step"]


def _with_decay(g, p, weight_decay: float):
    """The gradient with L2 weight decay added (``g + wd * p``), as PyTorch's."""
    return g + weight_decay * p if weight_decay else g


def _lerp(a, b, w: float):
    """``a + w (b - a)``, written as ``torch.lerp`` rounds it (from ``b``'s side when
    ``w >= 0.5``), so float64 trajectories agree to the last bits."""
    return a + w * (b - a) if w < 0.5 else b - (1.0 - w) * (b - a)


def _check(name: str, **values: float) -> None:
    bad = {k: v for k, v in values.items() if not v >= 0}
    if bad:
        raise ValueError(f"{name}: invalid " + ", ".join(f"{k}={v}" for k, v in bad.items()))


class RMSprop(Optimizer):
    """Divides the gradient by a running root mean square of it (Hinton's lecture 6e);
    ``centered`` subtracts the running mean first, ``momentum`` accumulates the steps."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False):
        _check("RMSprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
               momentum=momentum)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered))

    def _update(self, p, g, state, group):
        alpha, eps, mom = group["alpha"], group["eps"], group["momentum"]
        buffers = dict(square_avg=0.0)
        if mom > 0:
            buffers["momentum_buffer"] = 0.0
        if group["centered"]:
            buffers["grad_avg"] = 0.0
        _begin(state, p, **buffers)
        grad = _with_decay(g, p, group["weight_decay"])
        sq = state["square_avg"]
        statements = [(sq, alpha * sq + (1.0 - alpha) * grad * grad)]
        if group["centered"]:
            ga = state["grad_avg"]
            statements.append((ga, _lerp(ga, grad, 1.0 - alpha)))
            avg = sqrt(sq - ga * ga) + eps
        else:
            avg = sqrt(sq) + eps
        if mom > 0:
            buf = state["momentum_buffer"]
            statements += [(buf, mom * buf + grad / avg), (p, group["lr"] * buf, "-=")]
        else:
            statements.append((p, group["lr"] * grad / avg, "-="))
        assign_all(statements)


class Adagrad(Optimizer):
    """Divides each step by the root of the summed squared gradients (Duchi et al. 2011);
    the rate decays as ``lr / (1 + (step - 1) lr_decay)``."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10):
        _check("Adagrad", lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
               initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps))

    def _update(self, p, g, state, group):
        step = _begin(state, p, sum=group["initial_accumulator_value"])
        grad = _with_decay(g, p, group["weight_decay"])
        clr = group["lr"] / (1.0 + (step - 1) * group["lr_decay"])
        s = state["sum"]
        assign_all([(s, s + grad * grad),
                    (p, clr * grad / (sqrt(s) + group["eps"]), "-=")])


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat 2016): the momentum coefficient warms up as
    ``mu_t = beta1 (1 - 0.5 * 0.96 ** (t * momentum_decay))``, and each step mixes the
    gradient and the running mean by ``mu_t`` and ``mu_{t+1}``."""

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False):
        _check("NAdam", lr=lr, eps=eps, weight_decay=weight_decay,
               momentum_decay=momentum_decay)
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"NAdam: invalid betas={betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _update(self, p, g, state, group):
        lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
        step = _begin(state, p, exp_avg=0.0, exp_avg_sq=0.0)
        decoupled = group["decoupled_weight_decay"]
        decay = [(p, p * (1.0 - lr * wd))] if wd and decoupled else []
        grad = g if decoupled else _with_decay(g, p, wd)
        mu, mu_next = (b1 * (1.0 - 0.5 * 0.96 ** (t * group["momentum_decay"]))
                       for t in (step, step + 1))
        state["mu_product"] = product = state.get("mu_product", 1.0) * mu
        m, v = state["exp_avg"], state["exp_avg_sq"]
        denom = sqrt(v / (1.0 - b2 ** step)) + group["eps"]
        assign_all([*decay,
                    (m, _lerp(m, grad, 1.0 - b1)),
                    (v, b2 * v + (1.0 - b2) * grad * grad),
                    (p, (lr * (1.0 - mu) / (1.0 - product)) * grad / denom, "-="),
                    (p, (lr * mu_next / (1.0 - product * mu_next)) * m / denom, "-=")])


__all__ = ["Adagrad", "NAdam", "RMSprop"]

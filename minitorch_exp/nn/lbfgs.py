"""L-BFGS with PyTorch's closure API, and the strong-Wolfe line search it may use.

The algorithm is Nocedal and Wright's (*Numerical Optimization*, 2nd ed.): algorithm
7.4, the two-loop recursion, for the direction from the last ``history_size`` steps
and gradient changes; algorithms 3.5 and 3.6 (bracketing, then zooming with cubic
interpolation) for the step length. Its order of evaluations, safeguards and stopping
tests are PyTorch's, so both take the same steps from the same start
(tests/nn/test_optim_more.py).

Everything works on one flat vector of all the parameters: the optimizer's flat
buffer (``optim.FlatGroup``) when it holds them and their gradients, so that moving
the parameters is one kernel, else a vector gathered parameter by parameter.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..node.grad_mode import enable_grad
from ..tensor.creation import new_empty
from ..tensor.engine import realize
from .optim import Optimizer


def _dot(a, b) -> float:
    return float((a * b).sum().item())


def _max_abs(a) -> float:
    return float(abs(a).max().item())


def cubic_minimum(t1: float, f1: float, g1: float, t2: float, f2: float, g2: float,
                  bounds: tuple[float, float] | None = None) -> float:
    """The minimum of the cubic through ``(t, f, f')`` at two points, clamped to
    ``bounds`` (the two points by default); their midpoint when the cubic has none."""
    lo, hi = bounds if bounds is not None else (min(t1, t2), max(t1, t2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (t1 - t2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2
    d2 = math.sqrt(disc)
    if t1 <= t2:
        t = t2 - (t2 - t1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        t = t1 - (t1 - t2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(t, lo), hi)


class Trial(NamedTuple):
    """One point of a line search: step ``t``, loss ``f``, gradient ``g``, and the
    directional derivative ``gtd`` (the gradient along the search direction)."""
    t: float
    f: float
    g: object
    gtd: float


def strong_wolfe(evaluate, start: Trial, t: float, d_max: float, c1: float = 1e-4,
                 c2: float = 0.9, tolerance_change: float = 1e-9, max_ls: int = 25):
    """A step length satisfying the strong Wolfe conditions along a direction whose
    largest entry is ``d_max``. ``evaluate(t)`` returns ``(f, g, gtd)`` at step ``t``;
    ``start`` is the point at ``t = 0``. Returns the best ``Trial`` and the count of
    evaluations."""
    def sufficient(trial: Trial) -> bool:  # the Armijo condition
        return trial.f <= start.f + c1 * trial.t * start.gtd

    def curvature(trial: Trial) -> bool:
        return abs(trial.gtd) <= -c2 * start.gtd

    prev, cur = start._replace(t=0.0), Trial(t, *evaluate(t))
    evals, tries = 1, 0
    bracket = None
    while tries < max_ls:  # bracketing: grow the step until a minimum lies behind it
        if not sufficient(cur) or (tries > 1 and cur.f >= prev.f) or \
                (not curvature(cur) and cur.gtd >= 0):
            bracket = [prev, cur]
            break
        if curvature(cur):
            return cur, evals
        bounds = (cur.t + 0.01 * (cur.t - prev.t), cur.t * 10)
        t = cubic_minimum(prev.t, prev.f, prev.gtd, cur.t, cur.f, cur.gtd, bounds)
        prev, cur = cur, Trial(t, *evaluate(t))
        evals, tries = evals + 1, tries + 1
    if bracket is None:  # out of evaluations: the better of the start and the last
        bracket = [start._replace(t=0.0), cur]
    return _zoom(evaluate, bracket, start, d_max, tries, evals, sufficient, curvature,
                 tolerance_change, max_ls)


def _zoom(evaluate, bracket, start, d_max, tries, evals, sufficient, curvature,
          tolerance_change, max_ls):
    """Shrink ``bracket`` (two trials around a minimum) until a point meets the strong
    Wolfe conditions, its width is negligible, or the evaluations run out."""
    low = 0 if bracket[0].f <= bracket[1].f else 1
    stalled = False
    while tries < max_ls:
        a, b = bracket
        if abs(b.t - a.t) * d_max < tolerance_change:
            break
        t, stalled = _safeguarded(cubic_minimum(a.t, a.f, a.gtd, b.t, b.f, b.gtd),
                                  min(a.t, b.t), max(a.t, b.t), stalled)
        trial = Trial(t, *evaluate(t))
        evals, tries = evals + 1, tries + 1
        high = 1 - low
        if not sufficient(trial) or trial.f >= bracket[low].f:
            bracket[high] = trial
            low = 0 if bracket[0].f <= bracket[1].f else 1
            continue
        done = curvature(trial)
        if not done and trial.gtd * (bracket[high].t - bracket[low].t) >= 0:
            bracket[high] = bracket[low]
        bracket[low] = trial
        if done:
            break
    return bracket[low], evals


def _safeguarded(t: float, lo: float, hi: float, stalled: bool) -> tuple[float, bool]:
    """Keep the trial ``t`` at least a tenth of the bracket away from its ends: a point
    that close is accepted once, then (or when outside) moved a tenth in."""
    margin = 0.1 * (hi - lo)
    if min(hi - t, t - lo) >= margin:
        return t, False
    if stalled or t >= hi or t <= lo:
        return (hi - margin if abs(t - hi) < abs(t - lo) else lo + margin), False
    return t, True


class LBFGS(Optimizer):
    """Limited-memory BFGS, as ``torch.optim.LBFGS``: ``step(closure)`` runs up to
    ``max_iter`` iterations, ``closure()`` clearing the gradients, computing the loss,
    calling ``backward`` and returning the loss. One parameter group only."""

    def __init__(self, params, lr: float = 1.0, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                 history_size: int = 100, line_search_fn: str | None = None):
        if not lr >= 0:
            raise ValueError(f"LBFGS: invalid lr={lr}")
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got "
                             f"{line_search_fn!r}")
        super().__init__(params, dict(
            lr=lr, max_iter=max_iter, max_eval=max_iter * 5 // 4 if max_eval is None
            else max_eval, tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
            history_size=history_size, line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")

    # ---- the parameters as one vector ---------------------------------------------------
    def _flat_group(self):
        """The flat buffers, when they hold every parameter and its gradient; else None."""
        flat, params = self._flat[0], self.param_groups[0]["params"]
        return flat if flat is not None and flat.ready(params, [None] * len(params)) else None

    def _pieces(self, vector) -> list:
        """``vector`` cut into views shaped as the parameters."""
        pieces, start = [], 0
        for p in self.param_groups[0]["params"]:
            pieces.append(vector[start:start + p.numel()].view(p.shape))
            start += p.numel()
        return pieces

    def _gather_grad(self):
        """A new vector of all the gradients (0 for a parameter without one)."""
        flat = self._flat_group()
        if flat is not None:
            return realize(flat.grads * 1)
        params = self.param_groups[0]["params"]
        out = new_empty((sum(p.numel() for p in params),), params[0].dtype, params[0].device)
        for p, piece in zip(params, self._pieces(out)):
            piece[...] = 0 if p.grad is None else p.grad.value
        return out

    def _write_params(self, value, saver: str = "=") -> None:
        """Assign (``=``) or add (``+=``) a vector expression to the parameters."""
        flat = self._flat_group()
        if flat is not None:
            flat.before_write()
            targets = [(flat.values, value)]
        else:
            targets = zip([p.value for p in self.param_groups[0]["params"]],
                          self._pieces(realize(value)))
        for target, v in targets:
            if saver == "+=":
                target += v
            else:
                target[...] = v

    def _params_vector(self):
        flat = self._flat_group()
        if flat is not None:
            return realize(flat.values * 1)
        pieces = [p.value.reshape(-1) for p in self.param_groups[0]["params"]]
        out = new_empty((sum(x.numel() for x in pieces),), pieces[0].dtype, pieces[0].device)
        for piece, x in zip(self._pieces(out), pieces):
            piece.reshape(-1)[...] = x
        return out

    # ---- the iterations -------------------------------------------------------------------
    def _evaluate(self, closure) -> tuple[float, object]:
        with enable_grad():
            loss = float(closure())
        return loss, self._gather_grad()

    def _direction(self, state: dict, g, group: dict):
        """The two-loop recursion: ``-H g`` with ``H`` the inverse Hessian estimate made
        from the stored step / gradient-change pairs (updated first with the last one,
        if it has positive curvature)."""
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1.0)
            return realize(-g)
        y = realize(g - state["prev_flat_grad"])
        s = realize(state["d"] * state["t"])
        ys = _dot(y, s)
        if ys > 1e-10:
            if len(state["old_dirs"]) == group["history_size"]:
                for key in ("old_dirs", "old_stps", "ro"):
                    state[key].pop(0)
            state["old_dirs"].append(y)
            state["old_stps"].append(s)
            state["ro"].append(1.0 / ys)
            state["H_diag"] = ys / _dot(y, y)
        pairs = list(zip(state["old_dirs"], state["old_stps"], state["ro"]))
        q, al = realize(-g), []
        for y_i, s_i, ro_i in reversed(pairs):
            al.append(_dot(s_i, q) * ro_i)
            q = realize(q - al[-1] * y_i)
        r = realize(q * state["H_diag"])
        for (y_i, s_i, ro_i), a in zip(pairs, reversed(al)):
            r = realize(r + (a - _dot(y_i, r) * ro_i) * s_i)
        state["al"] = al[::-1]
        return r

    def step(self, closure):  # noqa: C901 (PyTorch's stopping tests, in its order)
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        state = self.state.setdefault(0, {"func_evals": 0, "n_iter": 0})
        with enable_grad():
            first_loss = closure()  # returned as it is, as PyTorch's
        loss, g, evals = float(first_loss), self._gather_grad(), 1
        state["func_evals"] += 1
        if _max_abs(g) <= tol_grad:
            return first_loss
        for n_iter in range(1, max_iter + 1):
            state["n_iter"] += 1
            d = state["d"] = self._direction(state, g, group)
            state["prev_flat_grad"], state["prev_loss"] = g, loss
            t = min(1.0, 1.0 / float(abs(g).sum().item())) * lr if state["n_iter"] == 1 else lr
            state["t"] = t
            gtd = _dot(g, d)
            if gtd > -tol_change:
                break
            if group["line_search_fn"] == "strong_wolfe":
                loss, g, t, ls_evals = self._line_search(closure, d, t, loss, g, gtd,
                                                         tol_change)
                converged = _max_abs(g) <= tol_grad
            else:
                self._write_params(t * d, "+=")
                ls_evals = 0
                converged = False
                if n_iter != max_iter:
                    loss, g = self._evaluate(closure)
                    converged, ls_evals = _max_abs(g) <= tol_grad, 1
            state["t"] = t  # the line search's
            evals += ls_evals
            state["func_evals"] += ls_evals
            stalled = _max_abs(d) * abs(t) <= tol_change or \
                abs(loss - state["prev_loss"]) < tol_change
            if n_iter == max_iter or evals >= max_eval or converged or stalled:
                break
        return first_loss

    def _line_search(self, closure, d, t, loss, g, gtd, tol_change):
        """Strong-Wolfe search along ``d`` from the parameters now; leaves them at the
        step found. Returns its loss, gradient, step and evaluation count."""
        x0 = self._params_vector()

        def evaluate(step: float):
            self._write_params(x0 + step * d)
            f, grad = self._evaluate(closure)
            return f, grad, _dot(grad, d)

        best, evals = strong_wolfe(evaluate, Trial(0.0, loss, g, gtd), t, _max_abs(d),
                                   tolerance_change=tol_change)
        self._write_params(x0 + best.t * d)
        return best.f, best.g, best.t, evals

"""ReduceLROnPlateau and OneCycleLR, with PyTorch's arguments and defaults.

``ReduceLROnPlateau`` reads a metric each epoch and cuts the rate when it stops
improving; ``OneCycleLR`` (Smith and Topin 2017) is a closed form of the batch
number -- warm up to ``max_lr``, then anneal far below the start -- moving the
momentum (or Adam's ``beta1``) the other way.
"""

from __future__ import annotations

import math

from .optim import LRScheduler, Optimizer


def _per_group(value, optimizer: Optimizer, name: str) -> list:
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"expected {n} values for {name}, got {len(value)}")
        return list(value)
    return [value] * n


class ReduceLROnPlateau:
    """Multiply each group's rate by ``factor`` once the metric passed to ``step`` has not
    improved for more than ``patience`` epochs (improved: by more than ``threshold``,
    relative or absolute), then wait ``cooldown`` epochs; never below ``min_lr``, and
    not by less than ``eps``."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr=0.0, eps: float = 1e-8):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"mode must be 'min' or 'max' and threshold_mode 'rel' or 'abs', "
                             f"got {mode!r} and {threshold_mode!r}")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = (
            threshold, threshold_mode, cooldown, eps)
        self.min_lrs = _per_group(min_lr, optimizer, "min_lr")
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = self.last_epoch = 0

    def is_better(self, a: float, best: float) -> bool:
        sign = 1.0 if self.mode == "min" else -1.0
        if self.threshold_mode == "rel":
            return sign * a < sign * best * (1.0 - sign * self.threshold)
        return sign * a < sign * best - self.threshold

    def step(self, metrics) -> None:
        current = float(metrics)
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, min_lr)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0

    def get_last_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "optimizer"}

    def load_state_dict(self, state: dict) -> None:
        vars(self).update(state)


class OneCycleLR(LRScheduler):
    """The one-cycle policy, stepped once per batch: from ``max_lr / div_factor`` up to
    ``max_lr`` over the first ``pct_start`` of ``total_steps`` (or ``epochs *
    steps_per_epoch``), then down to ``initial / final_div_factor``, by cosine or
    linear annealing; ``three_phase`` comes back to the start before the final descent.
    With ``cycle_momentum`` the momentum runs from ``max_momentum`` to
    ``base_momentum`` and back, against the rate."""

    def __init__(self, optimizer: Optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND "
                                 "steps_per_epoch)")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0 or not 0 <= pct_start <= 1 or anneal_strategy not in ("cos",
                                                                                   "linear"):
            raise ValueError(f"OneCycleLR: invalid total_steps={total_steps}, pct_start="
                             f"{pct_start} or anneal_strategy={anneal_strategy!r}")
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        self.cycle_momentum = cycle_momentum
        self._use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum and not self._use_beta1 and "momentum" not in optimizer.defaults:
            raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                             "option enabled")
        self.phases = self._phases(pct_start, three_phase)
        for group, top, low, high in zip(optimizer.param_groups,
                                         _per_group(max_lr, optimizer, "max_lr"),
                                         _per_group(base_momentum, optimizer, "base_momentum"),
                                         _per_group(max_momentum, optimizer, "max_momentum")):
            group.update(initial_lr=top / div_factor, max_lr=top,
                         min_lr=top / div_factor / final_div_factor)
            if cycle_momentum:
                group.update(base_momentum=low, max_momentum=high)
        super().__init__(optimizer)

    def _phases(self, pct_start: float, three_phase: bool) -> list[tuple]:
        """(last step, lr from, lr to, momentum from, momentum to) of each phase: keys of
        a group's values."""
        up = float(pct_start * self.total_steps) - 1
        end = self.total_steps - 1
        if three_phase:
            return [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                    (2 * up, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                    (end, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        return [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (end, "max_lr", "min_lr", "base_momentum", "max_momentum")]

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _set_rates(self) -> None:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total "
                             f"steps is {self.total_steps}")
        for group in self.optimizer.param_groups:
            begin = 0.0
            for i, (last, lr0, lr1, m0, m1) in enumerate(self.phases):
                if step <= last or i == len(self.phases) - 1:
                    pct = (step - begin) / (last - begin)
                    group["lr"] = self._anneal(group[lr0], group[lr1], pct)
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m0], group[m1], pct))
                    break
                begin = last

    def _set_momentum(self, group: dict, momentum: float) -> None:
        if self._use_beta1:
            group["betas"] = (momentum, *group["betas"][1:])
        else:
            group["momentum"] = momentum

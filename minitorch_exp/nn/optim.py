"""Optimizers and learning-rate schedules.

Each update is a saver expression, so one statement is one fused pass with no
temporaries::

    buf[...] = momentum * buf + (g + wd * p)        # SGD momentum: 1 kernel
    p -= lr * buf                                   # 1 kernel

Going further: the optimizer moves each group's parameters into one flat
buffer (each parameter's Storage is pointed at its part, so every handle on it
stays valid), gives backward a flat gradient buffer to write into, and keeps
its state flat too. Then the *same* update
statements, applied to the flat tensors, update the whole model: 2 kernels
per SGD step (3 for Adam) however many parameters there are. When a group
cannot be flat (mixed dtypes or devices) or a step finds a gradient that is
not in the flat buffer, it falls back to one update per parameter.

The formulas follow PyTorch's step for step (tests compare them).
"""

from __future__ import annotations

import bisect
import math
import weakref

from ..node.grad_mode import no_grad
from ..node.node import Node, grads_in_sinks
from ..tensor import capture, dtypes
from ..tensor.creation import new_empty, zeros_like
from ..tensor.engine import assign_all, realize
from ..tensor.expr import RVALUE, new_epoch, sqrt
from ..tensor.layout import contiguous
from ..tensor.storage import Storage
from ..tensor.tensor import Tensor, array_view
from . import utils
from .module import GroupList, structure_changed


class Optimizer:
    def __init__(self, params, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = dict(defaults)
        self.param_groups = [dict(g) for g in groups]
        self.state: dict[int, dict] = {}
        self._flat: list[FlatGroup | None] = []
        self._known: list[dict] = []  # the groups ``_flat`` was made for, in order
        self._take_new_groups()

    def __setattr__(self, name: str, value) -> None:
        if name == "param_groups":  # groups changed later: mt.capture records again
            if name in vars(self):
                structure_changed()
            value = GroupList(value)
        object.__setattr__(self, name, value)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters, as ``torch.optim.Optimizer.add_param_group``: the
        next ``step()`` updates them too (fine-tuning: a frozen part unfrozen and added).

        ``param_group`` is a dict with ``"params"`` (a list or tuple of parameters, or
        one) and any of the optimizer's options; the others are taken from the
        optimizer's ``defaults``. The dict itself is completed and appended to
        ``param_groups``. A parameter already in a group is a ValueError naming it.
        Appending to ``param_groups`` directly does the same, checked at the next step.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"add_param_group takes a dict, got {type(param_group).__name__}")
        self._take_new_groups()  # groups appended directly before come first
        param_group["params"] = self._checked_params(param_group, self._param_ids(),
                                                     "the new group")
        self.param_groups.append(param_group)  # moves the version: mt.capture records again
        self._take_new_groups()

    def _param_ids(self) -> dict[int, tuple[int, int]]:
        """id of each parameter of the known groups -> (group index, index in the group)."""
        return {id(p): (g, k) for g, group in enumerate(self._known)
                for k, p in enumerate(group["params"])}

    @staticmethod
    def _checked_params(group: dict, seen: dict, label: str) -> list:
        """``group``'s parameters as a list, checked: Nodes that require grad, none of
        them in ``seen`` (the parameters of the groups before)."""
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"a parameter group is a dict with 'params', got {group!r:.80}")
        params = group["params"]
        if isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters must be in an ordered collection (a list "
                            "or tuple), not a set: its order changes between runs")
        params = [params] if isinstance(params, Node) else list(params)
        for k, p in enumerate(params):
            if not isinstance(p, Node) or not p.requires_grad:
                raise TypeError("optimizer params must be Nodes with requires_grad=True")
            if id(p) in seen:
                g, i = seen[id(p)]
                raise ValueError(
                    "some parameters appear in more than one parameter group: parameter "
                    f"{k} of {label} ({p.dtype.name}, shape {tuple(p.shape)}) is parameter "
                    f"{i} of group {g}")
        return params

    def _take_new_groups(self) -> None:
        """Make the flat buffers of groups appended to ``param_groups`` since the last
        call (by ``add_param_group``, ``append``, ``extend`` or ``param_groups = [*old,
        new]``), after completing them with the defaults. The state is numbered
        through the groups in order, so a group removed, replaced or moved is an error."""
        groups, known = self.param_groups, self._known
        if len(groups) == len(known) and all(a is b for a, b in zip(groups, known)):
            return
        if len(groups) < len(known) or not all(a is b for a, b in zip(groups, known)):
            raise ValueError("optimizer param_groups changed other than by adding groups at "
                             "the end (a group removed, replaced or moved); the optimizer's "
                             "state follows the groups' order: add groups with "
                             "add_param_group, or make a new optimizer")
        seen = self._param_ids()
        news = []
        for g in range(len(known), len(groups)):  # all checked before any is taken
            params = self._checked_params(groups[g], seen, f"group {g}")
            seen.update({id(p): (g, k) for k, p in enumerate(params)})
            news.append(params)
        for group, params in zip(groups[len(known):], news):
            group["params"] = params
            for key, value in self.defaults.items():
                group.setdefault(key, value)
            self._flat.append(FlatGroup.make(params))
            known.append(group)

    def _params(self):
        for group in self.param_groups:
            for p in group["params"]:
                yield group, p

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, p in self._params():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.value[...] = 0

    def step(self) -> None:
        self._take_new_groups()
        if capture.is_recording():
            self._recorded_step()
        else:
            self._step()

    def _recorded_step(self) -> None:
        """``step()`` inside a captured function: each replay runs it again, eagerly.

        Its scalars change from call to call (a scheduler's learning rate, Adam's
        step count), so its kernels are not frozen into the recording; the step
        runs as a host op, reading the ``.grad`` each parameter has now (a replay
        does not repeat the Python that sets them) and writing the parameters
        and the optimizer state.
        """
        grads = [(p, p.grad) for _, p in self._params()]

        def run():
            held = [(p, p.grad) for p, _ in grads]
            for p, grad in grads:
                p.grad = grad
            try:
                self._step()
            finally:
                for p, grad in held:
                    p.grad = grad

        capture.host_op(run, *self._storages())

    def _storages(self) -> list:
        """The buffers a step writes: the parameters' and the optimizer state's (flat
        state included: ``share_state`` puts views of it in ``self.state``)."""
        self._take_new_groups()
        tensors = [p.value for _, p in self._params()]
        tensors += [flat.values for flat in self._flat if flat is not None]
        tensors += [v for s in self.state.values() for v in s.values() if hasattr(v, "storage")]
        return list({id(t.storage): t.storage for t in tensors}.values())

    def _step(self) -> None:
        with no_grad():
            index = 0
            for g, (group, flat) in enumerate(zip(self.param_groups, self._flat)):
                params = group["params"]
                indices = range(index, index + len(params))
                index += len(params)
                if flat is not None and flat.ready(params, [self.state.get(i) for i in indices]):
                    flat.before_write()
                    self._update(flat.values, flat.grads, flat.state, group)
                    flat.share_state(self.state, indices)
                    continue
                self._flat[g] = None  # per-parameter from now on (state stays as views)
                for i, p in zip(indices, params):
                    if p.grad is not None:
                        self._update(p.value, p.grad.value, self.state.setdefault(i, {}), group)

    def _update(self, p, g, state: dict, group: dict) -> None:
        raise NotImplementedError

    # ---- checkpoints ----------------------------------------------------------------
    def state_dict(self) -> dict:
        self._take_new_groups()
        state = {i: {k: (Node(v) if hasattr(v, "storage") else v) for k, v in s.items()
                     if not k.startswith("_")}
                 for i, s in self.state.items()}
        groups = []
        start = 0
        for group in self.param_groups:
            n = len(group["params"])
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": list(range(start, start + n))})
            start += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        self._take_new_groups()
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(mine["params"])
                for g, mine in zip(groups, self.param_groups)):
            raise ValueError("load_state_dict: the saved optimizer has a different number of "
                             "parameter groups or parameters")
        params = [p for _, p in self._params()]
        state = {}  # built completely before anything changes, so a bad file changes nothing
        for key, entries in state_dict["state"].items():
            index = int(key)
            for name, v in entries.items():
                shape = tuple(getattr(v, "shape", ()))
                if shape not in ((), params[index].shape):
                    raise ValueError(f"load_state_dict: state {name!r} of parameter {index} has "
                                     f"shape {shape}, the parameter has {params[index].shape}")
            state[index] = {k: _restore(v, params[index]) for k, v in entries.items()}
        for mine, saved in zip(self.param_groups, groups):
            mine.update({k: v for k, v in saved.items() if k != "params"})
        self.state = state
        index = 0
        for g, flat in enumerate(self._flat):
            n = len(self.param_groups[g]["params"])
            if flat is not None:
                flat.load_state(state, range(index, index + n))
            index += n


#: Asked in turn by each new flat group for its gradient buffer: ``maker(params, numel,
#: dtype, device)`` returns a contiguous 1-D Tensor of ``numel`` elements, or None.
#: ``nn.parallel`` adds one: a wrapped model's gradients go to memory its ranks share.
GRAD_BUFFER_MAKERS: list = []


def _grad_buffer(params, numel: int, dtype, device) -> Tensor:
    for maker in GRAD_BUFFER_MAKERS:
        buffer = maker(params, numel, dtype, device)
        if buffer is not None:
            return buffer
    return new_empty((numel,), dtype, device)


class FlatGroup:
    """One flat buffer each for a group's parameters, gradients and optimizer state.

    Each parameter's Storage is pointed at its part of ``values`` (its values copied
    there first), so every Tensor that views it -- ``p.data`` handles taken before or
    after, their views -- goes on showing the parameter, as in PyTorch. Backward
    writes each gradient into its part of ``grads`` (a ``GradSlot``). The
    per-parameter state dicts hold views of the flat state, so ``state_dict`` looks
    the same either way. A group is flat only when each parameter is the whole of a
    writable Storage of its own (a Module's are); another is updated one by one.
    """

    def __init__(self, values, grads, views, slots, starts):
        self.values, self.grads = values, grads
        self.views, self.slots, self.starts = views, slots, starts
        self.storages = [v.storage for v in views]
        self.datas = [v.storage.data for v in views]  # where each storage must point
        self.state: dict = {}

    @classmethod
    def make(cls, params) -> FlatGroup | None:
        kinds = {(p.dtype, p.device) for p in params}
        if len(kinds) != 1 or not all(p.is_leaf and _whole_storage(p.value) for p in params) \
                or len({id(p.value.storage) for p in params}) != len(params):
            return None
        # Parameters flattened before (by another optimizer) move into these buffers too;
        # that optimizer then finds them elsewhere and updates them one by one (``ready``).
        (dtype, device), = kinds
        total = sum(p.numel() for p in params)
        values = new_empty((total,), dtype, device)
        grads = _grad_buffer(params, total, dtype, device)
        views, slots, starts = [], [], []
        start = 0
        for p in params:
            end = start + p.numel()
            view = _move(p.value, values.storage.data[start:end])
            p.set_value(view)
            slot = GradSlot(grads.storage.data[start:end], view.layout, device)
            p.set_grad_sink(slot)
            if p.grad is not None:
                slot.adopt(p)
            views.append(view)
            slots.append(slot)
            starts.append(start)
            start = end
        new_epoch()  # assignments prepared before hold the old buffers
        return cls(values, grads, views, slots, starts)

    def ready(self, params, states) -> bool:
        """True when one update over the flat buffers equals the per-parameter updates."""
        if not grads_in_sinks(params, self.views):  # values and gradients all here
            return False
        for view, data in zip(self.views, self.datas):
            if view.storage.data is not data:
                return False
        if not self.state:
            return all(not s for s in states)
        return all(s is not None and s.get("_flat") is self for s in states)

    def before_write(self) -> None:
        """Count a write into each parameter (a step writes them through ``values``):
        lazy values reading them are computed first, saved ones see a new version."""
        for storage in self.storages:
            storage.before_write()

    def share_state(self, state: dict, indices) -> None:
        """Expose the flat state as per-parameter views (for state_dict and inspection)."""
        for i, view, start in zip(indices, self.views, self.starts):
            entry = state.setdefault(i, {})
            entry["_flat"] = self
            for key, value in self.state.items():
                old = entry.get(key)
                if old is None or getattr(old, "storage", None) is not getattr(value, "storage", 0):
                    entry[key] = _slice_at(value, start, view)  # new, or a scalar

    def load_state(self, state: dict, indices) -> None:
        """After load_state_dict: copy per-parameter state into flat buffers again."""
        entries = [state.get(i) for i in indices]
        if not entries or any(not e for e in entries) or \
                {frozenset(e) for e in entries} != {frozenset(entries[0])}:
            self.state = {}
            return
        self.state = {}
        for key, value in entries[0].items():
            if hasattr(value, "storage"):
                flat = new_empty(self.values.shape, self.values.dtype, self.values.device)
                for e, view, start in zip(entries, self.views, self.starts):
                    _slice_at(flat, start, view)[...] = e[key]
                self.state[key] = flat
            else:
                self.state[key] = value
        self.share_state(state, indices)


class GradSlot:
    """A flat parameter's part of the flat gradient buffer, where backward writes.

    Each gradient begun afresh (``p.grad`` None) gets a Storage object of its own over
    this memory (``take``: the parameter's gradient sink, ``Node.set_grad_sink``). One
    handed out before and still held -- ``g = p.grad`` kept through
    ``zero_grad(set_to_none=True)`` -- first gets a copy of its values, so that it keeps
    them, as in PyTorch (where the next backward makes a new tensor). One made while a
    step is captured is never copied away: replays write here and give it back to
    ``p.grad`` (node/capture.py).
    """

    __slots__ = ("data", "layout", "device", "handed", "array")

    def __init__(self, data, layout, device):
        self.data, self.layout, self.device = data, layout, device
        self.handed = None  # a weak reference to the Storage last handed out
        #: On the CPU, this memory as an ndarray of the gradient's shape, made once: each
        #: gradient's Tensor carries it (a view made per step showed in the step's time;
        #: docs/eager.md, "How an op is computed at once").
        self.array = array_view(Storage(data, device), layout) if device.type == "cpu" else None

    def take(self, device) -> Tensor | None:
        """A Tensor over this memory for the parameter's new gradient; None if the
        parameter moved to another ``device`` since (``Module.to``: backward then makes
        one). Its shape and dtype cannot change (``Node.data``'s setter keeps them)."""
        if device is not self.device and device != self.device:
            return None
        old = self.handed() if self.handed is not None else None
        if old is not None and old.data is self.data:
            old.data = old.data.copy()  # someone still holds it: it keeps its values
        if self.array is not None:
            fresh = Tensor.owning(self.data, self.array, self.layout)
        else:
            fresh = Tensor(Storage(self.data, self.device), self.layout)
        self.handed = weakref.ref(fresh.storage) if capture.active() is None else None
        return fresh

    def adopt(self, p: Node) -> None:
        """Bring ``p``'s gradient here: its Storage is pointed at this memory when the
        gradient fills it whole (the Node stays ``p.grad``), else it is copied."""
        t = p.grad.value
        if _whole_storage(t):
            _move(t, self.data)
            self.handed = weakref.ref(t.storage)
        else:
            fresh = self.take(p.device)
            fresh[...] = t
            p.grad = Node(fresh)

    def holds(self, t) -> bool:
        """The gradient value ``t`` (a Tensor, or a lazy expression) lies in this memory."""
        return t.kind == RVALUE and t.storage.data is self.data and (
            t.layout is self.layout or t.layout == self.layout)


def _whole_storage(t) -> bool:
    """``t`` is all of a writable Storage, in order (as a Module's parameters are)."""
    return type(t.storage) is Storage and len(t.storage) == t.numel() and \
        t.layout == contiguous(t.shape)


def _move(t: Tensor, data) -> Tensor:
    """Point ``t``'s Storage at ``data`` (its values copied there first): every Tensor
    over it now shows ``data``. Returns a new Tensor object for the same view, so that
    a step captured over the old buffer records itself again (node/capture.py)."""
    data[...] = t.storage.data
    t.storage.data = data
    return Tensor(t.storage, t.layout)


def _slice_at(flat, start: int, like):
    """The part of ``flat`` at ``start`` holding one value per element of ``like``."""
    if not hasattr(flat, "storage"):
        return flat
    return flat[start:start + like.numel()].view(like.shape)


def state_like(p: Tensor) -> Tensor:
    """Zeros for a running statistic of the parameter ``p`` (a momentum, Adam's moments),
    of ``p``'s dtype -- but float32 for a float16 ``p``: a squared gradient under 2.4e-4
    is 0 in float16, and Adam's step then divides by its eps alone (PyTorch's float16
    Adam goes to nan; tests/nn/test_half_modules.py). The step itself computes in
    float32 and rounds ``p`` once."""
    return zeros_like(p, dtype=dtypes.arithmetic_dtype(p.dtype))


def _restore(value, param: Node):
    if isinstance(value, Node):
        t = state_like(param.value)
        t[...] = value.value.to(param.device)
        return t
    if hasattr(value, "shape") and getattr(value, "shape", ()) != ():
        t = state_like(param.value)
        from ..tensor.tensor import from_array
        t[...] = from_array(value)
        return t
    return value.item() if hasattr(value, "item") else value


class SGD(Optimizer):
    def __init__(self, params, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: invalid lr={lr}, momentum={momentum} or "
                             f"weight_decay={weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      nesterov=nesterov, weight_decay=weight_decay))

    def _update(self, p, g, state, group):
        lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
        grad = g + wd * p if wd else g
        if not mom:
            p -= lr * grad
            return
        buf = state.get("momentum_buffer")
        if buf is None:  # the first step takes the gradient as it is, as torch does
            buf = state["momentum_buffer"] = state_like(p)
            new_buf = grad
        else:
            new_buf = mom * buf + (1.0 - group["dampening"]) * grad
        assign_all([(buf, new_buf),  # one kernel: p's statement reads the new buf
                    (p, lr * (grad + mom * buf if group["nesterov"] else buf), "-=")])


class Adam(Optimizer):
    """Adam; with ``decoupled=True`` (AdamW) weight decay shrinks the weights directly."""

    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if lr < 0 or eps < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"Adam: invalid lr={lr}, betas={betas} or eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def _update(self, p, g, state, group):
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if "exp_avg" not in state:
            state.update(step=0, exp_avg=state_like(p), exp_avg_sq=state_like(p))
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        decay = [(p, p * (1.0 - lr * wd))] if wd and self.decoupled else []
        grad = g + wd * p if wd and not self.decoupled else g
        bias1, bias2 = 1.0 - b1 ** t, 1.0 - b2 ** t
        assign_all([*decay,  # one kernel: each statement reads the ones before it
                    (m, b1 * m + (1.0 - b1) * grad),
                    (v, b2 * v + (1.0 - b2) * grad * grad),
                    (p, (lr / bias1) * m / (sqrt(v) * (1.0 / math.sqrt(bias2)) + eps), "-=")])


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012), PyTorch's formulas: with ``s`` and ``a`` running means of
    squared gradients and squared updates, ``d = sqrt(a + eps) / sqrt(s + eps) * g`` and
    ``p -= lr * d``."""

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0):
        if lr < 0 or eps < 0 or not 0 <= rho <= 1 or weight_decay < 0:
            raise ValueError(f"Adadelta: invalid lr={lr}, rho={rho}, eps={eps} or "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def _update(self, p, g, state, group):
        lr, rho, eps, wd = group["lr"], group["rho"], group["eps"], group["weight_decay"]
        if "square_avg" not in state:
            state.update(step=0, square_avg=state_like(p), acc_delta=state_like(p))
        state["step"] += 1
        s, a = state["square_avg"], state["acc_delta"]
        grad = realize(g + wd * p) if wd else g  # computed first: read after p's update
        delta = sqrt(a + eps) / sqrt(s + eps) * grad
        assign_all([(s, rho * s + (1.0 - rho) * grad * grad),  # one kernel, in order:
                    (p, lr * delta, "-="),                      # delta reads the new s
                    (a, rho * a + (1.0 - rho) * delta * delta)])  # and the old a


def clip_grad_norm_(params, max_norm: float, eps: float = 1e-6) -> float:
    """Scale gradients so their global L2 norm is at most ``max_norm``; returns the norm
    (``nn.utils.clip_grad_norm_``, PyTorch's, returns it as a tensor)."""
    return float(utils.clip_grad_norm_(params, max_norm, eps=eps))


# ---- learning-rate schedules -------------------------------------------------------

class LRScheduler:
    """A learning rate per epoch, ``lr_at(base, epoch)``, set on each group by ``step()``.

    As in PyTorch, making one sets epoch 0's rates at once, and ``step()`` (once per
    epoch, after ``optimizer.step()``) moves to the next epoch. The rates are closed
    forms of the epoch, so resuming needs only ``last_epoch``.
    """

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.last_epoch = 0
        self._set_rates()

    def lr_at(self, base: float, epoch: int) -> float:
        raise NotImplementedError

    def step(self) -> None:
        self.last_epoch += 1
        self._set_rates()

    def _set_rates(self) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(base, self.last_epoch)

    def get_last_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict) -> None:
        self.last_epoch = int(state["last_epoch"])
        self.base_lrs = [float(x) for x in state["base_lrs"]]


class StepLR(LRScheduler):
    """``base * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, base, epoch):
        return base * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """``base * gamma ** k``, ``k`` the number of ``milestones`` (epochs) reached."""

    def __init__(self, optimizer: Optimizer, milestones, gamma: float = 0.1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def lr_at(self, base, epoch):
        return base * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """``base * gamma ** epoch``."""

    def __init__(self, optimizer: Optimizer, gamma: float):
        self.gamma = gamma
        super().__init__(optimizer)

    def lr_at(self, base, epoch):
        return base * self.gamma ** epoch


class LambdaLR(LRScheduler):
    """``base * lr_lambda(epoch)``; ``lr_lambda`` a function, or one per group."""

    def __init__(self, optimizer: Optimizer, lr_lambda):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) \
            else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: {len(self.lr_lambdas)} lr_lambda for {n} groups")
        super().__init__(optimizer)

    def _set_rates(self) -> None:
        for group, base, fn in zip(self.optimizer.param_groups, self.base_lrs, self.lr_lambdas):
            group["lr"] = base * fn(self.last_epoch)


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, base, epoch):
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch /
                                                                    self.T_max)) / 2


from .lbfgs import LBFGS  # noqa: E402,F401  (these subclass Optimizer)
from .optim_adaptive import Adagrad, NAdam, RMSprop  # noqa: E402,F401
from .schedules import OneCycleLR, ReduceLROnPlateau  # noqa: E402,F401

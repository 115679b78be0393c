"""Module and Parameter: containers that find their parameters by looking at attributes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

import numpy as np

from ..node.node import Node
from ..tensor.tensor import Tensor, from_array


class Parameter(Node):
    """A leaf Node that a Module registers as trainable (``requires_grad=True``)."""

    __slots__ = ()

    def __init__(self, data, requires_grad: bool = True):
        if isinstance(data, Node):
            data = data.value
        elif isinstance(data, np.ndarray):
            data = from_array(data)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter needs a tensor or array, got {type(data).__name__}")
        super().__init__(data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


def _members(value, name: str, kind: type):
    """``(dotted_name, obj)`` for ``value`` itself or the items of a list/tuple/dict of ``kind``."""
    if isinstance(value, kind):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, kind):
                yield f"{name}.{i}", item
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, kind):
                yield f"{name}.{key}", item


class Module:
    """Base class of layers and models.

    Parameters are found automatically: any attribute that is a Parameter, a
    Module, or a list/tuple/dict of them. ``forward`` does the work;
    calling the module calls it.
    """

    training: bool

    def __init__(self):
        object.__setattr__(self, "training", True)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- discovery ------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, value in vars(self).items():
            yield from _members(value, name, Module)

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for mod_name, module in self.named_modules(prefix):
            for name, value in vars(module).items():
                for pname, param in _members(value, name, Parameter):
                    if id(param) not in seen:
                        seen.add(id(param))
                        yield (f"{mod_name}.{pname}" if mod_name else pname), param

    def parameters(self) -> Iterator[Parameter]:
        for _, param in self.named_parameters():
            yield param

    # ---- modes and gradients --------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    # ---- state ------------------------------------------------------------------
    def state_dict(self) -> OrderedDict:
        """Parameter name -> detached Node sharing the parameter's data."""
        return OrderedDict((name, p.detach()) for name, p in self.named_parameters())

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy values into the parameters in place (so optimizers keep working)."""
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(state))
        unexpected = sorted(set(state) - set(params))
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys "
                           f"{unexpected} for {type(self).__name__}")
        arrays = {}
        for name, value in state.items():  # check every shape before writing any
            if name not in params:
                continue
            arr = np.asarray(value.numpy() if isinstance(value, Node) else value)
            if arr.shape != params[name].shape:
                raise ValueError(f"load_state_dict: {name} has shape {arr.shape} in the "
                                 f"checkpoint but {params[name].shape} in the model")
            arrays[name] = arr
        for name, arr in arrays.items():
            p = params[name]
            p.value[...] = from_array(np.ascontiguousarray(arr, dtype=p.dtype)).to(p.device)

    def to(self, device) -> Module:
        for p in self.parameters():
            p._value = p.value.to(device)
            if p.grad is not None:
                p.grad = p.grad.to(device)
        return self

    # ---- display ----------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        children = list(self.named_children())
        if not children:
            return lines[0] + ")"
        for name, child in children:
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines) + "\n)"

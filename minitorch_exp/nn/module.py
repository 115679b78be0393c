"""Module and Parameter: containers that find their parameters by looking at attributes.

Also the *structure version*: a number that moves whenever a model's structure
changes (``structure_version``), so that ``mt.capture`` knows to record again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from ..node.capture import Watched, register_structure_source
from ..node.hooks import RemovableHandle
from ..node.node import Node
from ..tensor import dtypes
from ..tensor.engine import realize
from ..tensor.tensor import Tensor, from_array
from . import hooks as module_hooks


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


# ---- the structure version -----------------------------------------------------------

_version = 0


def structure_version() -> int:
    """Moves whenever any Module's structure changes -- a Module, Parameter or tensor
    attribute set, replaced or deleted (building a Module sets some), or a list or dict
    of them on a Module changed -- and whenever an optimizer's ``param_groups`` are
    replaced or added to."""
    return _version


def structure_changed() -> None:
    global _version
    _version += 1


register_structure_source(structure_version)  # mt.capture records again when it moves


def _state_array(name: str, value, shape) -> np.ndarray:
    """A state dict's ``value`` for the parameter or buffer ``name`` as an array, checked:
    numbers (a string array of "nan" would convert) of the model's ``shape``."""
    arr = np.asarray(value.numpy(writable=False) if isinstance(value, Node) else value)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"load_state_dict: {name!r} has dtype {arr.dtype} in the checkpoint; "
                        f"expected numbers (bool, integer or float)")
    if arr.shape != shape:
        raise ValueError(f"load_state_dict: {name} has shape {arr.shape} in the checkpoint but "
                         f"{shape} in the model")
    return arr


def _moved(t: Tensor, device, dtype) -> Tensor:
    """``t`` on ``device`` (None: its own), cast to ``dtype`` when both are floats."""
    if device is not None:
        t = t.to(device)
    if dtype is not None and t.dtype.kind == "f" and t.dtype != dtype:
        t = realize(t.astype(dtype))
    return t


def _move(node: Node, device, dtype) -> None:
    node.set_value(_moved(node.value, device, dtype), move=True, cast=True)


_UNSET = object()
_PLAIN = (bool, int, float, str, tuple, type(None))  # values compared by ==


def _is_part(value) -> bool:
    return isinstance(value, (Module, Node, Tensor))


def _holds_parts(value) -> bool:
    """``value`` is a part of a model (a Module, Parameter, tensor) or a container of one."""
    if isinstance(value, (list, tuple)):
        return any(_is_part(v) for v in value)
    if isinstance(value, dict):
        return any(_is_part(v) for v in value.values())
    return _is_part(value)


def _noting(method, always: bool):
    """``method`` of a container that moves the version when the container held, or
    now holds, parts of a model (``always``: on every call)."""
    def changed(self, *args):
        before = always or _holds_parts(self)
        result = method(self, *args)
        if before or _holds_parts(self):
            structure_changed()
        return result

    changed.__name__ = method.__name__
    return changed


class PartList(list):
    """A list kept on a Module: changing the Modules or Parameters in it moves the
    structure version."""

    __slots__ = ()


class GroupList(PartList):
    """An optimizer's ``param_groups``: any change to the list moves the version."""

    __slots__ = ()


class PartDict(dict):
    """A dict kept on a Module: changing the Modules or Parameters in it moves the
    structure version."""

    __slots__ = ()


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend",
              "insert", "pop", "remove", "clear", "sort", "reverse"):
    setattr(PartList, _name, _noting(getattr(list, _name), False))
    setattr(GroupList, _name, _noting(getattr(list, _name), True))
for _name in ("__setitem__", "__delitem__", "__ior__", "pop", "popitem", "clear", "update",
              "setdefault"):
    setattr(PartDict, _name, _noting(getattr(dict, _name), False))


def _kept(value):
    """What a Module keeps for ``value``: an exact list or dict that is empty or holds
    parts becomes a tracked copy (so that changing it later moves the version)."""
    if type(value) is list and (not value or _holds_parts(value)):
        return PartList(value)
    if type(value) is dict and (not value or _holds_parts(value)):
        return PartDict(value)
    return value


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict`` returns, as PyTorch's: the model's keys the state did not
    have, and the state's keys the model does not have."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers and models.

    Parameters are found automatically: any attribute that is a Parameter, a
    Module, or a list/tuple/dict of them. ``forward`` does the work;
    calling the module calls it.
    """

    training = Watched()  # mt.capture keeps a recording per mode (node/capture.py)

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_buffers", {})  # name -> persistent (in state_dict)

    # Setting, replacing or deleting a Module, Parameter or tensor (or a container of
    # them) moves the structure version; a list or dict set empty or holding them is
    # kept as a tracked copy (PartList, PartDict) that moves it when its items change.
    # A setting changed (``dropout.p``, ``bn.momentum``) moves it too: a recording
    # froze the old value (tests/node/test_capture_modes.py).
    def __setattr__(self, name: str, value) -> None:
        old = vars(self).get(name, _UNSET)
        if _holds_parts(value) or _holds_parts(old) or self._setting_changed(name, old, value):
            structure_changed()
        object.__setattr__(self, name, _kept(value))

    def _setting_changed(self, name: str, old, new) -> bool:
        """A plain value set anew (``training`` is watched instead: node/capture.py)."""
        if old is _UNSET or old is new or isinstance(getattr(type(self), name, None), Watched):
            return False
        return not (type(old) is type(new) and type(new) in _PLAIN and old == new)

    def __delattr__(self, name: str) -> None:
        if _holds_parts(vars(self).get(name)):
            structure_changed()
        object.__delattr__(self, name)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        hooks = vars(self).get("_hooks")
        if not hooks:
            return self.forward(*args, **kwargs)
        return module_hooks.call(self, hooks, args, kwargs)

    # ---- hooks (nn/hooks.py) --------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` before ``forward``; a result replaces ``args``
        (``with_kwargs``: ``hook(module, args, kwargs)`` -> ``(args, kwargs)``)."""
        return RemovableHandle(module_hooks.hooks_of(self).pre, (hook, with_kwargs), prepend)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` after ``forward``; a result replaces the output
        (``with_kwargs``: ``hook(module, args, kwargs, output)``). ``always_call`` is
        accepted; the hook runs when ``forward`` returns."""
        return RemovableHandle(module_hooks.hooks_of(self).forward, (hook, with_kwargs),
                               prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` when the gradients with respect to
        the module's inputs are computed; a tuple returned replaces ``grad_input``."""
        return RemovableHandle(module_hooks.hooks_of(self).backward, hook, prepend)

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

    # ---- buffers: state that is not trained (BatchNorm's running statistics) ----
    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Keep ``tensor`` (a Node, Tensor, array or None) as attribute ``name``: moved by
        ``to()`` and, when ``persistent``, saved and loaded with the state dict."""
        if tensor is not None and not isinstance(tensor, Node):
            tensor = Node(tensor if isinstance(tensor, Tensor) else from_array(np.asarray(tensor)))
        setattr(self, name, tensor)
        vars(self).setdefault("_buffers", {})[name] = persistent

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Node]]:
        for mod_name, module in self.named_modules(prefix):
            for name, _ in vars(module).get("_buffers", {}).items():
                value = getattr(module, name, None)
                if value is not None:
                    yield (f"{mod_name}.{name}" if mod_name else name), value

    def buffers(self) -> Iterator[Node]:
        for _, buffer in self.named_buffers():
            yield buffer

    def _state_items(self) -> Iterator[tuple[str, Node]]:
        """Parameters and persistent buffers, module by module, as PyTorch orders them."""
        params = dict(self.named_parameters())
        for mod_name, module in self.named_modules():
            prefix = f"{mod_name}." if mod_name else ""
            for name, value in vars(module).items():
                for pname, param in _members(value, name, Parameter):
                    if params.pop(prefix + pname, None) is not None:
                        yield prefix + pname, param
            for name, persistent in vars(module).get("_buffers", {}).items():
                value = getattr(module, name, None)
                if persistent and value is not None:
                    yield prefix + name, value

    # ---- modes and gradients --------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (``set_to_none``, PyTorch's default), or write
        zeros into it."""
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.value[...] = 0

    def apply(self, fn) -> Module:
        """``fn(module)`` for every submodule, children before their parent, then self
        (as PyTorch's: ``model.apply(init_weights)``)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---- state ------------------------------------------------------------------
    def state_dict(self) -> OrderedDict:
        """Parameter and persistent buffer name -> detached Node sharing its data."""
        return OrderedDict((name, p.detach()) for name, p in self._state_items())

    def load_state_dict(self, state: dict, strict: bool = True) -> IncompatibleKeys:
        """Copy values into the parameters and buffers in place (so optimizers keep
        working); every value is checked (numbers, the model's shape) before any is
        written. Returns the keys that did not match (strict: there are none)."""
        params = dict(self._state_items())
        keys = IncompatibleKeys([k for k in params if k not in state],  # PyTorch's orders
                                [k for k in state if k not in params])
        if strict and (keys.missing_keys or keys.unexpected_keys):
            raise KeyError(f"load_state_dict: missing keys {keys.missing_keys}, unexpected keys "
                           f"{keys.unexpected_keys} for {type(self).__name__}")
        arrays = {name: _state_array(name, value, params[name].shape)
                  for name, value in state.items() if name in params}
        for name, arr in arrays.items():
            p = params[name]
            p.value[...] = from_array(np.require(arr, p.dtype, "C")).to(p.device)  # keeps 0-d
        return keys

    def to(self, *args, device=None, dtype=None, non_blocking: bool = False) -> Module:
        """PyTorch's ``to``: ``to(device)``, ``to(dtype)`` (a dtype's name too: ``"half"``),
        ``to(device, dtype)``, ``to(tensor)`` (its device and dtype) or keywords. A dtype
        applies to floating-point parameters and buffers only (integer buffers keep
        theirs), and gradients follow."""
        for a in args:
            if isinstance(a, Node):
                device, dtype = a.device, a.dtype
            elif isinstance(a, (np.dtype, type)) or dtypes.is_name(a):
                dtype = a
            else:
                device = a
        dtype = None if dtype is None else dtypes.as_dtype(dtype)
        for p in self.parameters():
            _move(p, device, dtype)
            if p.grad is not None:
                p.grad = _moved(p.grad.value, device, dtype)
        for b in self.buffers():
            _move(b, device, dtype)
        return self

    def float(self) -> Module:
        return self.to(dtypes.float32)

    def double(self) -> Module:
        return self.to(dtypes.float64)

    def half(self) -> Module:
        """Floating-point parameters and buffers as float16 (stored as float16, computed
        in float32: tensor/dtypes.py)."""
        return self.to(dtypes.float16)

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

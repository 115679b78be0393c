"""Containers: ``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict`` and
``Identity``, as PyTorch's.

A container keeps each member as an attribute named by its key (``"0"``, ``"1"``...
for a list), so Module's discovery finds them as it finds any attribute: the state
dict of ``self.layers = ModuleList([...])`` has PyTorch's keys (``layers.0.weight``),
and changing a member moves the structure version (``mt.capture`` records again).
As in PyTorch, a key may not be the name of another attribute (``training``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from ..node.node import Node
from .module import Module, Parameter


def _as_parameter(value) -> Parameter:
    """PyTorch's ParameterList/Dict keep tensors as Parameters (requiring grad)."""
    if isinstance(value, Parameter):
        return value
    if isinstance(value, Node):
        return Parameter(value)
    raise TypeError(f"a parameter container holds tensors, got {type(value).__name__}")


def _as_module(value) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"a module container holds Modules, got {type(value).__name__}")
    return value


class _Members(Module):
    """Members as attributes named by their keys, in ``_keys`` order."""

    _checked = staticmethod(_as_module)

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_keys", {})  # key -> None: an ordered set

    def _put(self, key: str, value) -> None:
        key = str(key)
        if key not in self._keys and hasattr(self, key):
            raise KeyError(f"{type(self).__name__}: {key!r} is the name of an attribute")
        setattr(self, key, self._checked(value))
        self._keys[key] = None

    def _drop(self, key: str):
        value = getattr(self, key)
        delattr(self, key)
        del self._keys[key]
        return value

    def __len__(self) -> int:
        return len(self._keys)


class _ListMembers(_Members):
    """A list: members under ``"0"``, ``"1"``..., renumbered when one is inserted or
    removed."""

    def __init__(self, values: Iterable | None = None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def _values(self) -> list:
        return [getattr(self, k) for k in self._keys]

    def _reset(self, values: list) -> None:
        for key in list(self._keys):
            self._drop(key)
        for i, value in enumerate(values):
            self._put(str(i), value)

    def _index(self, i: int) -> str:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for a {type(self).__name__} of {n}")
        return str(i % n)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(self._values()[i])
        return getattr(self, self._index(i))

    def __setitem__(self, i: int, value) -> None:
        self._put(self._index(i), value)

    def __delitem__(self, i) -> None:
        values = self._values()
        del values[i if isinstance(i, slice) else int(self._index(i))]
        self._reset(values)

    def __iter__(self) -> Iterator:
        return iter(self._values())

    def __iadd__(self, values: Iterable):
        return self.extend(values)

    def __add__(self, other: Iterable):
        return type(self)([*self, *other])

    def append(self, value):
        self._put(str(len(self)), value)
        return self

    def extend(self, values: Iterable):
        for value in values:
            self.append(value)
        return self

    def insert(self, index: int, value) -> None:
        values = self._values()
        values.insert(index, value)
        self._reset(values)

    def pop(self, index: int = -1):
        value = self[index]
        del self[index]
        return value


class _DictMembers(_Members):
    """A dict: members under their keys, in insertion order."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.update(values)

    def __getitem__(self, key: str):
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value) -> None:
        self._put(key, value)

    def __delitem__(self, key: str) -> None:
        self.pop(key)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._keys))

    def keys(self):
        return list(self._keys)

    def values(self):
        return [getattr(self, k) for k in self._keys]

    def items(self):
        return [(k, getattr(self, k)) for k in self._keys]

    def update(self, values) -> None:
        pairs = values.items() if isinstance(values, (Mapping, _DictMembers)) else values
        for key, value in pairs:
            self._put(key, value)

    def pop(self, key: str):
        if key not in self._keys:
            raise KeyError(key)
        return self._drop(key)

    def clear(self) -> None:
        for key in list(self._keys):
            self._drop(key)


class ModuleList(_ListMembers):
    """Modules in a list: indexing, slicing (a new ModuleList), ``append``, ``extend``,
    ``insert``, ``len``, iteration. It has no ``forward``: call its members."""


class ModuleDict(_DictMembers):
    """Modules by name, in insertion order."""


class ParameterList(_ListMembers):
    """Parameters in a list (a tensor put in becomes a Parameter)."""

    _checked = staticmethod(_as_parameter)


class ParameterDict(_DictMembers):
    """Parameters by name (a tensor put in becomes a Parameter)."""

    _checked = staticmethod(_as_parameter)


class Identity(Module):
    """Returns its input; takes any arguments, as PyTorch's, and ignores them."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x

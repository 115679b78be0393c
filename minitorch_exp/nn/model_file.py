"""Whole models in a checkpoint, without pickle: the module tree as names and plain data.

``mt.save(model, path)`` writes a checkpoint (nn/checkpoint.py: atomic, ``.npz``,
never unpickled) whose root is :func:`encode`'s description of the model:

- a module is ``{"t": "module", "id": n, "class": [module, qualname], "attrs": {...}}``,
  its ``attrs`` being everything in its ``__dict__`` (``training``, settings,
  submodules, parameters, buffers);
- a Parameter, Node or Tensor is ``{"t": "tensor", "id": n, "kind": ...,
  "requires_grad": bool, "data": array}``: its values, the state dict's and
  non-persistent buffers' alike;
- a module or tensor met a second time (tied weights) is ``{"t": "ref", "id": n}``;
- numbers, strings, bools and None are ``{"t": "plain", "v": value}``; lists,
  tuples and dicts (str or int keys) of these are ``list``/``tuple``/``dict``
  nodes; a dtype is ``{"t": "dtype", "name": ...}``; a function or class used as
  a value (``activation=F.relu``) is ``{"t": "global", "ref": [module, qualname]}``.

Loading (:func:`decode`) first checks the whole description and resolves every
name, then builds. A name resolves only if it is allowed -- a Module subclass defined in
``minitorch_exp.nn``, a function of ``minitorch_exp.nn.functional``
(``F.relu`` as an activation), or an object the caller registered
with :func:`add_safe_globals` / :func:`safe_globals` -- and only by lookup in a
module that is already imported (``sys.modules``, then ``__dict__`` entries; no
``getattr``, so no module ``__getattr__`` runs). Nothing is imported and nothing
is called but ``cls.__new__(cls)``; attributes are written into the instance's
``__dict__``. A refused name raises :class:`UnsafeGlobalError` before any object
is made.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..node.node import Node
from ..tensor import dtypes
from ..tensor.tensor import Tensor, from_array
from .checkpoint import CheckpointError
from .module import Module, Parameter, _kept, structure_changed

__all__ = ["FORMAT", "UnsafeGlobalError", "add_safe_globals", "clear_safe_globals",
           "decode", "encode", "get_safe_globals", "is_model_file", "safe_globals"]

FORMAT = "minitorch_exp.module"
VERSION = 1
_ALLOWED_PACKAGE = "minitorch_exp.nn"
_FUNCTIONS = "minitorch_exp.nn.functional"  # the only functions allowed unasked
_PLAIN = (bool, int, float, str, type(None))

#: (module, qualname) -> the object the caller allowed.
_safe: dict[tuple[str, str], Any] = {}


class UnsafeGlobalError(CheckpointError):
    """A model file names a class or function that loading may not use."""


# ---------------------------------------------------------------- safe globals


def _name_of(obj: Any) -> tuple[str, str]:
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], str):
        obj, dotted = obj  # PyTorch's (object, "module.qualname") form
        module, _, qualname = dotted.rpartition(".")
        return module, qualname
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not (isinstance(module, str) and isinstance(qualname, str)) or "<locals>" in qualname:
        raise TypeError(f"add_safe_globals: expected module-level classes or functions, "
                        f"found {obj!r}")
    return module, qualname


def add_safe_globals(objs: Iterable[Any]) -> None:
    """Allow ``mt.load`` to rebuild these classes (Module subclasses) and functions,
    as ``torch.serialization.add_safe_globals``. Each may also be given as
    ``(obj, "module.qualname")``."""
    for obj in objs:
        _safe[_name_of(obj)] = obj[0] if isinstance(obj, tuple) else obj


def get_safe_globals() -> list[Any]:
    """The objects :func:`add_safe_globals` allowed."""
    return list(_safe.values())


def clear_safe_globals() -> None:
    """Forget every object :func:`add_safe_globals` allowed."""
    _safe.clear()


@contextlib.contextmanager
def safe_globals(objs: Iterable[Any]) -> Iterator[None]:
    """Allow ``objs`` for the ``with`` block only, as ``torch.serialization.safe_globals``."""
    before = dict(_safe)
    add_safe_globals(objs)
    try:
        yield
    finally:
        _safe.clear()
        _safe.update(before)


# ---------------------------------------------------------------------- encode


class _Encoder:
    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.keep: list[Any] = []  # holds encoded objects so their ids stay unique

    def seen(self, obj: Any) -> dict | None:
        n = self.ids.get(id(obj))
        return None if n is None else {"t": "ref", "id": n}

    def new_id(self, obj: Any) -> int:
        self.ids[id(obj)] = n = len(self.ids)
        self.keep.append(obj)
        return n

    def value(self, v: Any, where: str) -> dict:
        if isinstance(v, (Module, Node, Tensor)):
            ref = self.seen(v)
            if ref is not None:
                return ref
            return self.module(v, where) if isinstance(v, Module) else self.tensor(v)
        if isinstance(v, _PLAIN):
            return {"t": "plain", "v": v}
        if isinstance(v, np.dtype) and v in dtypes.SUPPORTED:
            return {"t": "dtype", "name": v.name}
        if type(v) in (list, tuple) or isinstance(v, list):  # PartList; not namedtuples
            kind = "tuple" if type(v) is tuple else "list"
            return {"t": kind, "items": [self.value(x, f"{where}[{i}]") for i, x in enumerate(v)]}
        if isinstance(v, dict):
            for k in v:
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"save: {where}: expected dict keys of type str or int, "
                                    f"found {k!r}")
            return {"t": "dict", "items": [[k, self.value(x, f"{where}[{k!r}]")]
                                           for k, x in v.items()]}
        if isinstance(v, (types.FunctionType, type)):
            return {"t": "global", "ref": list(_global_name(v, where))}
        raise TypeError(f"save: {where}: expected a Module, tensor, number, string, bool, "
                        f"None, dtype, function or a list/tuple/dict of them, found "
                        f"{type(v).__name__}")

    def module(self, m: Module, where: str) -> dict:
        n = self.new_id(m)
        attrs = {}
        for name, v in vars(m).items():
            if name == "_hooks":
                if v:
                    raise TypeError(f"save: {where} has hooks: they are functions of your "
                                    f"program; remove them, save, and register them again "
                                    f"after loading")
                continue
            attrs[name] = self.value(v, f"{where}.{name}")
        return {"t": "module", "id": n, "class": list(_global_name(type(m), where)),
                "attrs": attrs}

    def tensor(self, v: Node | Tensor) -> dict:
        n = self.new_id(v)
        kind = "parameter" if isinstance(v, Parameter) else "node" if isinstance(v, Node) \
            else "tensor"
        data = np.asarray(v.numpy(writable=False))
        grad = bool(v.requires_grad) if isinstance(v, Node) else False
        return {"t": "tensor", "id": n, "kind": kind, "requires_grad": grad, "data": data}


def _global_name(obj: Any, where: str) -> tuple[str, str]:
    module, qualname = obj.__module__, obj.__qualname__
    if "<locals>" in qualname:
        raise TypeError(f"save: {where}: {qualname} is defined inside a function; loading "
                        f"could not find it: define it at module level")
    return module, qualname


def encode(model: Module) -> dict:
    """The plain description of ``model`` that ``mt.save`` writes (see the module doc)."""
    return {"format": FORMAT, "version": VERSION, "root": _Encoder().value(model, "model")}


def is_model_file(root: Any) -> bool:
    """Whether a loaded checkpoint's root is a whole model's description."""
    return isinstance(root, dict) and isinstance(root.get("format"), str) \
        and root["format"] == FORMAT  # a mutated file may hold an array there


# ---------------------------------------------------------------------- decode


class _Decoder:
    """Checks a description (``build=False``), then builds it (``build=True``)."""

    def __init__(self, path: str, weights_only: bool) -> None:
        self.path = path
        self.weights_only = weights_only
        self.objects: dict[int, Any] = {}  # id -> object (or its kind, while checking)

    def fail(self, where: str, expected: str, found: Any) -> CheckpointError:
        return CheckpointError(f"{self.path}: model description at {where}: expected "
                               f"{expected}, found {str(found)[:200]}")

    def field(self, node: dict, key: str, kind: type | tuple, where: str) -> Any:
        value = node.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise self.fail(where, f"a field {key!r} of type {getattr(kind, '__name__', kind)}",
                            repr(value))
        return value

    def value(self, node: Any, where: str, build: bool) -> Any:
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise self.fail(where, 'an object with a "t" field', repr(node))
        kind = node["t"]
        if kind == "plain":
            v = node.get("v")
            if not isinstance(v, _PLAIN) or set(node) != {"t", "v"}:
                raise self.fail(where, "a number, string, bool or None", repr(v))
            return v
        if kind in ("list", "tuple"):
            items = [self.value(x, f"{where}[{i}]", build)
                     for i, x in enumerate(self.field(node, "items", list, where))]
            return tuple(items) if kind == "tuple" else items
        if kind == "dict":
            return self.mapping(node, where, build)
        if kind == "dtype":
            name = self.field(node, "name", str, where)
            if name not in [d.name for d in dtypes.SUPPORTED]:
                raise self.fail(where, "a supported dtype name", repr(name))
            return np.dtype(name)
        if kind == "global":
            return self.resolve(node.get("ref"), where, module_class=False)
        if kind == "ref":
            return self.ref(node, where, build)
        if kind == "module":
            return self.module(node, where, build)
        if kind == "tensor":
            return self.tensor(node, where, build)
        raise self.fail(where, "a known node type", repr(kind))

    def mapping(self, node: dict, where: str, build: bool) -> dict:
        out = {}
        for pair in self.field(node, "items", list, where):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (str, int))
                    and not isinstance(pair[0], bool)):
                raise self.fail(where, "a [str or int key, value] pair", repr(pair))
            out[pair[0]] = self.value(pair[1], f"{where}[{pair[0]!r}]", build)
        return out

    def new(self, node: dict, where: str, obj: Any) -> None:
        n = self.field(node, "id", int, where)
        if n in self.objects:
            raise self.fail(where, "an id not used before", n)
        self.objects[n] = obj

    def ref(self, node: dict, where: str, build: bool) -> Any:
        n = self.field(node, "id", int, where)
        if n not in self.objects:
            raise self.fail(where, "a reference to a module or tensor described before", n)
        return self.objects[n]

    def resolve(self, ref: Any, where: str, module_class: bool) -> Any:
        """The allowed object named ``[module, qualname]``; nothing imported or called."""
        if not (isinstance(ref, list) and len(ref) == 2 and all(isinstance(s, str) for s in ref)):
            raise self.fail(where, "a name [module, qualname]", repr(ref))
        module, qualname = ref
        what = "class" if module_class else "global"
        obj = _safe.get((module, qualname))
        if obj is None:
            if self.weights_only:
                raise UnsafeGlobalError(
                    f"{self.path}: at {where}: weights_only=True loads no {what} but those "
                    f"allowed by mt.serialization.add_safe_globals; found {module}.{qualname} "
                    f"(a whole model: load it with weights_only=False if you trust it)")
            obj = self.lookup(module, qualname, where, what)
        if module_class and not (isinstance(obj, type) and issubclass(obj, Module)):
            raise UnsafeGlobalError(f"{self.path}: at {where}: expected a Module subclass, "
                                    f"found {module}.{qualname}")
        return obj

    def lookup(self, module: str, qualname: str, where: str, what: str) -> Any:
        hint = ("if you trust it, allow it first: "
                "mt.serialization.add_safe_globals([obj]) or with "
                "mt.serialization.safe_globals([obj]): ...")
        if module != _ALLOWED_PACKAGE and not module.startswith(_ALLOWED_PACKAGE + "."):
            raise UnsafeGlobalError(f"{self.path}: at {where}: expected a {what} from "
                                    f"{_ALLOWED_PACKAGE} or one allowed by the caller, found "
                                    f"{module}.{qualname}; {hint}")
        obj = sys.modules.get(module)
        for part in qualname.split("."):
            namespace = None if obj is None else vars(obj) if isinstance(
                obj, (types.ModuleType, type)) else None
            if namespace is None or part not in namespace:
                raise UnsafeGlobalError(f"{self.path}: at {where}: expected a {what} that "
                                        f"exists in an imported module (loading imports "
                                        f"nothing), found {module}.{qualname}")
            obj = namespace[part]
        allowed = (isinstance(obj, type) and issubclass(obj, Module)) or (
            isinstance(obj, types.FunctionType) and module == _FUNCTIONS and "." not in qualname)
        if not allowed or obj.__module__ != module or obj.__qualname__ != qualname:
            raise UnsafeGlobalError(f"{self.path}: at {where}: expected a Module subclass of "
                                    f"{_ALLOWED_PACKAGE} or a function of {_FUNCTIONS}, found "
                                    f"{module}.{qualname}, a {type(obj).__name__}; {hint}")
        return obj

    def module(self, node: dict, where: str, build: bool) -> Any:
        cls = self.resolve(node.get("class"), where, module_class=True)
        attrs = self.field(node, "attrs", dict, where)
        obj = cls.__new__(cls) if build else "module"
        self.new(node, where, obj)
        values = {}
        for name, value in attrs.items():
            if not isinstance(name, str) or name.startswith("__") and name.endswith("__"):
                raise self.fail(where, "attribute names that are not __dunder__", repr(name))
            values[name] = self.value(value, f"{where}.{name}", build)
        if build:
            vars(obj).update({name: _kept(v) for name, v in values.items()})
        return obj

    def tensor(self, node: dict, where: str, build: bool) -> Any:
        kind = node.get("kind") if isinstance(node.get("kind"), str) else None
        grad = self.field(node, "requires_grad", bool, where)
        data = node.get("data")
        if kind not in ("parameter", "node", "tensor") or not isinstance(data, np.ndarray):
            raise self.fail(where, "a tensor of kind parameter, node or tensor with data",
                            f"kind {kind!r}, data {type(data).__name__}")
        if data.dtype not in dtypes.SUPPORTED or (grad and data.dtype.kind != "f") or (
                grad and kind == "tensor"):
            raise self.fail(where, "float data where requires_grad, and a supported dtype",
                            f"{data.dtype}, requires_grad={grad}")
        obj = kind
        if build:
            t = from_array(np.array(data, order="C"))
            obj = (Parameter(t, requires_grad=grad) if kind == "parameter"
                   else Node(t, requires_grad=grad) if kind == "node" else t)
        self.new(node, where, obj)
        return obj


def decode(root: Any, path: str, weights_only: bool = False) -> Module:
    """Rebuild the model a checkpoint's ``root`` describes (checked whole, then built)."""
    if not isinstance(root, dict) or type(root.get("version")) is not int \
            or root["version"] != VERSION:
        found = root.get("version") if isinstance(root, dict) else type(root).__name__
        raise CheckpointError(f"{path}: expected a model description version {VERSION}, "
                              f"found {found!r}")
    top = root.get("root")
    if not (isinstance(top, dict) and isinstance(top.get("t"), str) and top["t"] == "module"):
        raise CheckpointError(f"{path}: model description at model: expected a module node, "
                              f"found {str(top)[:200]}")
    _Decoder(path, weights_only).value(top, "model", build=False)
    decoder = _Decoder(path, weights_only)
    model = decoder.value(top, "model", build=True)
    structure_changed()
    return model


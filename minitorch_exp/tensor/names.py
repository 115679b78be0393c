"""Names for the tensors that explain() and debug output show: the user's, or stable ones.

A tensor is called, in this order of preference:

* the caller's variable name (``W``, ``x``), found in the caller's frames -- also
  for an object of a level above holding the expression (``__exp__``), and for
  the parts such an object names (``__exp_parts__``: a Node's gradient, ``W.grad``);
* a view of a named tensor: ``x.T``, ``b.expand(64, 5)``, ``W.reshape(12,)``;
* the name its memory was given by the code that made it (``name_after``: the
  gradient backward is writing is ``W.grad``; ``name_storage``: the temporary
  written by kernel 7 of the debug output is ``#7``);
* ``tensor#n``: a number given to its memory the first time it is shown, never
  reused for other memory in this process -- so one debug line's ``tensor#3``
  is the next one's ``tensor#3``, and no other tensor is.
"""

from __future__ import annotations

import itertools
import sys
import weakref

from . import layout as L
from .expr import Exp
from .tensor import Tensor

# Storage -> what its memory is called: a label ("#7"), or (owner, template, layout) for
# ``name_after``; weak, so the names go with the memory.
_STORAGE_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NUMBERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Storage -> "tensor#n"
_ANONYMOUS = itertools.count(1)


# ---- the caller's names ------------------------------------------------------------


def caller_names(depth: int = 8) -> dict[int, str]:
    """``id(value) -> variable name`` for expressions, and objects holding one, in the
    caller's frames (an object holding one names its expression too: ``held_exp``).

    The caller is the first frame outside this package (so ``e.explain()`` and a
    debug line from deep in the engine both see the user's names); up to
    ``depth`` enclosing frames add theirs, inner names winning.
    """
    return {i: name for i, (name, _) in caller_values(depth).items()}


def caller_values(depth: int = 8) -> dict[int, tuple[str, object]]:
    """``caller_names`` with the values: ``id(value) -> (name, value)``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("minitorch_exp"):
        frame = frame.f_back
    frames = []
    while frame is not None and len(frames) < depth:
        frames.append(frame)
        frame = frame.f_back
    found: dict[int, tuple[str, object]] = {}
    for f in reversed(frames):
        for scope in (f.f_globals, f.f_locals):
            found.update(_named_values(scope))
    del frame, frames
    return found


def _named_values(scope: dict) -> dict[int, tuple[str, object]]:
    found: dict[int, tuple[str, object]] = {}
    for name, value in list(scope.items()):
        held = None if name.startswith("_") else held_exp(value)
        if held is None:
            continue
        found[id(value)] = (name, value)
        if held is not value:
            found.setdefault(id(held), (name, held))
        parts = getattr(type(value), "__exp_parts__", None)
        for part, e in (parts(value) if parts else {}).items():
            found.setdefault(id(e), (f"{name}.{part}", e))
    return found


def held_exp(x) -> Exp | None:
    """The expression ``x`` stands for, evaluating nothing: ``x`` itself for an Exp;
    ``x.__exp__()`` for an object of a level above that holds one (a Node); else None."""
    if isinstance(x, Exp):
        return x
    hook = getattr(type(x), "__exp__", None)
    return None if hook is None else hook(x)


# ---- names given to memory ------------------------------------------------------------


def name_storage(t: Tensor, label: str, replace: bool = True) -> None:
    """Call the memory of ``t`` ``label`` (views of it: ``label.T``...) from now on
    (unless ``replace`` is False and it has a name)."""
    if replace or t.storage not in _STORAGE_NAMES:
        _STORAGE_NAMES[t.storage] = label


def name_after(t: Tensor, owner, template: str) -> None:
    """Call the memory of ``t`` after ``owner``'s name wherever the caller names
    ``owner``: ``template.format(name)`` (``"{}.grad"``). ``owner`` is held weakly."""
    _STORAGE_NAMES[t.storage] = (weakref.ref(owner), template, t.layout)


def _storage_name(t: Tensor, known: dict[int, str]) -> str:
    found = _STORAGE_NAMES.get(t.storage)
    if isinstance(found, tuple):
        owner, template, base = found
        name = known.get(id(owner()))
        if name is not None:
            suffix = view_suffix(t.layout, base)
            return template.format(name) + ("[view]" if suffix is None else suffix)
        found = None
    if found is None:
        found = _NUMBERS.get(t.storage)
        if found is None:
            found = _NUMBERS[t.storage] = f"tensor#{next(_ANONYMOUS)}"
    return found + view_suffix(t.layout)


# ---- views ----------------------------------------------------------------------------


def view_suffix(lay: L.Layout, base: L.Layout | None = None) -> str | None:
    """How ``lay`` reads memory laid out as ``base``: ``""`` (the same), ``".T"``,
    ``".expand(...)"``, ``".reshape(...)"``; None when it is none of these. Without
    ``base`` the memory is read as it was written (contiguously), and any other view
    is ``"[view]"``."""
    if base is None:
        if L.is_contiguous(lay.shape, lay.strides):
            return ""
        if len(lay.shape) > 1 and L.is_contiguous(lay.shape[::-1], lay.strides[::-1]):
            return ".T"
        return f".expand{lay.shape}" if 0 in lay.strides else "[view]"
    if lay == base:
        return ""
    if len(lay.shape) > 1 and (lay.shape[::-1], lay.strides[::-1], lay.offset) == base:
        return ".T"
    if lay.offset != base.offset:
        return None
    if 0 in lay.strides and _moving(lay) == _moving(base):
        return f".expand{lay.shape}"
    if (lay.numel == base.numel and L.is_contiguous(lay.shape, lay.strides)
            and L.is_contiguous(base.shape, base.strides)):
        return f".reshape{lay.shape}"
    return None


def _moving(lay: L.Layout) -> list:
    return [(n, s) for n, s in zip(lay.shape, lay.strides) if n != 1 and s != 0]


# ---- Names ------------------------------------------------------------------------------


class Names:
    """Labels for leaves: the user's variable name, a view of one (``x.T``), a name
    given to memory (``W.grad``, ``#7``), else ``tensor#n`` (see the module docstring).

    ``known``: ``id -> name`` (the caller's, a kernel's temporary ``K1``...);
    ``tensors``: ``(tensor, name)`` pairs whose views are named after them;
    ``stops``: ``id -> name`` of expressions ``formula`` writes by name, unexpanded.
    """

    def __init__(self, known: dict[int, str] | None = None, auto: str = "tensor#",
                 tensors=()):
        self.known = dict(known or {})
        self.auto: dict[int, str] = {}
        self.prefix = auto
        self.stops: dict[int, str] = {}
        self.bases: dict[int, list] = {}
        for t, name in tensors:
            self.bases.setdefault(id(t.storage), []).append((t, name))

    @classmethod
    def of_caller(cls, depth: int = 8) -> Names:
        """The caller's names, views of its tensors named after them."""
        values = caller_values(depth)
        return cls({i: name for i, (name, _) in values.items()},
                   tensors=[(v, name) for name, v in values.values() if type(v) is Tensor])

    def __call__(self, x) -> str:
        name = self.known.get(id(x))
        if name is None and isinstance(x, Tensor):
            name = self._tensor_name(x)
        if name is None:  # a placeholder that no split named
            name = self.auto.setdefault(id(x), f"{self.prefix}{len(self.auto) + 1}")
        return name

    def add_tensor(self, t: Tensor, name: str) -> None:
        """Call ``t``, and views of its memory, ``name`` (before other names for them)."""
        self.bases.setdefault(id(t.storage), []).insert(0, (t, name))

    def _tensor_name(self, t: Tensor) -> str:
        for base, name in self.bases.get(id(t.storage), ()):
            suffix = view_suffix(t.layout, base.layout)
            if suffix is not None:
                return name + suffix
        return _storage_name(t, self.known)

"""Hooks on tensors: ``x.register_hook(fn)`` calls ``fn(grad)`` when backward has the
gradient with respect to ``x``, and a result other than None replaces that gradient
(what reaches ``x.grad`` on a leaf, and what flows on into the graph otherwise).

Hooks live here, by Node, not on Node itself: backward asks only while
some are registered (``HOOKS`` non-empty), so a graph without hooks pays one test per
node. Module hooks (nn/hooks.py) are made of these.

A hook is Python, which a replay of ``mt.capture`` cannot run: adding or removing one
moves ``version`` (a structure source of capture: the next call runs eagerly), and a
hook that would run while a call is recorded raises ``CaptureError``
(``refuse_while_recording``).
"""

from __future__ import annotations

import itertools
import weakref

from ..tensor import capture as recording
from ..tensor.engine import realize

#: ``id(node)`` -> its hooks, a list of (handle id, hook) in the order they run; an
#: entry goes with its Node (a WeakKeyDictionary would compare Nodes with ``==``,
#: which is elementwise).
HOOKS: dict[int, list] = {}
_ids = itertools.count()
_version = 0  # moves whenever a hook, on a tensor or a module, is added or removed


def version() -> int:
    return _version


def _changed() -> None:
    global _version
    _version += 1


def refuse_while_recording(what: str) -> None:
    """Raise ``CaptureError`` if a step is being recorded: ``what`` would not run again."""
    if recording.is_recording():
        raise recording.CaptureError(
            f"{what} runs while mt.capture records a step, but a replay repeats kernels "
            "only and would skip it. Register hooks outside captured steps' models, or "
            "run the step without mt.capture")


class RemovableHandle:
    """What ``register_*hook`` returns: ``remove()`` takes the hook out of the list it was
    put in (a second call does nothing); as a context manager, removes it on exit."""

    def __init__(self, hooks: list, hook, prepend: bool = False):
        self._hooks, self.id = hooks, next(_ids)
        hooks.insert(0 if prepend else len(hooks), (self.id, hook))
        _changed()

    def remove(self) -> None:
        kept = [(i, h) for i, h in self._hooks if i != self.id]
        if len(kept) != len(self._hooks):
            self._hooks[:] = kept
            _changed()

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_hook(node, hook, *, prepend: bool = False) -> RemovableHandle:
    """PyTorch's ``Tensor.register_hook``: ``hook(grad)`` -> None or a new gradient."""
    if not node.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    hooks = HOOKS.get(id(node))
    if hooks is None:
        hooks = HOOKS[id(node)] = []
        weakref.finalize(node, HOOKS.pop, id(node), None)
    return RemovableHandle(hooks, hook, prepend)


def run_hooks(node, g):
    """``g`` (a Tensor or an expression, as backward carries it) after ``node``'s hooks,
    as a Tensor."""
    from .node import Node
    refuse_while_recording("a tensor hook")
    value = realize(g)
    for _, hook in list(HOOKS[id(node)]):
        out = hook(Node(value))
        if out is not None:
            if not isinstance(out, Node) or out.shape != node.shape:
                raise RuntimeError(f"a hook on a tensor of shape {node.shape} returned "
                                   f"{out!r}: return None or a tensor of that shape")
            value = out.value
    return value

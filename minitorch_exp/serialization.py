"""``mt.save`` / ``mt.load``: checkpoints of state dicts as ``.npz`` without pickle."""

from __future__ import annotations

from .nn.checkpoint import MAX_DEPTH
from .nn.checkpoint import load as _load_npz
from .nn.checkpoint import save as _save_npz
from .node.node import Node


def _plain(obj, depth: int = 0):
    """Replace Nodes by their NumPy values, recursively.

    Below MAX_DEPTH levels the rest is left as is: the checkpoint writer then
    refuses it with a clear error instead of this recursion overflowing.
    """
    if isinstance(obj, Node):
        return obj.numpy(writable=False)
    if depth > MAX_DEPTH:
        return obj
    if isinstance(obj, dict):
        return {k: _plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v, depth + 1) for v in obj]
    if isinstance(obj, tuple):  # namedtuples too (saved as plain tuples)
        return tuple(_plain(v, depth + 1) for v in obj)
    return obj


def save(obj, path) -> None:
    """Write ``obj`` (nested dicts/lists of tensors and plain values) atomically."""
    _save_npz(_plain(obj), path)


def load(path):
    """Read a checkpoint; arrays come back as tensors. Never unpickles."""
    from .node.node import from_numpy
    return _load_npz(path, wrap=lambda arr: from_numpy(arr.copy()))

"""``mt.save`` / ``mt.load``: checkpoints of state dicts and whole models as ``.npz``,
without pickle; safetensors files in and out (``save_safetensors``, ``load_safetensors``)."""

from __future__ import annotations

import numpy as np

from .nn.checkpoint import MAX_DEPTH
from .nn.checkpoint import load as _load_npz
from .nn.checkpoint import save as _save_npz
from .nn.model_file import (
    UnsafeGlobalError,
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    safe_globals,
)
from .nn.safetensors import SafetensorsError
from .node.node import Node
from .tensor.tensor import Tensor, from_array

__all__ = ["SafetensorsError", "UnsafeGlobalError", "add_safe_globals", "clear_safe_globals",
           "get_safe_globals", "load", "load_safetensors", "safe_globals", "save",
           "save_safetensors", "safetensors_metadata"]


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
    """Write ``obj`` atomically: nested dicts/lists of tensors and plain values, or a
    whole Module (its tree of classes, settings and tensors, without pickle:
    nn/model_file.py)."""
    from .nn.model_file import encode
    from .nn.module import Module
    _save_npz(encode(obj) if isinstance(obj, Module) else _plain(obj), path)


def _nodes(obj, wrap, depth: int = 0):
    """Arrays replaced by ``wrap(array)``, recursively (the checkpoint bounds the depth)."""
    if isinstance(obj, np.ndarray):
        return wrap(obj)
    if isinstance(obj, dict):
        return {k: _nodes(v, wrap, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_nodes(v, wrap, depth + 1) for v in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def load(path, weights_only: bool = False):
    """Read a checkpoint; arrays come back as tensors. Never unpickles.

    A whole model saved by ``save(model, path)`` is rebuilt from classes of
    ``minitorch_exp.nn`` and those allowed by :func:`add_safe_globals` /
    :func:`safe_globals`; nothing is imported and nothing called but ``cls.__new__``.
    ``weights_only=True`` (PyTorch's spelling) allows only the latter.
    """
    from .nn.model_file import decode, is_model_file
    from .node.node import from_numpy
    root = _load_npz(path)
    if is_model_file(root):
        return decode(root, str(path), weights_only=weights_only)
    return _nodes(root, lambda arr: from_numpy(arr.copy()))


def save_safetensors(tensors, path, metadata: dict[str, str] | None = None) -> None:
    """Write a state dict (or a Module's) as a safetensors file, atomically, as
    ``safetensors.torch.save_file``; no new dependency (nn/safetensors.py).

    Keys are the state dict's, PyTorch's for the same architecture, so PyTorch
    reads the file with ``model.load_state_dict(safetensors.torch.load_file(path))``.
    """
    from .nn.module import Module
    from .nn.safetensors import save_file
    if isinstance(tensors, Module):
        tensors = tensors.state_dict()
    arrays = {k: v.numpy(writable=False) if isinstance(v, (Node, Tensor)) else v
              for k, v in tensors.items()}
    save_file(arrays, path, metadata)


def load_safetensors(path) -> dict[str, Node]:
    """Read a safetensors file as name -> tensor, as ``safetensors.torch.load_file``;
    hand it to ``model.load_state_dict``. A damaged or hostile file raises
    ``SafetensorsError`` naming the file, the entry and the byte offsets."""
    from .nn.safetensors import load_file
    return {k: Node(from_array(arr)) for k, arr in load_file(path).items()}


def safetensors_metadata(path) -> dict[str, str] | None:
    """The ``__metadata__`` of a safetensors file (checked, its data unread)."""
    from .nn.safetensors import read_header
    return read_header(path)[1]

"""PyTorch's keyword spellings for Node-level functions: ``dim=``, ``keepdim=``, ``out=``.

The functions here take NumPy's names (``axis=``, ``keepdims=``), which stay; one
wrapped by ``pytorch_arguments`` takes PyTorch's as well, so ``x.sum(dim=1,
keepdim=True)`` and ``x.sum(axis=1, keepdims=True)`` are the same call.
"""

from __future__ import annotations

import functools

from .grad_mode import is_grad_enabled, no_grad
from .node import Node

#: PyTorch's keyword -> the one the functions here take.
RENAMED = {"dim": "axis", "keepdim": "keepdims"}


def pytorch_arguments(fn):
    """``fn`` that also takes ``dim=`` for ``axis=``, ``keepdim=`` for ``keepdims=``, and
    ``out=`` (the result written into that tensor, which is returned)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not kwargs:
            return fn(*args)
        out = kwargs.pop("out", None)
        for torch_name, name in RENAMED.items():
            if torch_name in kwargs:
                if name in kwargs:
                    raise TypeError(f"{fn.__name__}() got both {torch_name}= and {name}= "
                                    "(PyTorch's and NumPy's name of one argument); pass one")
                kwargs[name] = kwargs.pop(torch_name)
        result = fn(*args, **kwargs)
        return result if out is None else write_out(out, result, fn.__name__)
    return wrapper


def write_out(out, result, name: str):
    """Write ``result`` into ``out`` (PyTorch's ``out=``), outside the graph; returns ``out``.

    As in PyTorch, not differentiable: refused while grad mode is on and either side
    requires grad. ``out`` must have the result's shape (PyTorch would resize it);
    the values are converted to its dtype.
    """
    if isinstance(result, tuple):  # max(x, dim, out=(values, indices))
        return tuple(write_out(o, r, name) for o, r in zip(out, result, strict=True))
    if not isinstance(out, Node):
        raise TypeError(f"{name}: out= must be a tensor, got {type(out).__name__}")
    if is_grad_enabled() and (out.requires_grad or getattr(result, "requires_grad", False)):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires grad; "
                           "call it without out=, or under `with mt.no_grad():`")
    if tuple(out.shape) != tuple(result.shape):
        raise ValueError(f"{name}: out= has shape {tuple(out.shape)}, the result "
                         f"{tuple(result.shape)} (out= is not resized here, unlike PyTorch)")
    with no_grad():
        out[...] = result
    return out

"""Masks at the Node level: ``masked_fill`` and ``tril``/``triu``, differentiable, fused.

Each is one ``where`` (an elementwise op of the registry), so it stays lazy and
fuses with its neighbours, forward and backward. A triangle's mask is the
Tensor level's index predicate (tensor/masks.py ``triangle``: two aranges
compared), held by a constant Node: no mask the size of the input is made. The
``*_`` forms write into the tensor, outside the graph, as ``clamp_`` does.
"""

from __future__ import annotations

import functools

from ..tensor import dtypes, masks
from ..tensor.expr import Exp
from . import ops
from .grad_mode import no_grad
from .node import Node, lazy_value
from .pytorch import _in_place


def constant(e: Exp) -> Node:
    """A Node holding the expression ``e``, outside the graph: lazy (computed at once below
    the fusion threshold), so it fuses into what reads it."""
    return lazy_value(e, True, (), {})


def masked_fill(x: Node, mask, value) -> Node:
    """``value`` where the bool ``mask`` (broadcast against ``x``) holds, else ``x``; of
    ``x``'s dtype. ``x`` gets the gradient where ``mask`` is False, a tensor ``value``
    the sum of it where ``mask`` is True."""
    if getattr(mask, "dtype", None) != dtypes.bool_:
        raise TypeError(f"masked_fill: the mask must be a bool tensor, got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)} (compare it: mask == 0)")
    if isinstance(value, Node):
        value = ops.astype(value, x.dtype)
    else:
        value = masks.fill_value(value, x.dtype)
    return ops.elementwise("where", mask, value, x)


def _triangular(x: Node, diagonal: int, lower: bool, name: str) -> Node:
    if x.ndim < 2:
        raise ValueError(f"{name}: expected a tensor of 2 or more dims, got shape {x.shape}")
    keep = constant(masks.triangle(x.shape[-2], x.shape[-1], diagonal, lower, x.device))
    return ops.elementwise("where", keep, x, masks.fill_value(0, x.dtype))


def tril(x: Node, diagonal: int = 0) -> Node:
    """The lower triangle of (each matrix in) ``x``: zeros above the ``diagonal``-th
    diagonal (0 the main one, positive above it)."""
    return _triangular(x, diagonal, True, "tril")


def triu(x: Node, diagonal: int = 0) -> Node:
    """The upper triangle of (each matrix in) ``x``: zeros below the ``diagonal``-th."""
    return _triangular(x, diagonal, False, "triu")


def _in_place_form(fn):
    """``x.<name>_(...)``: ``fn``'s result written into ``x``, outside the graph."""
    name = f"{fn.__name__}_"

    @functools.wraps(fn)  # fn's signature
    def method(x: Node, *args, **kwargs) -> Node:
        with no_grad():
            result = fn(x, *args, **kwargs)
        return _in_place(x, "=", result, name)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{fn.__name__}``, written into ``x`` (in place, not recorded)."
    return method


#: ``mt.<name>`` (api.py).
FUNCTIONS = {"masked_fill": masked_fill, "tril": tril, "triu": triu}
#: Node's methods (installed below).
METHODS = {**FUNCTIONS, **{f"{name}_": _in_place_form(fn) for name, fn in FUNCTIONS.items()}}


def install() -> None:
    for name, method in METHODS.items():
        setattr(Node, name, method)


install()

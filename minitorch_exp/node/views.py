"""PyTorch's pieces and rearrangements at the Node level: views where a view can do it.

* ``split``, ``chunk``, ``unbind``, ``flip``: views, no copy -- the index keys of
  tensor/slicing.py handed to differentiable indexing (``ops.getitem``); a flip
  is a negative stride.
* ``repeat``: an expand of a view with a unit dim before each repeated one, then a
  reshape, which copies only when the strides cannot show the result (a repeat of
  a size-1 dim stays a view).
* ``roll``: the two slices of each rolled dim joined by ``cat``: one copy per dim.
"""

from __future__ import annotations

from ..tensor import slicing
from ..tensor.layout import normalize_axis, normalize_shape
from . import ops
from .node import Node
from .tensor_methods import narrow


def _pieces(x: Node, keys) -> tuple[Node, ...]:
    return tuple(ops.getitem(x, key) for key in keys)


def _length(x: Node, dim: int) -> int:
    return x.shape[normalize_axis(dim, x.ndim, x.shape)]


def split(x: Node, split_size_or_sections, dim: int = 0) -> tuple[Node, ...]:
    """``x`` in pieces of ``split_size`` along ``dim`` (the last shorter), or of the listed
    sizes: views."""
    sizes = slicing.split_sizes(_length(x, dim), split_size_or_sections)
    return _pieces(x, slicing.split_keys(x.shape, sizes, dim))


def chunk(x: Node, chunks: int, dim: int = 0) -> tuple[Node, ...]:
    """``x`` in at most ``chunks`` pieces of ``ceil(n / chunks)`` along ``dim``: views."""
    sizes = slicing.chunk_sizes(_length(x, dim), chunks)
    return _pieces(x, slicing.split_keys(x.shape, sizes, dim))


def unbind(x: Node, dim: int = 0) -> tuple[Node, ...]:
    """Each entry of ``x`` along ``dim``, that dim removed: views."""
    return _pieces(x, slicing.unbind_keys(x.shape, dim))


def flip(x: Node, dims) -> Node:
    """``x`` reversed along ``dims``: a view with negative strides."""
    return ops.getitem(x, slicing.flip_key(x.shape, dims))


def _flip_method(x: Node, *dims) -> Node:
    """``x.flip(0, 1)`` or ``x.flip((0, 1))``."""
    return flip(x, dims[0] if len(dims) == 1 else dims)


def repeat(x: Node, *sizes) -> Node:
    """``x`` tiled ``sizes[i]`` times along each dim (``sizes`` may add leading dims)."""
    sizes = normalize_shape(sizes)
    if len(sizes) < x.ndim:
        raise ValueError(f"repeat: {len(sizes)} repeats for a tensor of {x.ndim} dims; "
                         "give one per dim (more add leading dims)")
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    unit, expanded = [], []  # a unit dim before each repeated one, expanded to the repeat
    for r, n in zip(sizes, shape):
        if r != 1:
            unit.append(1)
            expanded.append(r)
        unit.append(n)
        expanded.append(n)
    tiled = ops.expand(ops.reshape(x, tuple(unit)), tuple(expanded))
    return ops.reshape(tiled, tuple(r * n for r, n in zip(sizes, shape)))


def roll(x: Node, shifts, dims=None) -> Node:
    """``x`` shifted by ``shifts`` along ``dims``, wrapping around (None: over the
    flattened values, shape kept)."""
    if dims is None:
        return ops.reshape(roll(ops.reshape(x, -1), shifts, 0), x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims; give one each")
    for shift, dim in zip(shifts, dims):
        n = _length(x, dim)
        shift = shift % n if n else 0
        if shift:
            x = ops.cat([narrow(x, dim, n - shift, shift), narrow(x, dim, 0, n - shift)], dim)
    return x


#: ``mt.<name>`` (api.py); PyTorch has no ``torch.repeat``.
FUNCTIONS = {"split": split, "chunk": chunk, "unbind": unbind, "flip": flip, "roll": roll}
#: Node's methods (installed below).
METHODS = {**FUNCTIONS, "flip": _flip_method, "repeat": repeat}


def install() -> None:
    for name, method in METHODS.items():
        setattr(Node, name, method)


install()

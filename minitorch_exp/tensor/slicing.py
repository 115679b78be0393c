"""A tensor in pieces, as basic index keys: ``split``, ``chunk``, ``unbind``, ``flip``.

Each piece is a view (a slice, an integer index, a negative step), so none copies.
The keys are pure functions of the shape (``split_keys``, ``unbind_keys``,
``flip_key``); the functions here index a Tensor with them, and the Node level
(node/views.py) hands the same keys to its differentiable indexing.
"""

from __future__ import annotations

import math

from . import layout as L
from .expr import as_exp
from .tensor import Tensor


def split_sizes(n: int, split_size_or_sections, name: str = "split") -> list[int]:
    """The lengths of the pieces of a dim of size ``n``: pieces of ``split_size`` (the
    last shorter), or the listed ``sections``, which must add up to ``n``."""
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size < 0 or (size == 0 and n != 0):
            raise ValueError(f"{name}: split_size must be positive (0 only for a dim of "
                             f"size 0), got {size} for a dim of size {n}")
        if n == 0:
            return [0]
        return [min(size, n - start) for start in range(0, n, size)]
    sizes = [int(s) for s in split_size_or_sections]
    if any(s < 0 for s in sizes) or sum(sizes) != n:
        raise ValueError(f"{name}: sections {sizes} must be non-negative and add up to "
                         f"{n}, the size of the dim")
    return sizes


def chunk_sizes(n: int, chunks: int) -> list[int]:
    """PyTorch's ``chunk``: pieces of ``ceil(n / chunks)`` -- so fewer than ``chunks``
    where they do not come out even; ``chunks`` empty ones for a dim of size 0."""
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    if n == 0:
        return [0] * chunks
    return split_sizes(n, math.ceil(n / chunks), "chunk")


def split_keys(shape: tuple, sizes: list[int], dim: int) -> list[tuple]:
    """The index key of each piece of ``sizes`` along ``dim``, in order."""
    dim = L.normalize_axis(dim, len(shape), shape)
    keys, start = [], 0
    for size in sizes:
        keys.append((slice(None),) * dim + (slice(start, start + size),))
        start += size
    return keys


def unbind_keys(shape: tuple, dim: int) -> list[tuple]:
    """The key of each entry along ``dim`` (that dim removed)."""
    dim = L.normalize_axis(dim, len(shape), shape)
    return [(slice(None),) * dim + (i,) for i in range(shape[dim])]


def flip_key(shape: tuple, dims) -> tuple:
    """The key that reverses ``dims``: a step of -1 there."""
    dims = L.normalize_axes(tuple(dims) if isinstance(dims, (list, tuple)) else dims,
                            len(shape), shape)
    return tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(len(shape)))


def _tensor(x) -> Tensor:
    """A Tensor to view: an expression is evaluated first (its views need memory)."""
    x = as_exp(x)
    return x if isinstance(x, Tensor) else x.eval()


def split(x, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """``x`` in pieces along ``dim``: views, no copy."""
    t = _tensor(x)
    sizes = split_sizes(t.shape[L.normalize_axis(dim, t.ndim, t.shape)], split_size_or_sections)
    return tuple(t[key] for key in split_keys(t.shape, sizes, dim))


def chunk(x, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``x`` in (at most) ``chunks`` pieces along ``dim``: views, no copy."""
    t = _tensor(x)
    sizes = chunk_sizes(t.shape[L.normalize_axis(dim, t.ndim, t.shape)], chunks)
    return tuple(t[key] for key in split_keys(t.shape, sizes, dim))


def unbind(x, dim: int = 0) -> tuple[Tensor, ...]:
    """Each entry of ``x`` along ``dim``, that dim removed: views, no copy."""
    t = _tensor(x)
    return tuple(t[key] for key in unbind_keys(t.shape, dim))


def flip(x, dims) -> Tensor:
    """``x`` reversed along ``dims``: a view with negative strides, no copy."""
    t = _tensor(x)
    return t[flip_key(t.shape, dims)]


#: ``T.<name>`` (tensor/__init__.py).
FUNCTIONS = {"split": split, "chunk": chunk, "unbind": unbind, "flip": flip}

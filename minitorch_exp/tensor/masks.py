"""Masks as expressions: ``masked_fill`` is a select, ``tril`` and ``triu`` an index predicate.

Neither makes a mask the size of its input. ``masked_fill(x, mask, value)`` is
``where(mask, value, x)``, the mask broadcast (stride 0) to ``x``'s shape. A
triangle keeps ``x[..., i, j]`` where ``j - i`` is on the right side of the
diagonal: a comparison of a column of row numbers ``(n, 1)`` and a row of column
numbers ``(1, m)``, two aranges that the select reads broadcast. All of it is
elementwise, so it fuses with what comes before and after: a causal mask followed
by a softmax adds no kernel to the softmax's own
(tests/node/test_masks.py::test_a_causal_mask_adds_no_kernel_to_softmax).
"""

from __future__ import annotations

from . import dtypes
from .creation import arange
from .expr import Exp, as_exp, where


def fill_value(value, dtype):
    """A Python-number ``value`` as a number of ``dtype`` (``1.5`` fills an integer
    tensor with 1, as in PyTorch), so the select keeps ``dtype``; a tensor as it is."""
    if isinstance(value, Exp):
        return value
    return dtypes.as_dtype(dtype).type(value).item()


def masked_fill(x, mask, value) -> Exp:
    """``value`` where ``mask`` (bool, broadcast to ``x``) holds, else ``x``."""
    x, mask = as_exp(x), as_exp(mask)
    if mask.dtype != dtypes.bool_:
        raise TypeError(f"masked_fill: the mask must be bool, got {mask.dtype} (compare it, "
                        "e.g. mask == 0, or .astype(bool))")
    return where(mask, fill_value(value, x.dtype), x)


def triangle(rows: int, cols: int, diagonal: int, lower: bool, device) -> Exp:
    """Bool ``(rows, cols)``: True on and below the ``diagonal``-th diagonal when ``lower``
    (``tril``'s kept entries), else on and above it (``triu``'s). Lazy, reading two
    aranges; 0 is the main diagonal, positive ones lie above it."""
    i = arange(rows, dtype=dtypes.int64, device=device).reshape(rows, 1)
    j = arange(cols, dtype=dtypes.int64, device=device).reshape(1, cols)
    return j - i <= diagonal if lower else j - i >= diagonal


def _triangular(x, diagonal: int, lower: bool, name: str) -> Exp:
    x = as_exp(x)
    if x.ndim < 2:
        raise ValueError(f"{name}: expected a tensor of 2 or more dims, got shape {x.shape}")
    keep = triangle(x.shape[-2], x.shape[-1], diagonal, lower, x.device)
    return where(keep, x, fill_value(0, x.dtype))


def tril(x, diagonal: int = 0) -> Exp:
    """The lower triangle of (each matrix in) ``x``, zeros above the ``diagonal``-th."""
    return _triangular(x, diagonal, True, "tril")


def triu(x, diagonal: int = 0) -> Exp:
    """The upper triangle of (each matrix in) ``x``, zeros below the ``diagonal``-th."""
    return _triangular(x, diagonal, False, "triu")


#: ``T.<name>`` and Exp's methods (installed below).
FUNCTIONS = {"masked_fill": masked_fill, "tril": tril, "triu": triu}


def install() -> None:
    for name, fn in FUNCTIONS.items():
        setattr(Exp, name, fn)


install()

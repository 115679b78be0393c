"""Sliding windows as strided views: the index arithmetic under convolution and pooling.

A window of a 2-D convolution or pooling with kernel ``(KH, KW)``, stride ``(sh, sw)``
and dilation ``(dh, dw)`` reads, for output position ``(oh, ow)`` and kernel offset
``(i, j)``, the input element ``x[n, c, oh*sh + i*dh, ow*sw + j*dw]``. Every index is
affine, so *all* windows together are one strided view of the input's storage --
im2col without copying anything::

    x strides (sn, sc, sh_, sw_)  ->  unfold(x) shape (C, KH, KW, N, OH, OW)
                                        strides (sc, dh*sh_, dw*sw_, sn, sh*sh_, sw*sw_)

The copy happens only where the product needs a matrix: ``im2col`` copies the view
into the ``(C*KH*KW, N*OH*OW)`` column matrix, one strided statement per kernel offset. The
channel-and-offset-major order (rows ``(c, i, j)``, columns ``(n, oh, ow)``) is chosen
for the memory walks: the copy reads and the accumulation back (``col2im``) writes
``ow`` contiguously, and the product is one GEMM however large the batch.

Padding has no storage to point into, so a padded input is a copy: a buffer of the
padded size filled with the pad value, the input written into its interior (one
pass, which also realizes a lazy input). Without padding the view is of the input
itself.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

from ..tensor import creation
from ..tensor.engine import evaluate, realize
from ..tensor.layout import Layout
from ..tensor.tensor import Tensor

Pair = tuple[int, int]


class Window(NamedTuple):
    """Where the windows of a 2-D convolution or pooling lie.

    ``pads`` is ``(top, bottom, left, right)``: asymmetric for ``padding='same'`` with
    an even kernel, and for ``ceil_mode`` pooling (the extra rows of the last window).
    """

    kernel: Pair
    stride: Pair
    dilation: Pair
    pads: tuple[int, int, int, int]
    out: Pair

    @property
    def offsets(self) -> list[Pair]:
        """Kernel offsets ``(i, j)`` in row-major order (the order PyTorch scans)."""
        return [(i, j) for i in range(self.kernel[0]) for j in range(self.kernel[1])]

    def padded(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape ``(N, C, H, W)`` takes once padded."""
        top, bottom, left, right = self.pads
        return (*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)


#: What a size at least ``least`` is called in an error.
_AT_LEAST = {0: "non-negative", 1: "positive"}


def _is_size(value, least: int) -> bool:
    return isinstance(value, numbers.Integral) and value >= least


def _wanted(where: str, name: str, least: int, form: str, value) -> ValueError:
    prefix = f"{where}: " if where else ""
    return ValueError(f"{prefix}{name} must be {_AT_LEAST[least]}: {form}, got {value!r}")


def window_sizes(value, name: str, n: int = 2, least: int = 1, where: str = "") -> tuple[int, ...]:
    """A kernel size, stride, padding or dilation as ``n`` ints, each ``least`` or more:
    ``3`` -> ``(3, 3)``, a tuple or list of ``n`` stays as it is. Anything else (zero, a
    negative, a float, another count) is a ValueError naming ``where``, ``name``, what it
    takes and ``value`` -- the one check every convolution and pooling argument passes."""
    items = (value,) * n if isinstance(value, numbers.Integral) else (
        tuple(value) if isinstance(value, (tuple, list)) else ())
    if len(items) != n or not all(_is_size(v, least) for v in items):
        raise _wanted(where, name, least, f"an int or a tuple of {n} int{'s' * (n > 1)}", value)
    return tuple(int(v) for v in items)


def window_count(value, name: str, least: int = 1, where: str = "") -> int:
    """``window_sizes`` for an argument that is one int only (``groups``)."""
    if not _is_size(value, least):
        raise _wanted(where, name, least, "an int", value)
    return int(value)


def out_size(size: int, kernel: int, stride: int, dilation: int, pad_total: int) -> int:
    """Windows along one dimension: ``(size + pads - dilation*(kernel-1) - 1) // stride + 1``."""
    return (size + pad_total - dilation * (kernel - 1) - 1) // stride + 1


def conv_window(in_hw: Pair, kernel: Pair, stride: Pair, dilation: Pair,
                pads: tuple[int, int, int, int]) -> Window:
    out = tuple(out_size(n, k, s, d, p0 + p1) for n, k, s, d, p0, p1 in
                zip(in_hw, kernel, stride, dilation, pads[0::2], pads[1::2]))
    return Window(kernel, stride, dilation, pads, out)


def pool_window(in_hw: Pair, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
                ceil_mode: bool) -> Window:
    """PyTorch's pooling sizes: with ``ceil_mode`` a last, partial window is kept when it
    starts inside the input or its left padding; the buffer grows on the far side."""
    out, extra = [], []
    for n, k, s, p, d in zip(in_hw, kernel, stride, padding, dilation):
        span = n + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        out.append(o)
        extra.append(max(0, (o - 1) * s + d * (k - 1) + 1 - (n + 2 * p)))
    pads = (padding[0], padding[0] + extra[0], padding[1], padding[1] + extra[1])
    return Window(kernel, stride, dilation, pads, tuple(out))


def pad(x, window: Window, value: float = 0.0) -> Tensor:
    """``x`` (N, C, H, W) in a buffer padded by ``window.pads`` with ``value``; no padding:
    ``x`` itself (realized)."""
    if not any(window.pads):
        return realize(x)
    top, _, left, _ = window.pads
    h, w = x.shape[-2:]
    buffer = creation.full(window.padded(x.shape), value, dtype=x.dtype, device=x.device)
    buffer[..., top:top + h, left:left + w] = x
    return buffer


def crop(padded: Tensor, window: Window, shape: tuple[int, ...]) -> Tensor:
    """The view of ``padded`` that the unpadded ``shape`` occupies (undoes ``pad``)."""
    top, _, left, _ = window.pads
    return padded[..., top:top + shape[-2], left:left + shape[-1]]


def unfold(x: Tensor, window: Window) -> Tensor:
    """Every window of ``x`` (N, C, H, W) as one view of shape (C, KH, KW, N, OH, OW).

    No copy: element ``(c, i, j, n, oh, ow)`` is ``x[n, c, oh*sh + i*dh, ow*sw + j*dw]``,
    an affine index, so a Layout over ``x``'s Storage says it.
    """
    sn, sc, sy, sx = x.strides
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = (window.kernel, window.stride,
                                              window.dilation, window.out)
    shape = (x.shape[1], kh, kw, x.shape[0], oh, ow)
    strides = (sc, dh * sy, dw * sx, sn, sh * sy, sw * sx)
    return Tensor(x.storage, Layout(shape, strides, x.offset))


def at_offset(x: Tensor, window: Window, i: int, j: int) -> Tensor:
    """The (N, C, OH, OW) view of ``x`` that kernel offset ``(i, j)`` reads: a strided slice."""
    (sh, sw), (dh, dw), (oh, ow) = window.stride, window.dilation, window.out
    return x[..., i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]


def im2col(x: Tensor, window: Window) -> Tensor:
    """The column matrix (C*KH*KW, N*OH*OW): ``unfold`` copied once, contiguously.

    One statement per kernel offset, each a 4-D strided copy: the compiled CPU loops
    take up to four dimensions, and the six of the whole view would fall back to a
    slower NumPy copy (``docs/conv.md`` has the numbers).
    """
    windows = unfold(x, window)
    cols = creation.new_empty(windows.shape, x.dtype, x.device)
    for i, j in window.offsets:
        cols[:, i, j] = windows[:, i, j]
    c, kh, kw = windows.shape[:3]
    return cols.view(c * kh * kw, -1)


def col2im(cols, window: Window, padded_shape: tuple[int, ...]) -> Tensor:
    """The adjoint of ``im2col``: sum each column back into the window it came from.

    ``cols`` (C*KH*KW, N*OH*OW) lands in a zeroed buffer of ``padded_shape``; windows
    overlap when the stride is below the kernel's extent, so each kernel offset is
    one strided ``+=`` statement of the engine (one fused pass each, KH*KW in all).
    """
    n, c = padded_shape[:2]
    (kh, kw), (oh, ow) = window.kernel, window.out
    cols = realize(cols).view(c, kh, kw, n, oh, ow)
    out = creation.zeros(padded_shape, dtype=cols.dtype, device=cols.device)
    for i, j in window.offsets:
        target = at_offset(out, window, i, j)
        target += cols[:, i, j].permute(1, 0, 2, 3)
    return out


def contiguous(e) -> Tensor:
    """``e`` (a tensor or an expression) as a contiguous tensor, copying only if needed."""
    t = evaluate(e)
    return t if t.is_contiguous() else t.contiguous()

"""Resampling: interpolation, pixel shuffles, and the fixed matrices under them.

Nearest and (bi)linear interpolation are separable linear maps: along each spatial
axis, output position ``o`` reads a fixed mix of one or two input positions. So an
interpolation is ``R_h @ x @ R_w.T`` with two small constant matrices (one for a 3-D
input), two batched products whose gradient is the products' own -- the same form
``adaptive_avg_pool2d`` takes for uneven bins. The common case, nearest upsampling by
an integer factor, needs no product: it is a broadcast view of the input and one copy.

Where output ``o`` reads, as PyTorch computes it (``scale`` is ``1/scale_factor`` when a
factor is given, else ``in/out``):

* nearest: ``floor(o * scale)`` in float32, at most ``in - 1``;
* linear, ``align_corners=True``: ``o * (in - 1) / (out - 1)``;
* linear, ``align_corners=False``: ``(o + 0.5) * scale - 0.5``, at least 0;

a fractional source ``s`` mixes ``floor(s)`` and the next position by ``s - floor(s)``.

A pixel shuffle moves ``r*r`` channels into an ``r``-times larger plane: a reshape and
a permutation (views), and one copy to make the result contiguous.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..node import ops
from ..node.node import Node
from . import im2col
from .module import Module

_LINEAR = {"linear": 3, "bilinear": 4}


# ---- the fixed matrices ----------------------------------------------------------------

def _nearest_source(n_in: int, n_out: int, scale: float | None) -> np.ndarray:
    step = np.float32(1.0 / scale if scale else n_in / n_out)
    return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * step).astype(np.int64),
                      n_in - 1)


def _linear_source(n_in: int, n_out: int, scale: float | None, align_corners: bool):
    """The first source position of each output and the weight of the next one."""
    o = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = o * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src = np.maximum((o + 0.5) * (1.0 / scale if scale else n_in / n_out) - 0.5, 0.0)
    first = np.minimum(src.astype(np.int64), n_in - 1)
    return first, src - first


def _matrix(n_in: int, n_out: int, scale, mode: str, align_corners: bool, dtype) -> np.ndarray:
    """(n_out, n_in): row ``o`` holds the weights output ``o`` gives each input position."""
    m = np.zeros((n_out, n_in), dtype=np.float64)
    rows = np.arange(n_out)
    if mode == "nearest":
        m[rows, _nearest_source(n_in, n_out, scale)] = 1.0
        return m.astype(dtype)
    first, frac = _linear_source(n_in, n_out, scale, align_corners)
    np.add.at(m, (rows, first), 1.0 - frac)
    np.add.at(m, (rows, np.minimum(first + 1, n_in - 1)), frac)
    return m.astype(dtype)


def separable(x: Node, matrices: list) -> Node:
    """``x`` (..., H, W) or (..., L) with each of its last ``len(matrices)`` axes mapped
    by a fixed (out, in) matrix: ``R_h @ x @ R_w.T``, or ``x @ R.T``."""
    def constant(m):
        return ops.as_node(np.ascontiguousarray(m)).to(x.device)
    if len(matrices) == 2:
        x = ops.matmul(constant(matrices[0]), x)
    return ops.matmul(x, constant(matrices[-1].T))


def _repeats(sizes_in, sizes_out, scales) -> tuple[int, ...] | None:
    """Each axis's integer factor when nearest interpolation repeats every element, else None."""
    factors = []
    for n, o, s in zip(sizes_in, sizes_out, scales):
        k = o // n
        if o % n or not np.array_equal(_nearest_source(n, o, s), np.arange(o) // k):
            return None
        factors.append(k)
    return tuple(factors)


def _repeat(x: Node, factors: tuple[int, ...]) -> Node:
    """Every element of the last axes repeated ``factors`` times: a broadcast view, one copy."""
    lead, spatial = x.shape[:-len(factors)], x.shape[-len(factors):]
    split = sum(((n, 1) for n in spatial), ())
    wide = sum(((n, k) for n, k in zip(spatial, factors)), ())
    big = ops.expand(ops.reshape(x, *lead, *split), *lead, *wide)
    return ops.reshape(big, *lead, *(n * k for n, k in zip(spatial, factors)))


# ---- F.interpolate ---------------------------------------------------------------------

def _output_sizes(x: Node, size, scale_factor, dims: int) -> tuple[tuple[int, ...], tuple]:
    """Output sizes and the scales the indices use (None: ``in/out``), checked as PyTorch."""
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor, got "
                         f"size={size!r}, scale_factor={scale_factor!r}")
    if size is not None:
        return im2col.window_sizes(size, "size", dims, where="interpolate"), (None,) * dims
    scales = (scale_factor,) * dims if isinstance(scale_factor, numbers.Real) else \
        tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else ()
    if len(scales) != dims or not all(isinstance(s, numbers.Real) and s > 0 for s in scales):
        raise ValueError(f"interpolate: scale_factor must be a positive number or a tuple of "
                         f"{dims}, got {scale_factor!r}")
    sizes = tuple(math.floor(n * float(s)) for n, s in zip(x.shape[2:], scales))
    if min(sizes) < 1:
        raise ValueError(f"interpolate: scale_factor={scale_factor!r} makes input of shape "
                         f"{x.shape} empty ({sizes})")
    return sizes, tuple(float(s) for s in scales)


def _check_mode(x: Node, mode: str, align_corners) -> None:
    if mode not in ("nearest", "area", *_LINEAR):
        raise NotImplementedError(f"interpolate: mode={mode!r} is not supported (nearest, "
                                  "linear, bilinear, area are)")
    if align_corners is not None and mode not in _LINEAR:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         f"linear | bilinear, not mode={mode!r}")
    if x.ndim not in (3, 4):
        raise ValueError(f"interpolate: expected input of shape (N, C, L) or (N, C, H, W), "
                         f"got shape {x.shape}")
    if mode in _LINEAR and _LINEAR[mode] != x.ndim:
        raise NotImplementedError(f"interpolate: got {x.ndim}-D input, but {mode} mode needs "
                                  f"{_LINEAR[mode]}-D input")


def interpolate(input: Node, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Node:
    """PyTorch's ``F.interpolate`` for (N, C, L) and (N, C, H, W) input: ``nearest``,
    ``linear`` / ``bilinear`` (``align_corners`` default False), and ``area``."""
    x = ops.as_node(input)
    _check_mode(x, mode, align_corners)
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    dims = x.ndim - 2
    sizes, scales = _output_sizes(x, size, scale_factor, dims)
    if recompute_scale_factor:
        scales = (None,) * dims
    if mode == "area":
        from .pooling import adaptive_avg_pool1d, adaptive_avg_pool2d  # imports this module
        return (adaptive_avg_pool2d if dims == 2 else adaptive_avg_pool1d)(x, sizes)
    if mode == "nearest" and (factors := _repeats(x.shape[2:], sizes, scales)):
        return _repeat(x, factors)
    matrices = [_matrix(n, o, s, mode, bool(align_corners), x.dtype)
                for n, o, s in zip(x.shape[2:], sizes, scales)]
    return separable(x, matrices)


class Upsample(Module):
    """``nn.Upsample``: ``F.interpolate`` with the arguments kept on the module."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x):
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                           self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"scale_factor={self.scale_factor!r}" if self.size is None else \
            f"size={self.size!r}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``nn.UpsamplingNearest2d``: ``Upsample(mode='nearest')``."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "nearest")


class UpsamplingBilinear2d(Upsample):
    """``nn.UpsamplingBilinear2d``: ``Upsample(mode='bilinear', align_corners=True)``."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "bilinear", True)


# ---- pixel shuffles --------------------------------------------------------------------

def _shuffle_input(name: str, input, factor, what: str) -> tuple[Node, int]:
    x = ops.as_node(input)
    factor = im2col.window_count(factor, what, where=name)
    if x.ndim < 3:
        raise ValueError(f"{name}: expected input of shape (*, C, H, W), got shape {x.shape}")
    return x, factor


def pixel_shuffle(input: Node, upscale_factor: int) -> Node:  # noqa: A002
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): channel ``c*r*r + i*r + j`` lands at offset
    ``(i, j)`` of each r-by-r block. Views, and one copy."""
    x, r = _shuffle_input("pixel_shuffle", input, upscale_factor, "upscale_factor")
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: the channel dimension of input of shape {x.shape} "
                         f"must be divisible by upscale_factor**2 = {r * r}")
    n = len(lead)
    blocks = ops.reshape(x, *lead, c // (r * r), r, r, h, w)
    moved = ops.permute(blocks, *range(n), n, n + 3, n + 1, n + 4, n + 2)
    return ops.reshape(moved, *lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Node, downscale_factor: int) -> Node:  # noqa: A002
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), the inverse of ``pixel_shuffle``."""
    x, r = _shuffle_input("pixel_unshuffle", input, downscale_factor, "downscale_factor")
    *lead, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"pixel_unshuffle: the height and width of input of shape {x.shape} "
                         f"must be divisible by downscale_factor={r}")
    n = len(lead)
    blocks = ops.reshape(x, *lead, c, h // r, r, w // r, r)
    moved = ops.permute(blocks, *range(n), n, n + 2, n + 4, n + 1, n + 3)
    return ops.reshape(moved, *lead, c * r * r, h // r, w // r)


class PixelShuffle(Module):
    """``nn.PixelShuffle(upscale_factor)``."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = im2col.window_count(upscale_factor, "upscale_factor",
                                                  where="PixelShuffle")

    def forward(self, x):
        return pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``nn.PixelUnshuffle(downscale_factor)``."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = im2col.window_count(downscale_factor, "downscale_factor",
                                                    where="PixelUnshuffle")

    def forward(self, x):
        return pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"

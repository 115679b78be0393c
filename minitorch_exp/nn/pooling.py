"""Pooling over the same strided windows as convolution (``nn/im2col.py``).

A 2-D pooling with kernel ``(KH, KW)`` reads each input position through one of
``KH*KW`` strided slices, one per kernel offset. Forward combines those slices
elementwise -- ``maximum`` of them, or their sum -- so a pooling is one fused pass
over its input, with no window ever copied. Backward writes the gradient back
through the same slices, one strided ``+=`` per offset (windows may overlap).

Max pooling also keeps, while a graph is recorded, which offset held each window's
first maximum (an int32 per output): PyTorch's tie rule, so the gradient of a
window of equal values (zeros after a ReLU) goes to one input, not to all of them.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..node import ops
from ..node.function import Function
from ..node.node import Node
from ..tensor import creation, dtypes
from ..tensor.engine import realize
from ..tensor.expr import apply_op
from ..tensor.tensor import from_array
from . import im2col
from .module import Module

#: Offsets combined per statement: longer chains (big kernels) go in several passes.
CHUNK = 16


def _fold(dst, terms, step, first) -> None:
    """``dst[...] = step(...step(step(first, t0), t1)..., tn)``, in statements of at most
    ``CHUNK`` steps (each later one reads ``dst`` back)."""
    e = first
    for n, term in enumerate(terms, 1):
        e = step(e, term)
        if n % CHUNK == 0:
            dst[...] = e
            e = dst
    if e is not dst:
        dst[...] = e


def _scatter_back(g, window: im2col.Window, padded_shape, shape, term):
    """The input gradient: ``term(k)`` added through the slice of kernel offset ``k``."""
    out = creation.zeros(padded_shape, dtype=g.dtype, device=g.device)
    for k, (i, j) in enumerate(window.offsets):
        target = im2col.at_offset(out, window, i, j)
        target += term(k)
    return im2col.crop(out, window, shape)


class MaxPool2dFunction(Function):
    """Max over each window; backward routes each gradient to the window's first maximum."""

    keyword_attributes = True

    @staticmethod
    def forward(ctx, x, *, window: im2col.Window):
        padded = im2col.pad(x, window, -math.inf)
        views = [im2col.at_offset(padded, window, i, j) for i, j in window.offsets]
        m = creation.new_empty(views[0].shape, x.dtype, x.device)
        _fold(m, views[1:], functools.partial(apply_op, "maximum"), views[0])
        if ctx.keeps_graph:  # which offset won: only a backward needs it
            first = creation.new_empty(m.shape, dtypes.int32, m.device)
            _fold(first, reversed(list(enumerate(views))),
                  lambda e, kv: apply_op("where", kv[1] == m, kv[0], e), len(views))
            ctx.attrs["shapes"] = (x.shape, padded.shape)
            ctx.save_for_backward(first)
        return m

    @staticmethod
    def backward(ctx, g):
        (first,) = ctx.saved_tensors
        shape, padded_shape = ctx.attrs["shapes"]
        g = realize(g)
        return (_scatter_back(g, ctx.attrs["window"], padded_shape, shape,
                              lambda k: apply_op("where", first == k, g, 0.0)),)


class AvgPool2dFunction(Function):
    """Sum over each window over ``divisor`` (a number, or per output position)."""

    keyword_attributes = True
    lazy = True  # the division fuses with what follows

    @staticmethod
    def forward(ctx, x, *, window: im2col.Window, divisor):
        padded = im2col.pad(x, window, 0.0)
        views = [im2col.at_offset(padded, window, i, j) for i, j in window.offsets]
        total = creation.new_empty(views[0].shape, x.dtype, x.device)
        _fold(total, views[1:], functools.partial(apply_op, "add"), views[0])
        ctx.attrs["shapes"] = (x.shape, padded.shape)
        return total / divisor

    @staticmethod
    def backward(ctx, g):
        shape, padded_shape = ctx.attrs["shapes"]
        share = realize(g / ctx.attrs["divisor"])
        return (_scatter_back(share, ctx.attrs["window"], padded_shape, shape,
                              lambda k: share),)


# ---- argument forms and checks ------------------------------------------------------------

def _pool_sizes(name: str, kernel_size, stride, padding, dilation):
    """``(kernel, stride, padding, dilation)`` as pairs, each checked (``stride`` None or
    ``[]``: the kernel's, as in PyTorch; 0 is refused, not taken for "unset")."""
    kernel = im2col.window_sizes(kernel_size, "kernel_size", where=name)
    unset = stride is None or (isinstance(stride, list) and not stride)
    stride = kernel if unset else im2col.window_sizes(stride, "stride", where=name)
    padding = im2col.window_sizes(padding, "padding", least=0, where=name)
    dilation = im2col.window_sizes(dilation, "dilation", where=name)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{name}: padding {padding} must be at most half of kernel_size="
                         f"{kernel}")
    return kernel, stride, padding, dilation


def _window(name: str, x: Node, kernel_size, stride, padding, dilation,
            ceil_mode: bool) -> im2col.Window:
    if x.ndim not in (3, 4):
        raise ValueError(f"{name}: expected input of shape (N, C, H, W) or (C, H, W), got "
                         f"shape {x.shape}")
    kernel, stride, padding, dilation = _pool_sizes(name, kernel_size, stride, padding,
                                                    dilation)
    window = im2col.pool_window(x.shape[-2:], kernel, stride, padding, dilation, ceil_mode)
    if min(window.out) < 1:
        raise ValueError(f"{name}: input of shape {x.shape} is too small for kernel_size="
                         f"{kernel} (dilation {dilation}, padding {padding}); the output "
                         f"would be {window.out}")
    return window


def _batched(fn):
    """Run ``fn`` on (N, C, H, W); a (C, H, W) input gains and then loses the batch dim."""
    @functools.wraps(fn)
    def wrapper(input, *args, **kwargs):  # noqa: A002
        x = ops.as_node(input)
        if x.ndim == 3:
            return ops.squeeze(fn(ops.unsqueeze(x, 0), *args, **kwargs), 0)
        return fn(x, *args, **kwargs)
    return wrapper


def _divisor(window: im2col.Window, shape, count_include_pad: bool, divisor_override,
             dtype, device):
    """How many elements each window averages: ``KH*KW`` everywhere, or per output
    position where windows are clipped (``ceil_mode``) or padding is not counted."""
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError("avg_pool2d: divisor_override must be non-zero")
        return float(divisor_override)
    h, w = shape[-2:]
    top, _, left, _ = window.pads  # the far sides may hold ceil_mode's extra rows too
    counted = np.zeros(window.padded(shape)[-2:])
    if count_include_pad:
        counted[:h + 2 * top, :w + 2 * left] = 1.0
    else:
        counted[top:top + h, left:left + w] = 1.0
    (sh, sw), (oh, ow) = window.stride, window.out
    counts = sum(counted[i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
                 for i, j in window.offsets)
    if np.all(counts == len(window.offsets)):
        return float(len(window.offsets))
    return from_array(counts.astype(dtype)).to(device)


# ---- functional forms -------------------------------------------------------------------

@_batched
def max_pool2d(input: Node, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode: bool = False, return_indices: bool = False) -> Node:
    """PyTorch's ``F.max_pool2d`` (input padded with -inf; ``stride`` defaults to the kernel)."""
    if return_indices:
        raise NotImplementedError("max_pool2d: return_indices=True is not supported")
    window = _window("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode)
    return MaxPool2dFunction.apply(input, window=window)


@_batched
def avg_pool2d(input: Node, kernel_size, stride=None, padding=0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override=None) -> Node:
    """PyTorch's ``F.avg_pool2d`` (zeros padding; ``count_include_pad`` counts it)."""
    window = _window("avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode)
    divisor = _divisor(window, input.shape, count_include_pad, divisor_override, input.dtype,
                       input.device)
    return AvgPool2dFunction.apply(input, window=window, divisor=divisor)


def _adaptive_matrix(n: int, out: int, dtype) -> np.ndarray:
    """(out, n): row ``i`` averages ``[floor(i*n/out), ceil((i+1)*n/out))``, PyTorch's bins."""
    m = np.zeros((out, n), dtype=dtype)
    for i in range(out):
        start, end = (i * n) // out, -(-((i + 1) * n) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


@_batched
def adaptive_avg_pool2d(input: Node, output_size) -> Node:  # noqa: A002
    """PyTorch's ``F.adaptive_avg_pool2d``: ``output_size`` an int or a pair (None: keep).

    Bins that tile the input evenly are an ``avg_pool2d``; otherwise the average is
    separable, ``P_h @ x @ P_w.T`` with fixed averaging matrices, two products.
    """
    if input.ndim != 4:
        raise ValueError(f"adaptive_avg_pool2d: expected input of shape (N, C, H, W) or "
                         f"(C, H, W), got shape {input.shape}")
    sizes = (output_size, output_size) if output_size is None or isinstance(
        output_size, int) else tuple(output_size)
    h, w = input.shape[-2:]
    oh, ow = (n if o is None else o for o, n in zip(sizes, (h, w)))
    if oh < 1 or ow < 1:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be positive, got {output_size}")
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(input, (h // oh, w // ow))
    rows = ops.as_node(_adaptive_matrix(h, oh, input.dtype)).to(input.device)
    cols = ops.as_node(_adaptive_matrix(w, ow, input.dtype).T.copy()).to(input.device)
    return ops.matmul(ops.matmul(rows, input), cols)


# ---- modules ------------------------------------------------------------------------------

class MaxPool2d(Module):
    """``nn.MaxPool2d``: the maximum of each window (``stride`` defaults to the kernel)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        _pool_sizes(type(self).__name__, kernel_size, stride, padding, dilation)
        stride = kernel_size if stride is None else stride
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x):
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                          self.ceil_mode, self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """``nn.AvgPool2d``: the mean of each window (``stride`` defaults to the kernel)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        _pool_sizes(type(self).__name__, kernel_size, stride, padding, 1)
        stride = kernel_size if stride is None else stride
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x):
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """``nn.AdaptiveAvgPool2d``: the mean over PyTorch's bins for an ``output_size``."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"

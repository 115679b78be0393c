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

from ..node import forms, ops
from ..node.function import Function
from ..node.node import Node
from ..tensor import creation, dtypes
from ..tensor.engine import realize
from ..tensor.expr import apply_op
from ..tensor.tensor import from_array
from . import im2col
from .module import Module
from .resample import separable

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


def window_scatter(g, *, window: im2col.Window, shapes, first=None, divisor=None):
    """A pooling's input gradient: each window's value of ``g`` added back through the
    window into an input of ``shapes[0]`` -- to the window's ``first`` maximum (max
    pooling), or over ``divisor`` to every position (average pooling); one strided
    ``+=`` per kernel offset (windows may overlap)."""
    shape, padded_shape = shapes
    g = realize(g if divisor is None else g / divisor)
    out = creation.zeros(padded_shape, dtype=g.dtype, device=g.device)
    for k, (i, j) in enumerate(window.offsets):
        target = im2col.at_offset(out, window, i, j)
        target += g if first is None else apply_op("where", first == k, g, 0.0)
    return im2col.crop(out, window, shape)


def window_gather(x, *, window: im2col.Window, shapes, first=None, divisor=None):
    """``window_scatter``'s adjoint: each window's value read from ``x`` -- at its
    ``first`` maximum, or summed over ``divisor``."""
    padded = im2col.pad(x, window, 0.0)
    views = [im2col.at_offset(padded, window, i, j) for i, j in window.offsets]
    out = creation.new_empty(views[0].shape, x.dtype, x.device)
    if first is None:
        _fold(out, views[1:], functools.partial(apply_op, "add"), views[0])
        return out / divisor
    _fold(out, enumerate(views), lambda e, kv: apply_op("where", first == kv[0], kv[1], e),
          0.0)
    return out


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

    backward_on_nodes = True

    @staticmethod
    def backward(ctx, g):
        (first,) = ctx.saved_tensors
        return (forms.of(g).window_scatter(g, window=ctx.attrs["window"],
                                           shapes=ctx.attrs["shapes"], first=first),)


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

    backward_on_nodes = True

    @staticmethod
    def backward(ctx, g):
        return (forms.of(g).window_scatter(g, window=ctx.attrs["window"],
                                           shapes=ctx.attrs["shapes"],
                                           divisor=ctx.attrs["divisor"]),)


class WindowScatter(Function):
    """A pooling's input gradient (``window_scatter``) as a node, so that it is
    differentiable again: it is linear in ``g``, and its gradient is its adjoint,
    ``WindowGather`` -- the pair differentiates to any order."""

    keyword_attributes = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, g, **where):
        return window_scatter(g, **where)

    @staticmethod
    def backward(ctx, h):
        return (forms.of(h).window_gather(h, **ctx.attrs),)


class WindowGather(Function):
    """``window_gather`` as a node: ``WindowScatter``'s adjoint, and its gradient."""

    keyword_attributes = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, **where):
        return window_gather(x, **where)

    @staticmethod
    def backward(ctx, g):
        return (forms.of(g).window_scatter(g, **ctx.attrs),)


forms.add({"window_scatter": window_scatter, "window_gather": window_gather},
          {"window_scatter": WindowScatter.apply, "window_gather": WindowGather.apply})


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
    return _max_pool("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def _max_pool(name: str, x: Node, kernel_size, stride, padding, dilation, ceil_mode: bool,
              return_indices: bool) -> Node:
    if return_indices:
        raise NotImplementedError(f"{name}: return_indices=True is not supported")
    window = _window(name, x, kernel_size, stride, padding, dilation, ceil_mode)
    return MaxPool2dFunction.apply(x, window=window)


@_batched
def avg_pool2d(input: Node, kernel_size, stride=None, padding=0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override=None) -> Node:
    """PyTorch's ``F.avg_pool2d`` (zeros padding; ``count_include_pad`` counts it)."""
    return _avg_pool("avg_pool2d", input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def _avg_pool(name: str, x: Node, kernel_size, stride, padding, ceil_mode: bool,
              count_include_pad: bool, divisor_override) -> Node:
    window = _window(name, x, kernel_size, stride, padding, 1, ceil_mode)
    divisor = _divisor(window, x.shape, count_include_pad, divisor_override, x.dtype, x.device)
    return AvgPool2dFunction.apply(x, window=window, divisor=divisor)


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
    (h, w), (oh, ow) = input.shape[-2:], _adaptive_out("adaptive_avg_pool2d", input,
                                                        output_size)
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(input, (h // oh, w // ow))
    return separable(input, [_adaptive_matrix(h, oh, input.dtype),
                             _adaptive_matrix(w, ow, input.dtype)])


def _adaptive_out(name: str, x: Node, output_size) -> tuple[int, int]:
    """An adaptive pooling's ``output_size`` (an int, or a pair whose None keeps the
    input's size) as a pair of positive ints, checked by the shared validator."""
    if x.ndim != 4:
        raise ValueError(f"{name}: expected input of shape (N, C, H, W) or (C, H, W), got "
                         f"shape {x.shape}")
    sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * 2
    if len(sizes) == 2:
        sizes = tuple(n if o is None else o for o, n in zip(sizes, x.shape[-2:]))
    return im2col.window_sizes(sizes, "output_size", where=name)


def _bins(n: int, out: int) -> np.ndarray:
    """(out, K) input positions of PyTorch's adaptive bins ``[floor(i*n/out),
    ceil((i+1)*n/out))``, each padded to the widest ``K`` by repeating its last position."""
    start = np.arange(out) * n // out
    end = -(-(np.arange(1, out + 1) * n) // out)
    k = int((end - start).max())
    return np.minimum(start[:, None] + np.arange(k), end[:, None] - 1)


@_batched
def adaptive_max_pool2d(input: Node, output_size, return_indices: bool = False) -> Node:  # noqa: A002
    """PyTorch's ``F.adaptive_max_pool2d``: the maximum over each adaptive bin.

    Even bins are a ``max_pool2d``. Uneven ones are gathered first into a tensor of
    equal (OH*KH, OW*KW) blocks -- a bin narrower than ``K`` repeats its last element,
    after the original, so the first maximum is still PyTorch's -- then max-pooled
    block by block; the gather's backward adds each gradient back to its element.
    """
    name = "adaptive_max_pool2d"
    (h, w), (oh, ow) = input.shape[-2:], _adaptive_out(name, input, output_size)
    if h % oh == 0 and w % ow == 0:
        return _max_pool(name, input, (h // oh, w // ow), None, 0, 1, False, return_indices)
    rows, cols = _bins(h, oh), _bins(w, ow)
    blocks = ops.getitem(input, (slice(None), slice(None), rows.reshape(-1, 1),
                                 cols.reshape(1, -1)))
    return _max_pool(name, blocks, (rows.shape[1], cols.shape[1]), None, 0, 1, False,
                     return_indices)


# ---- 1-D forms: a 2-D pooling over a height of one ------------------------------------------

def _lift(name: str, input, kernel_size, stride, padding, dilation=1):
    """A 1-D pooling's input (N, C, L) or (C, L) with a height of one, and its arguments
    as pairs (each checked as one int by the shared validator, named for ``name``)."""
    x = ops.as_node(input)
    if x.ndim not in (2, 3):
        raise ValueError(f"{name}: expected input of shape (N, C, L) or (C, L), got shape "
                         f"{x.shape}")
    return (ops.unsqueeze(x, -2), *_sizes_1d(name, kernel_size, stride, padding, dilation))


def _sizes_1d(name: str, kernel_size, stride, padding, dilation=1):
    """A 1-D pooling's (kernel, stride, padding, dilation), each one int, as 2-D pairs."""
    (k,), (p,), (d,) = (im2col.window_sizes(v, what, 1, least, name) for v, what, least in
                        ((kernel_size, "kernel_size", 1), (padding, "padding", 0),
                         (dilation, "dilation", 1)))
    unset = stride is None or (isinstance(stride, list) and not stride)
    (s,) = (k,) if unset else im2col.window_sizes(stride, "stride", 1, where=name)
    return (1, k), (1, s), (0, p), (1, d)


def _unbatched_2d(fn, name: str, x: Node, *args) -> Node:
    """``fn(name, x, ...)`` on (N, C, 1, L) or, for an unbatched (C, 1, L), on a batch of one."""
    if x.ndim == 3:
        return ops.squeeze(fn(name, ops.unsqueeze(x, 0), *args), 0)
    return fn(name, x, *args)


def max_pool1d(input: Node, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode: bool = False, return_indices: bool = False) -> Node:
    """PyTorch's ``F.max_pool1d`` over (N, C, L) or (C, L)."""
    x, k, s, p, d = _lift("max_pool1d", input, kernel_size, stride, padding, dilation)
    out = _unbatched_2d(_max_pool, "max_pool1d", x, k, s, p, d, ceil_mode, return_indices)
    return ops.squeeze(out, -2)


def avg_pool1d(input: Node, kernel_size, stride=None, padding=0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True) -> Node:
    """PyTorch's ``F.avg_pool1d`` over (N, C, L) or (C, L)."""
    x, k, s, p, _ = _lift("avg_pool1d", input, kernel_size, stride, padding)
    out = _unbatched_2d(_avg_pool, "avg_pool1d", x, k, s, p, ceil_mode, count_include_pad, None)
    return ops.squeeze(out, -2)


def adaptive_avg_pool1d(input: Node, output_size) -> Node:  # noqa: A002
    """PyTorch's ``F.adaptive_avg_pool1d`` over (N, C, L) or (C, L)."""
    x = ops.as_node(input)
    (size,) = output_size if isinstance(output_size, (tuple, list)) else (output_size,)
    return ops.squeeze(adaptive_avg_pool2d(ops.unsqueeze(x, -2), (1, size)), -2)


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


class AdaptiveMaxPool2d(Module):
    """``nn.AdaptiveMaxPool2d``: the maximum over PyTorch's bins for an ``output_size``."""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x):
        return adaptive_max_pool2d(x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class MaxPool1d(Module):
    """``nn.MaxPool1d``: the maximum of each window of (N, C, L) (``stride``: the kernel's)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        _sizes_1d("MaxPool1d", kernel_size, stride, padding, dilation)
        stride = kernel_size if stride is None else stride
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x):
        return max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                          self.ceil_mode, self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool1d(Module):
    """``nn.AvgPool1d``: the mean of each window of (N, C, L) (``stride``: the kernel's)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        _sizes_1d("AvgPool1d", kernel_size, stride, padding)
        stride = kernel_size if stride is None else stride
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

"""Convolutions: im2col as a strided view, the product through BLAS, col2im back.

Forward, for input ``x`` (N, C, H, W) and weight ``w`` (O, C/groups, KH, KW)::

    cols = im2col(pad(x))                  # (C*KH*KW, N*OH*OW): the one copy of x
    out  = w.reshape(O, -1) @ cols         # one GEMM (one per group), BLAS
    y    = out.view(O, N, OH, OW).permute(1, 0, 2, 3) + bias   # a view, and a lazy add

Backward, for the output gradient ``g`` seen as ``G`` (O, N*OH*OW)::

    dw = G @ cols.T                         # BLAS
    db = G.sum(1)
    dx = col2im(w.reshape(O, -1).T @ G)     # BLAS, then one strided += per kernel offset

How the windows are views, and why padding is a copy: ``nn/im2col.py``.
"""

from __future__ import annotations

import math

import numpy as np

from ..node import forms, ops
from ..node.function import Function
from ..node.node import Node
from ..tensor.engine import realize
from ..tensor.expr import Dot
from . import im2col, init
from .module import Module, Parameter


class Conv2dFunction(Function):
    """``conv2d`` as one node: forward and backward as in the module docstring. The
    backward is one body for both levels (``forms``): on Tensors the products reuse
    the forward's column matrix and one channels-first copy of ``g`` (``_columns``,
    ``_rows``); on Nodes each gradient is a convolution Function of its own, so it is
    differentiable again."""

    keyword_attributes = True
    lazy = True  # the bias add stays lazy and fuses with what follows (a ReLU)
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, weight, bias=None, *, window: im2col.Window, groups: int):
        cols = im2col.im2col(im2col.pad(x, window), window)
        w = realize(weight)
        ctx.save_for_backward(x, w)
        ctx.columns = (x, cols)  # for a first backward (``_columns``)
        return add_bias(correlate(w, cols, window, groups, x.shape[0]), bias)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        f, needs, at = _rule_parts(ctx, g)
        gx = f.conv_transpose2d(g, w, shape=x.shape, **at) if needs[0] else None
        gw = f.conv2d_weight(x, g, shape=w.shape, **at) if needs[1] else None
        if len(needs) == 2:
            return gx, gw
        return gx, gw, f.conv_bias_grad(g, **at) if needs[2] else None


class ConvTranspose2dFunction(Function):
    """``conv_transpose2d`` as one node, the convolution's adjoint (nn/conv_transpose.py's
    docstring): forward is the convolution's input gradient, backward its forward and
    weight gradient, one body for both levels as ``Conv2dFunction``'s."""

    keyword_attributes = True
    lazy = True  # the bias add stays lazy and fuses with what follows
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, weight, bias=None, *, window: im2col.Window, groups: int, shape):
        w = realize(weight)
        xt = channels_first(x, groups)
        ctx.save_for_backward(x, w)
        ctx.rows = (x, xt)  # for a first backward (``_rows``)
        y = scatter_columns(w, xt, window, groups, window.padded(shape), shape)
        return add_bias(y, bias)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        f, needs, at = _rule_parts(ctx, g)
        gx = f.conv2d(g, w, **at) if needs[0] else None
        gw = f.conv2d_weight(g, x, shape=w.shape, **at) if needs[1] else None
        if len(needs) == 2:
            return gx, gw
        return gx, gw, f.conv_bias_grad(g, **at) if needs[2] else None


class ConvWeightGrad(Function):
    """The weight gradient of a convolution with input ``x`` and output gradient ``g``,
    ``G @ im2col(x).T``, as a node of its own so that it is differentiable again: it is
    bilinear in ``x`` and ``g``, so its gradients are the convolution's other two maps
    with the upstream ``h`` (a weight's shape) in the weight's place -- the transposed
    convolution of ``g`` for ``x``, the convolution of ``x`` for ``g``."""

    keyword_attributes = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, g, *, window: im2col.Window, groups: int, shape):
        ctx.save_for_backward(x, g)
        return _weight_grad_of(x, g, window=window, groups=groups, shape=shape, memo=ctx)

    @staticmethod
    def backward(ctx, h):
        x, g = ctx.saved_tensors
        f, needs, at = _rule_parts(ctx, h)
        gx = f.conv_transpose2d(g, h, shape=x.shape, **at) if needs[0] else None
        gg = f.conv2d(x, h, **at) if needs[1] else None
        return gx, gg


# ---- each level's convolutions, as the rules above call them (``forms``) ----------------

def _rule_parts(ctx, g) -> tuple:
    """What a convolution's rule starts from: the functions for ``g``'s level, which
    inputs need a gradient, and the keywords every convolution form takes (the window,
    the groups, and the Context that keeps this call's shared operands)."""
    at = {"window": ctx.attrs["window"], "groups": ctx.attrs["groups"], "memo": ctx}
    return forms.of(g), ctx.needs_input_grad, at


def _columns(x, window: im2col.Window, memo):
    """``im2col(pad(x))``, made once per call of a Function (``memo``, its Context, keeps it
    by the identity of ``x``: the forward's, or the first product's that needs it)."""
    kept = memo.__dict__.get("columns")
    if kept is None or kept[0] is not x:
        kept = memo.columns = (x, im2col.im2col(im2col.pad(x, window), window))
    return kept[1]


def _rows(g, groups: int, memo):
    """``channels_first(g)``, made once per call of a Function, as ``_columns``."""
    kept = memo.__dict__.get("rows")
    if kept is None or kept[0] is not g:
        kept = memo.rows = (g, channels_first(g, groups))
    return kept[1]


def _correlate_of(x, w, *, window, groups, memo):
    return correlate(realize(w), _columns(x, window, memo), window, groups, x.shape[0])


def _scatter_of(x, w, *, window, groups, shape, memo):
    return scatter_columns(realize(w), _rows(x, groups, memo), window, groups,
                           window.padded(shape), shape)


def _weight_grad_of(x, g, *, window, groups, shape, memo):
    return weight_grad(_rows(g, groups, memo), _columns(x, window, memo), groups, shape)


def _bias_grad_of(g, *, window, groups, memo):
    """``g`` summed but over channels: over its channels-first copy where one was made."""
    kept = memo.__dict__.get("rows")
    if kept is not None and kept[0] is g:
        return kept[1].reshape(g.shape[1], -1).sum(1)
    return g.sum((0, 2, 3))


forms.add(
    {"conv2d": _correlate_of, "conv_transpose2d": _scatter_of,
     "conv2d_weight": _weight_grad_of, "conv_bias_grad": _bias_grad_of},
    {"conv2d": lambda x, w, *, window, groups, memo: Conv2dFunction.apply(
        x, w, window=window, groups=groups),
     "conv_transpose2d": lambda x, w, *, window, groups, shape, memo:
        ConvTranspose2dFunction.apply(x, w, window=window, groups=groups, shape=shape),
     "conv2d_weight": lambda x, g, *, window, groups, shape, memo: ConvWeightGrad.apply(
        x, g, window=window, groups=groups, shape=shape),
     "conv_bias_grad": lambda g, *, window, groups, memo: ops.sum(g, (0, 2, 3))})


# ---- the three products, shared with the transposed convolution (nn/conv_transpose.py) ----

def correlate(w, cols, window: im2col.Window, groups: int, batch: int):
    """``w`` (O, C/groups, KH, KW) times the column matrix ``cols``: the (N, O, OH, OW)
    output, a permuted view of one GEMM's (O, N*OH*OW) result (one per group)."""
    out = realize(Dot(_grouped(w, groups), _grouped(cols, groups)))
    return out.view(w.shape[0], batch, *window.out).permute(1, 0, 2, 3)


def add_bias(y, bias):
    """``y`` (N, O, ...) plus ``bias`` (O,) per channel, as a lazy add (or ``y``)."""
    if bias is None:
        return y
    return y + bias.reshape(1, bias.shape[0], *(1,) * (len(y.shape) - 2))


def channels_first(g, groups: int):
    """``g`` (N, O, OH, OW) as G (groups, O/groups, N*OH*OW), channels first, copied once
    (fused with whatever lazy expression ``g`` still is)."""
    return _grouped(im2col.contiguous(g.permute(1, 0, 2, 3)), groups)


def scatter_columns(w, gt, window: im2col.Window, groups: int, padded_shape, shape):
    """``col2im(w.T @ G)`` cropped to ``shape``: the convolution's input gradient, and
    the transposed convolution's output."""
    gcols = Dot(_grouped(w, groups).transpose(-1, -2), gt)
    return im2col.crop(im2col.col2im(gcols, window, padded_shape), window, shape)


def weight_grad(gt, cols, groups: int, shape):
    """``G @ cols.T`` (one GEMM per group) as a weight of ``shape``."""
    return realize(Dot(gt, _grouped(cols, groups).transpose(-1, -2))).view(shape)


def _grouped(t, groups: int):
    """A weight (O, ...) or column matrix (C*KH*KW, cols) as (groups, rows/groups, -1)."""
    return t.reshape(groups, t.shape[0] // groups, -1)


# ---- checks and argument forms ----------------------------------------------------------

def _same_pads(kernel, stride, dilation) -> tuple[int, int, int, int]:
    """PyTorch's ``padding='same'``: total ``dilation*(kernel-1)``, the odd one on the far side."""
    if stride != (1, 1):
        raise ValueError(f"padding='same' is not supported for strided convolutions "
                         f"(stride={stride}); give the padding as numbers")
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


def conv_pads(padding, kernel, stride, dilation, name: str) -> tuple[int, int, int, int]:
    """``(top, bottom, left, right)`` from an int, a pair, ``'valid'`` or ``'same'``."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        return _same_pads(kernel, stride, dilation)
    if isinstance(padding, str):
        raise ValueError(f"padding must be 'valid', 'same', an int or a pair, got {padding!r}")
    ph, pw = im2col.window_sizes(padding, "padding", least=0, where=name)
    return (ph, ph, pw, pw)


def _check_conv(name: str, x: Node, weight: Node, bias, groups: int) -> None:
    """Shapes and dtypes of a 2-D convolution's operands, each named in the error."""
    if x.ndim not in (3, 4):
        raise ValueError(f"{name}: expected input of shape (N, C, H, W) or (C, H, W), "
                         f"got shape {x.shape}")
    if weight.ndim != 4:
        raise ValueError(f"{name}: expected weight of shape (out_channels, in_channels/groups, "
                         f"kH, kW), got shape {weight.shape}")
    if weight.shape[0] % groups:
        raise ValueError(f"{name}: groups={groups} must be a positive divisor of the "
                         f"{weight.shape[0]} output channels")
    channels = x.shape[-3]
    if channels != weight.shape[1] * groups:
        raise ValueError(f"{name}: expected input with {weight.shape[1] * groups} channels "
                         f"(weight of shape {weight.shape}, groups={groups}), got input of "
                         f"shape {x.shape} with {channels}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{name}: expected bias of shape ({weight.shape[0]},), got "
                         f"{tuple(bias.shape)}")
    check_dtypes(name, x, weight, bias)


def check_dtypes(name: str, x: Node, weight: Node, bias) -> None:
    """The weight and bias have the input's dtype (a TypeError naming the one that differs)."""
    for other, what in ((weight, "weight"), (bias, "bias")):
        if other is not None and other.dtype != x.dtype:
            raise TypeError(f"{name}: input is {x.dtype.name} but {what} is "
                            f"{other.dtype.name}; convert one so that both match")


def _check_window(name: str, x_shape, window: im2col.Window) -> None:
    if min(window.out) < 1:
        padded = window.padded(x_shape)[-2:]
        extent = tuple(d * (k - 1) + 1 for k, d in zip(window.kernel, window.dilation))
        raise ValueError(f"{name}: input of shape {x_shape}, padded to {padded}, is smaller "
                         f"than the kernel's extent {extent} (kernel {window.kernel}, "
                         f"dilation {window.dilation})")


# ---- functional forms -----------------------------------------------------------------

def conv2d(input: Node, weight: Node, bias: Node | None = None, stride=1, padding=0,  # noqa: A002
           dilation=1, groups: int = 1) -> Node:
    """2-D cross-correlation, PyTorch's ``F.conv2d``: input (N, C, H, W) or (C, H, W),
    weight (O, C/groups, kH, kW); ``padding`` an int, a pair, ``'valid'`` or ``'same'``."""
    return _conv("conv2d", ops.as_node(input), ops.as_node(weight), bias, stride, padding,
                 dilation, groups)


def _conv(name: str, x: Node, weight: Node, bias, stride, padding, dilation, groups) -> Node:
    """``conv2d``, its errors naming ``name`` (the function the user called)."""
    groups = im2col.window_count(groups, "groups", where=name)
    _check_conv(name, x, weight, bias, groups)
    unbatched = x.ndim == 3
    if unbatched:
        x = ops.unsqueeze(x, 0)
    stride = im2col.window_sizes(stride, "stride", where=name)
    dilation = im2col.window_sizes(dilation, "dilation", where=name)
    kernel = weight.shape[2:]
    pads = conv_pads(padding, kernel, stride, dilation, name)
    window = im2col.conv_window(x.shape[2:], kernel, stride, dilation, pads)
    _check_window(name, x.shape, window)
    args = (x, weight) if bias is None else (x, weight, bias)
    out = Conv2dFunction.apply(*args, window=window, groups=groups)
    return ops.squeeze(out, 0) if unbatched else out


def conv1d(input: Node, weight: Node, bias: Node | None = None, stride=1, padding=0,  # noqa: A002
           dilation=1, groups: int = 1) -> Node:
    """1-D cross-correlation, PyTorch's ``F.conv1d``: input (N, C, L) or (C, L), weight
    (O, C/groups, k). A 2-D convolution over a height of one."""
    x, weight = ops.as_node(input), ops.as_node(weight)
    if x.ndim not in (2, 3) or weight.ndim != 3:
        raise ValueError(f"conv1d: expected input (N, C, L) or (C, L) and weight "
                         f"(out_channels, in_channels/groups, k), got shapes {x.shape} and "
                         f"{weight.shape}")
    (s,), (d,) = (im2col.window_sizes(v, name, 1, where="conv1d")
                  for v, name in ((stride, "stride"), (dilation, "dilation")))
    if not isinstance(padding, str):
        padding = (0, *im2col.window_sizes(padding, "padding", 1, 0, "conv1d"))
    out = _conv("conv1d", ops.unsqueeze(x, -2), ops.unsqueeze(weight, 2), bias, (1, s),
                padding, (1, d), groups)
    return ops.squeeze(out, -2)


# ---- modules --------------------------------------------------------------------------

class _ConvNd(Module):
    """Weight (out, in/groups, *kernel) and bias, with PyTorch's default initialisation:
    ``kaiming_uniform_(a=sqrt(5))`` for the weight, uniform(+-1/sqrt(fan_in)) for the bias.
    A ``transposed`` convolution's weight is (in, out/groups, *kernel), as in PyTorch."""

    transposed = False

    def __init__(self, dims: int, in_channels: int, out_channels: int, kernel_size, stride,
                 padding, dilation, groups: int, bias: bool, padding_mode: str,
                 dtype, generator):
        super().__init__()
        name = type(self).__name__
        kernel_size, stride, dilation = (im2col.window_sizes(v, what, dims, where=name) for v, what
                                         in ((kernel_size, "kernel_size"), (stride, "stride"),
                                             (dilation, "dilation")))
        if not isinstance(padding, str):
            padding = im2col.window_sizes(padding, "padding", dims, 0, name)
        groups = im2col.window_count(groups, "groups", where=name)
        for what, n in (("in_channels", in_channels), ("out_channels", out_channels)):
            if n % groups:
                raise ValueError(f"{what}={n} must be divisible by groups={groups}")
        if padding_mode != "zeros":
            raise NotImplementedError(f"padding_mode={padding_mode!r}: only 'zeros' is "
                                      "supported")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.groups, self.padding_mode = dilation, groups, padding_mode
        shape = ((in_channels, out_channels // groups) if self.transposed else
                 (out_channels, in_channels // groups)) + kernel_size
        self.weight = Parameter(np.empty(shape, dtype=dtype))
        self.bias = Parameter(np.empty(out_channels, dtype=dtype)) if bias else None
        self.reset_parameters(generator)

    def reset_parameters(self, generator=None) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=generator)
        if self.bias is not None:
            fan_in = math.prod(self.weight.shape[1:])
            bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
            init.uniform_(self.bias, -bound, bound, generator=generator)

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding not in (0, (0,), (0, 0), "valid"):
            text += f", padding={self.padding!r}"
        if self.dilation not in ((1,), (1, 1)):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + ("" if self.bias is not None else ", bias=False")


class Conv2d(_ConvNd):
    """``nn.Conv2d``: input (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 dtype=np.float32, generator=None):
        super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype, generator)

    def forward(self, x):
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                      self.groups)


class Conv1d(_ConvNd):
    """``nn.Conv1d``: input (N, C_in, L) -> (N, C_out, L_out)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 dtype=np.float32, generator=None):
        super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype, generator)

    def forward(self, x):
        padding = self.padding if isinstance(self.padding, str) else self.padding[0]
        return conv1d(x, self.weight, self.bias, self.stride[0], padding, self.dilation[0],
                      self.groups)

"""Transposed convolutions: the convolution's input gradient, run forward.

A convolution maps its input through ``im2col`` and a product; its input gradient
is the adjoint, a product and ``col2im``. A transposed convolution with input ``x``
(N, C_in, H, W) and weight ``w`` (C_in, C_out/groups, KH, KW) *is* that adjoint::

    X    = x as (groups, C_in/groups, N*H*W)            # channels first, one copy
    y    = crop(col2im(w.T @ X)) + bias                  # BLAS, one += per kernel offset

and so its backward is the convolution's forward and weight gradient::

    cols = im2col(pad(g))                                # (C_out*KH*KW, N*H*W)
    dx   = w @ cols                                      # BLAS
    dw   = X @ cols.T                                    # BLAS

The window is the convolution's seen from the other side: it lies over the
(padded) output, with ``(H, W)`` windows, one per input position. The output is
``(H-1)*stride - 2*padding + dilation*(K-1) + output_padding + 1`` long; the extra
``output_padding`` rows on the far side receive no column and hold the bias alone.
"""

from __future__ import annotations

import numpy as np

from ..node import ops
from ..node.node import Node
from . import im2col
from .conv import ConvTranspose2dFunction, _ConvNd, check_dtypes

# ---- sizes -----------------------------------------------------------------------------

def _out_sizes(in_hw, kernel, stride, padding, dilation, output_padding) -> tuple[int, ...]:
    return tuple((n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, k, s, p, d, op in
                 zip(in_hw, kernel, stride, padding, dilation, output_padding))


def output_padding_for(name: str, output_size, in_shape, kernel, stride, padding,
                       dilation) -> tuple[int, ...]:
    """The ``output_padding`` that makes the output ``output_size`` (the spatial sizes, or
    as many as ``in_shape`` has), as PyTorch's module forward computes it; a size out of
    reach of ``[smallest, smallest + stride - 1]`` is a ValueError naming both ends."""
    dims, given = len(kernel), tuple(output_size)
    if len(given) not in (dims, len(in_shape)):
        raise ValueError(f"{name}: for input of shape {tuple(in_shape)}, output_size must "
                         f"have {dims} or {len(in_shape)} elements (got {len(given)})")
    sizes, in_hw = given[-dims:], in_shape[-dims:]
    least = _out_sizes(in_hw, kernel, stride, padding, dilation, (0,) * dims)
    for size, lo, s in zip(sizes, least, stride):
        if not lo <= size <= lo + s - 1:
            raise ValueError(f"{name}: requested an output size of {sizes}, but valid sizes "
                             f"range from {least} to "
                             f"{tuple(a + b - 1 for a, b in zip(least, stride))} "
                             f"(for an input of {tuple(in_hw)})")
    return tuple(size - lo for size, lo in zip(sizes, least))


def _window(name: str, x: Node, weight: Node, stride, padding, output_padding, dilation,
            groups: int) -> tuple[im2col.Window, tuple[int, ...]]:
    """The convolution window over the padded output, and the output's shape."""
    stride, dilation = (im2col.window_sizes(v, what, where=name) for v, what in
                        ((stride, "stride"), (dilation, "dilation")))
    padding, output_padding = (im2col.window_sizes(v, what, least=0, where=name) for v, what
                               in ((padding, "padding"), (output_padding, "output_padding")))
    if any(op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
        raise ValueError(f"{name}: output_padding {output_padding} must be smaller than either "
                         f"stride {stride} or dilation {dilation}")
    kernel = weight.shape[2:]
    out = _out_sizes(x.shape[2:], kernel, stride, padding, dilation, output_padding)
    if min(out) < 1:
        raise ValueError(f"{name}: input of shape {x.shape} with kernel {kernel}, stride "
                         f"{stride}, padding {padding} and dilation {dilation} gives an "
                         f"output of size {out}; it must be positive")
    ph, pw = padding
    window = im2col.Window(kernel, stride, dilation, (ph, ph, pw, pw), tuple(x.shape[2:]))
    return window, (x.shape[0], weight.shape[1] * groups, *out)


# ---- functional forms -----------------------------------------------------------------

def conv_transpose2d(input: Node, weight: Node, bias: Node | None = None, stride=1,  # noqa: A002
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Node:
    """PyTorch's ``F.conv_transpose2d``: input (N, C_in, H, W) or (C_in, H, W), weight
    (C_in, C_out/groups, kH, kW); the adjoint of ``conv2d`` with the same arguments."""
    return _conv_transpose("conv_transpose2d", ops.as_node(input), ops.as_node(weight), bias,
                           stride, padding, output_padding, groups, dilation)


def _conv_transpose(name: str, x: Node, weight: Node, bias, stride, padding, output_padding,
                    groups, dilation) -> Node:
    groups = im2col.window_count(groups, "groups", where=name)
    _check_transposed(name, x, weight, bias, groups)
    unbatched = x.ndim == 3
    if unbatched:
        x = ops.unsqueeze(x, 0)
    window, shape = _window(name, x, weight, stride, padding, output_padding, dilation,
                            groups)
    args = (x, weight) if bias is None else (x, weight, bias)
    out = ConvTranspose2dFunction.apply(*args, window=window, groups=groups, shape=shape)
    return ops.squeeze(out, 0) if unbatched else out


def _check_transposed(name: str, x: Node, weight: Node, bias, groups: int) -> None:
    """Shapes and dtypes of a transposed convolution's operands, each named in the error."""
    if x.ndim not in (3, 4):
        raise ValueError(f"{name}: expected input of shape (N, C_in, H, W) or (C_in, H, W), "
                         f"got shape {x.shape}")
    if weight.ndim != 4:
        raise ValueError(f"{name}: expected weight of shape (in_channels, out_channels/groups, "
                         f"kH, kW), got shape {weight.shape}")
    if weight.shape[0] % groups:
        raise ValueError(f"{name}: groups={groups} must be a positive divisor of the "
                         f"{weight.shape[0]} input channels")
    if x.shape[-3] != weight.shape[0]:
        raise ValueError(f"{name}: expected input with {weight.shape[0]} channels (weight of "
                         f"shape {weight.shape}), got input of shape {x.shape} with "
                         f"{x.shape[-3]}")
    out_channels = weight.shape[1] * groups
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise ValueError(f"{name}: expected bias of shape ({out_channels},), got "
                         f"{tuple(bias.shape)}")
    check_dtypes(name, x, weight, bias)


def conv_transpose1d(input: Node, weight: Node, bias: Node | None = None, stride=1,  # noqa: A002
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Node:
    """PyTorch's ``F.conv_transpose1d``: input (N, C_in, L) or (C_in, L), weight
    (C_in, C_out/groups, k). A 2-D transposed convolution over a height of one."""
    x, weight = ops.as_node(input), ops.as_node(weight)
    name = "conv_transpose1d"
    if x.ndim not in (2, 3) or weight.ndim != 3:
        raise ValueError(f"{name}: expected input (N, C_in, L) or (C_in, L) and weight "
                         f"(in_channels, out_channels/groups, k), got shapes {x.shape} and "
                         f"{weight.shape}")
    (s,), (d,) = (im2col.window_sizes(v, what, 1, where=name)
                  for v, what in ((stride, "stride"), (dilation, "dilation")))
    (p,), (op,) = (im2col.window_sizes(v, what, 1, 0, name)
                   for v, what in ((padding, "padding"), (output_padding, "output_padding")))
    out = _conv_transpose(name, ops.unsqueeze(x, -2), ops.unsqueeze(weight, 2), bias, (1, s),
                          (0, p), (0, op), groups, (1, d))
    return ops.squeeze(out, -2)


# ---- modules --------------------------------------------------------------------------

class _ConvTransposeNd(_ConvNd):
    """Weight (in, out/groups, *kernel) and bias; ``forward(x, output_size=None)``."""

    transposed = True
    dims = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", dtype=np.float32, generator=None):
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be an int or a tuple of "
                             f"{self.dims} ints, got {padding!r}")
        super().__init__(self.dims, in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, padding_mode, dtype, generator)
        self.output_padding = im2col.window_sizes(output_padding, "output_padding", self.dims,
                                                  0, type(self).__name__)

    def _output_padding(self, x: Node, output_size) -> tuple[int, ...]:
        if output_size is None:
            return self.output_padding
        return output_padding_for(type(self).__name__, output_size, x.shape, self.kernel_size,
                                  self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        if any(self.output_padding):
            text += f", output_padding={self.output_padding}"
        return text


class ConvTranspose2d(_ConvTransposeNd):
    """``nn.ConvTranspose2d``: input (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""

    def forward(self, x, output_size=None):
        x = ops.as_node(x)
        return conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                self._output_padding(x, output_size), self.groups,
                                self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """``nn.ConvTranspose1d``: input (N, C_in, L) -> (N, C_out, L_out)."""

    dims = 1

    def forward(self, x, output_size=None):
        x = ops.as_node(x)
        (op,) = self._output_padding(x, output_size)
        return conv_transpose1d(x, self.weight, self.bias, self.stride[0], self.padding[0], op,
                                self.groups, self.dilation[0])

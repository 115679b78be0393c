"""``F.pad`` and the padding modules, as compositions of slices, flips and joins.

A pad of the last dims, PyTorch's way: ``pad = (left, right)`` for the last dim,
``(left, right, top, bottom)`` for the last two, and so on. Each padded dim is one
``cat`` of the input and its borders -- a constant, the edge repeated (replicate),
the edge mirrored (reflect) or the far side (circular) -- so the gradient is those
ops' gradients: slices of the output's gradient, summed where a border copied the
input. A negative pad crops.
"""

from __future__ import annotations

from ..node import ops
from ..node.node import Node, full
from ..node.tensor_methods import narrow
from ..node.views import flip
from .module import Module

MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Node, pad, mode: str = "constant", value: float | None = None) -> Node:  # noqa: A002
    """``torch.nn.functional.pad``."""
    x = ops.as_node(input)
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim or not all(isinstance(p, int) for p in pad):
        raise ValueError(f"pad: expected an even number of ints, at most 2 per dim of the "
                         f"{x.ndim}-D input, got {pad}")
    if mode not in MODES:
        raise ValueError(f"pad: mode must be one of {MODES}, got {mode!r}")
    if mode != "constant" and value not in (None, 0):
        raise ValueError(f"pad: value= is for mode 'constant', not {mode!r}")
    for i in range(len(pad) // 2):
        dim = x.ndim - 1 - i
        x = _pad_dim(x, dim, pad[2 * i], pad[2 * i + 1], mode, value or 0.0)
    return x


def _pad_dim(x: Node, dim: int, before: int, after: int, mode: str, value: float) -> Node:
    n = x.shape[dim]
    x = narrow(x, dim, max(-before, 0), n - max(-before, 0) - max(-after, 0))  # crops
    before, after, n = max(before, 0), max(after, 0), x.shape[dim]
    if mode == "reflect" and max(before, after) >= n or mode != "constant" and \
            max(before, after) > n:
        raise ValueError(f"pad: {mode} padding of {max(before, after)} needs a dim "
                         f"larger than that, dim {dim} has {n}")
    parts = [_border(x, dim, before, mode, value, first=True), x,
             _border(x, dim, after, mode, value, first=False)]
    parts = [p for p in parts if p is not None]
    return parts[0] if len(parts) == 1 else ops.cat(parts, dim)


def _border(x: Node, dim: int, width: int, mode: str, value: float, first: bool):
    """The ``width`` elements that go before (``first``) or after ``x`` along ``dim``."""
    if width == 0:
        return None
    n = x.shape[dim]
    if mode == "constant":
        shape = x.shape[:dim] + (width,) + x.shape[dim + 1:]
        return full(shape, value, dtype=x.dtype, device=x.device)
    if mode == "replicate":
        edge = narrow(x, dim, 0 if first else n - 1, 1)
        return ops.expand(edge, *(x.shape[:dim] + (width,) + x.shape[dim + 1:]))
    if mode == "reflect":  # the edge itself is not repeated
        side = narrow(x, dim, 1 if first else n - 1 - width, width)
        return flip(side, (dim,))
    return narrow(x, dim, n - width if first else 0, width)  # circular


class _Pad(Module):
    mode = "constant"
    dims = 2

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = (padding,) * (2 * self.dims) if isinstance(padding, int) \
            else tuple(padding)
        self.value = value

    def forward(self, x: Node) -> Node:
        return pad(x, self.padding, self.mode, self.value if self.mode == "constant" else None)

    def extra_repr(self) -> str:
        return f"{self.padding}"


def _pad_class(name: str, mode: str, dims: int, constant: bool = False) -> type:
    """A padding module: ``ConstantPad2d(padding, value)``, ``ReflectionPad1d(padding)``..."""
    if constant:
        return type(name, (_Pad,), {"mode": mode, "dims": dims})

    def __init__(self, padding):
        _Pad.__init__(self, padding)

    return type(name, (_Pad,), {"mode": mode, "dims": dims, "__init__": __init__})


ConstantPad1d = _pad_class("ConstantPad1d", "constant", 1, constant=True)
ConstantPad2d = _pad_class("ConstantPad2d", "constant", 2, constant=True)
ZeroPad1d = _pad_class("ZeroPad1d", "constant", 1)
ZeroPad2d = _pad_class("ZeroPad2d", "constant", 2)
ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1)
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2)
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1)
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2)
CircularPad1d = _pad_class("CircularPad1d", "circular", 1)
CircularPad2d = _pad_class("CircularPad2d", "circular", 2)

MODULES = [ConstantPad1d, ConstantPad2d, ZeroPad1d, ZeroPad2d, ReflectionPad1d,
           ReflectionPad2d, ReplicationPad1d, ReplicationPad2d, CircularPad1d, CircularPad2d]

"""PyTorch's spellings at the Node level: the names scripts written for PyTorch type.

Each is another name, or another form, of something node.py and ops.py already do;
nothing here computes on its own. ``docs/pytorch.md`` is the table of what maps one
to one and what differs. Importing this module installs its methods on Node.

* casts: ``x.float()``, ``.double()``, ``.long()``, ``.int()``, ``.bool()``,
  ``.type(dtype)``, ``.to(device, dtype)``; the dtype names (``DTYPES``);
* methods: ``mm``, ``t``, ``view_as``, ``contiguous``, ``add_``..., ``max(dim)``
  giving ``(values, indices)`` as PyTorch's does;
* functions: ``clamp``, ``max``, ``min``, ``mm``, ``allclose``, ``var``...;
* factories PyTorch has and the Tensor level does not: ``linspace``, ``logspace``,
  ``eye``, ``normal``, ``randint``, ``randperm``, ``as_tensor``.
"""

from __future__ import annotations

import builtins
import math
from collections import namedtuple

import numpy as np

from ..tensor import dtypes
from ..tensor.creation import default_generator
from ..tensor.device import Device, as_device
from . import ops
from .devices import default_device
from .devices import device as TorchDevice
from .grad_mode import no_grad
from .keywords import pytorch_arguments
from .node import Node, empty, from_numpy, randn, tensor

# ---- dtypes ---------------------------------------------------------------------------

#: PyTorch's dtype names -> the dtype here. The last four are named so that scripts
#: comparing with them run; making a tensor of one is refused (supported: six dtypes).
DTYPES = {
    "float16": dtypes.float16, "half": dtypes.float16,
    "float32": dtypes.float32, "float": dtypes.float32,
    "float64": dtypes.float64, "double": dtypes.float64,
    "int64": dtypes.int64, "long": dtypes.int64,
    "int32": dtypes.int32, "int": dtypes.int32,
    "bool": dtypes.bool_,
    "uint8": np.dtype(np.uint8), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "short": np.dtype(np.int16),
}
#: ``x.type()`` answers with PyTorch's type names, and ``x.type(name)`` takes them.
TYPE_NAMES = {dtypes.float32: "torch.FloatTensor", dtypes.float64: "torch.DoubleTensor",
              dtypes.int64: "torch.LongTensor", dtypes.int32: "torch.IntTensor",
              dtypes.bool_: "torch.BoolTensor", dtypes.float16: "torch.HalfTensor"}


def get_default_dtype() -> np.dtype:
    """The dtype of floats made from Python numbers: float32, as in PyTorch."""
    return dtypes.float32


def set_default_dtype(dtype) -> None:
    """Only float32 is possible here (``tensor([1.5])``, ``zeros(3)`` and promotion
    make float32); anything else is refused rather than ignored."""
    if dtypes.as_dtype(dtype) != dtypes.float32:
        raise NotImplementedError(f"set_default_dtype({dtype}): the default float dtype is "
                                  "fixed at float32 here; pass dtype= to factories instead")


def _is_dtype(x) -> bool:
    return isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic))


# ---- the tensor type ---------------------------------------------------------------------

class _TensorType(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Node)

    def __subclasscheck__(cls, sub) -> bool:
        return sub is cls or issubclass(sub, Node)


class Tensor(metaclass=_TensorType):
    """``mt.Tensor``: the type of tensors (``isinstance(x, mt.Tensor)`` is true of every
    Node), and PyTorch's legacy constructor: ``mt.Tensor([1.0, 2.0])`` a float32 copy of
    the data, ``mt.Tensor(2, 3)`` an uninitialized float32 tensor of that shape."""

    def __new__(cls, *data_or_shape) -> Node:
        if len(data_or_shape) == 1 and not isinstance(data_or_shape[0], (int, tuple)):
            return tensor(data_or_shape[0], dtype=dtypes.float32)
        return empty(*data_or_shape)


# ---- casts and moves --------------------------------------------------------------------

def to(x: Node, *args, dtype=None, device=None, non_blocking: bool = False,
       copy: bool = False) -> Node:
    """PyTorch's ``x.to(...)``: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``,
    ``to(other)`` (its device and dtype), or keywords. The same Node when nothing
    changes, unless ``copy``; differentiable. ``non_blocking`` is accepted and ignored."""
    for a in args:
        if isinstance(a, Node):
            device, dtype = a.device, a.dtype
        elif _is_dtype(a):
            dtype = a
        elif isinstance(a, (str, Device, TorchDevice)):
            device = a
        else:
            raise TypeError(f"to(): expected a device ('cpu', 'cuda:0', mt.device), a dtype "
                            f"(mt.float32...) or a tensor, got {a!r}")
    out = x
    if device is not None and as_device(device) != x.device:
        out = ops.to_device(out, device=as_device(device))
    if dtype is not None:
        out = ops.astype(out, dtype)
    return out.clone() if copy and out is x else out


def _cast(dtype):
    def cast(self: Node) -> Node:
        return ops.astype(self, dtype)
    cast.__doc__ = f"The values as {np.dtype(dtype).name} (differentiable between floats)."
    return cast


def type_(x: Node, dtype=None):
    """``x.type()``: PyTorch's name of its type (``'torch.FloatTensor'``); ``x.type(dtype)``
    (a dtype, or such a name): ``x.to(dtype)``."""
    if dtype is None:
        return TYPE_NAMES[x.dtype]
    if isinstance(dtype, str) and dtype in TYPE_NAMES.values():
        dtype = next(d for d, name in TYPE_NAMES.items() if name == dtype)
    return ops.astype(x, dtype)


def cuda(x: Node, device=None) -> Node:
    return to(x, "cuda" if device is None else device)


def contiguous(x: Node) -> Node:
    """``x`` itself when its values are laid out in order, else a contiguous copy."""
    value = x.value
    return x if value.is_contiguous() else ops.clone(x)


# ---- views and products ----------------------------------------------------------------

def view_as(x: Node, other: Node) -> Node:
    return ops.view(x, other.shape)


def reshape_as(x: Node, other: Node) -> Node:
    return ops.reshape(x, other.shape)


def expand_as(x: Node, other: Node) -> Node:
    return ops.expand(x, other.shape)


def type_as(x: Node, other: Node) -> Node:
    return ops.astype(x, other.dtype)


def _tensors(name: str, ndim: int, *xs) -> None:
    for i, x in enumerate(xs):
        if not isinstance(x, Node) or x.ndim != ndim:
            what = f"shape {tuple(x.shape)}" if isinstance(x, Node) else type(x).__name__
            raise ValueError(f"{name}: argument {i + 1} must be a {ndim}-D tensor, got {what}")


@pytorch_arguments
def mm(a: Node, b: Node) -> Node:
    """The product of two matrices (2-D only; ``matmul`` broadcasts)."""
    _tensors("mm", 2, a, b)
    return ops.matmul(a, b)


@pytorch_arguments
def bmm(a: Node, b: Node) -> Node:
    """The products of two batches of matrices (3-D only)."""
    _tensors("bmm", 3, a, b)
    return ops.matmul(a, b)


def t(x: Node) -> Node:
    """The transpose of a matrix; a 0-D or 1-D tensor as it is."""
    if x.ndim > 2:
        raise ValueError(f"t() expects a tensor with <= 2 dimensions, got shape {x.shape}; "
                         "use transpose(dim0, dim1) or permute")
    return x if x.ndim < 2 else ops.transpose(x, 0, 1)


def numel(x: Node) -> int:
    return x.numel()


def is_tensor(x) -> bool:
    return isinstance(x, Node)


def allclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(np.allclose(np.asarray(a), np.asarray(b), rtol, atol, equal_nan))


def equal(a: Node, b: Node) -> bool:
    """Same shape and the same values."""
    return a.shape == b.shape and bool(np.array_equal(np.asarray(a), np.asarray(b)))


# ---- clamp, max and min ------------------------------------------------------------------

@pytorch_arguments
def clamp(x: Node, min=None, max=None) -> Node:  # noqa: A002 -- PyTorch's names
    """``x`` bounded below by ``min`` and above by ``max`` (either may be None); the
    gradient passes where ``min <= x <= max``, as in PyTorch."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if max is None:
        return ops.where(x < min, min, x)
    if min is None:
        return ops.where(x > max, max, x)
    return ops.clip(x, min, max)


def clamp_(x: Node, min=None, max=None) -> Node:  # noqa: A002
    with no_grad():
        bounded = clamp(x, min, max)
    return _in_place(x, "=", bounded, "clamp_")


#: What ``max(x, dim)`` and ``min(x, dim)`` give: PyTorch's ``torch.return_types.max``.
MaxResult = namedtuple("max", ["values", "indices"])
MinResult = namedtuple("min", ["values", "indices"])


def _first_index_of(x: Node, values: Node, axis, keepdims: bool) -> Node:
    """The index along ``axis`` of the first element equal to ``values`` (kept dims)."""
    kept = values if keepdims else ops.unsqueeze(values, axis)
    return ops.argmax(x == kept, axis, keepdims=keepdims)


def _extremum(reduce, elementwise, result, x: Node, axis, keepdims: bool):
    if axis is None:
        return reduce(x, None, keepdims=keepdims)
    if isinstance(axis, (Node, np.ndarray)):  # max(x, other): the elementwise maximum
        return elementwise(x, axis)
    values = reduce(x, axis, keepdims=keepdims)
    return result(values, _first_index_of(x, values.detach(), axis, keepdims))


@pytorch_arguments
def max(x: Node, axis=None, keepdims: bool = False):  # noqa: A001 -- PyTorch's name
    """PyTorch's ``max``: ``max(x)`` the largest value; ``max(x, dim, keepdim=False)`` a
    ``(values, indices)`` pair; ``max(x, other)`` the elementwise ``maximum``."""
    return _extremum(ops.amax, ops.maximum, MaxResult, x, axis, keepdims)


@pytorch_arguments
def min(x: Node, axis=None, keepdims: bool = False):  # noqa: A001
    """PyTorch's ``min``: as ``max``, for the smallest."""
    return _extremum(ops.amin, ops.minimum, MinResult, x, axis, keepdims)


@pytorch_arguments
def argmin(x: Node, axis=None, keepdims: bool = False) -> Node:
    """The index of the first smallest value (over all values when ``axis`` is None)."""
    if axis is None:
        return ops.argmax(ops.reshape(x, -1) == ops.amin(x).detach())
    return _first_index_of(x, ops.amin(x, axis, keepdims=keepdims).detach(), axis, keepdims)


@pytorch_arguments
def var(x: Node, axis=None, unbiased: bool = True, keepdims: bool = False, *,
        correction: int | None = None) -> Node:
    """The variance, divided by ``n - correction`` (``correction``: 1, or 0 when not
    ``unbiased``), differentiable."""
    correction = (1 if unbiased else 0) if correction is None else correction
    axes = ops._axes(x, axis)
    n = math.prod(x.shape[a] for a in axes)
    d = x - ops.mean(x, axes, keepdims=True)
    return ops.sum(d * d, axes, keepdims=keepdims) / builtins.max(n - correction, 0)


@pytorch_arguments
def std(x: Node, axis=None, unbiased: bool = True, keepdims: bool = False, *,
        correction: int | None = None) -> Node:
    return ops.sqrt(var(x, axis, unbiased, keepdims, correction=correction))


# ---- in place --------------------------------------------------------------------------

def _in_place(x: Node, saver: str, other, name: str) -> Node:
    out = x._inplace(saver, other)
    if out is not x:  # recorded out of place: ``x`` itself did not change
        raise RuntimeError(
            f"{name}() on a tensor in the graph: here in-place ops are recorded out of "
            f"place, so x itself would not change; write x = x + y (or x += y, which "
            "rebinds x), or update it under `with mt.no_grad():`")
    return x


def _in_place_method(saver: str, name: str):
    def method(self: Node, other, alpha=1) -> Node:
        return _in_place(self, saver, other if alpha == 1 else other * alpha, name)
    method.__name__ = name
    method.__doc__ = f"PyTorch's ``x.{name}(other)`` (``alpha``: ``other * alpha``), in place."
    return method


def fill_(x: Node, value) -> Node:
    return _in_place(x, "=", value, "fill_")


def copy_(x: Node, src, non_blocking: bool = False) -> Node:
    """As torch's: ``src`` may be of another dtype and on another device."""
    if isinstance(src, Node) and src.device != x.device:
        src = src.to(x.device)
    return _in_place(x, "=", src, "copy_")


# ---- factories -------------------------------------------------------------------------

def _made(array: np.ndarray, dtype, device, requires_grad: bool) -> Node:
    dtype = dtypes.float32 if dtype is None else dtypes.as_dtype(dtype)
    return tensor(array.astype(dtype), device=default_device(device),
                  requires_grad=requires_grad)


def linspace(start, end, steps: int, *, dtype=None, device=None,
             requires_grad: bool = False) -> Node:
    """``steps`` evenly spaced values from ``start`` to ``end``, both included."""
    return _made(np.linspace(float(start), float(end), int(steps)), dtype, device,
                 requires_grad)


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None,
             requires_grad: bool = False) -> Node:
    """``base ** linspace(start, end, steps)``."""
    return _made(float(base) ** np.linspace(float(start), float(end), int(steps)), dtype,
                 device, requires_grad)


def eye(n: int, m: int | None = None, *, dtype=None, device=None,
        requires_grad: bool = False) -> Node:
    return _made(np.eye(n, m), dtype, device, requires_grad)


def normal(mean, std, size=None, *, generator=None, dtype=None, device=None,
           requires_grad: bool = False) -> Node:
    """Normal samples: ``mean`` and ``std`` numbers with a ``size``, or tensors (broadcast
    together) giving each sample's; not differentiable, as in PyTorch."""
    tensors = [a for a in (mean, std) if isinstance(a, Node)]
    if tensors:
        shape = np.broadcast_shapes(*(a.shape for a in tensors))
        like = tensors[0]
        dtype = like.dtype if dtype is None else dtype
        device = like.device if device is None else device
    elif size is None:
        raise TypeError("normal(mean, std, size): give size when mean and std are numbers")
    else:
        shape = (size,) if isinstance(size, int) else tuple(size)
    with no_grad():
        out = randn(shape, dtype=dtypes.float32 if dtype is None else dtype, device=device,
                    generator=generator)
        out = (out * std + mean).detach().realize()
    return out.requires_grad_(requires_grad)


def randint(*args, size=None, generator=None, dtype=None, device=None,
            requires_grad: bool = False) -> Node:
    """``randint(high, size)`` or ``randint(low, high, size)``: integers in [low, high)."""
    if size is None:
        *args, size = args
    low, high = (0, *args) if len(args) == 1 else args
    shape = (size,) if isinstance(size, int) else tuple(size)
    rng = generator or default_generator()
    values = rng.integers(low, high, shape)
    return _made(values, dtypes.int64 if dtype is None else dtype, device, requires_grad)


def randperm(n: int, *, generator=None, dtype=None, device=None) -> Node:
    """A random permutation of ``0 .. n-1``."""
    rng = generator or default_generator()
    return _made(rng.permutation(n), dtypes.int64 if dtype is None else dtype, device, False)


def as_tensor(data, dtype=None, device=None) -> Node:
    """``data`` as a tensor, sharing memory where it can: a Node (moved or cast only if
    asked) or a NumPy array of a supported dtype is not copied."""
    if isinstance(data, Node):
        return to(data, *(a for a in (device, dtype) if a is not None))
    if isinstance(data, np.ndarray) and data.dtype in dtypes.SUPPORTED and \
            (dtype is None or dtypes.as_dtype(dtype) == data.dtype) and \
            default_device(device) == as_device("cpu"):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


#: ``mt.<name>`` for each function here (api.py exports them).
FUNCTIONS = {
    "clamp": clamp, "max": max, "min": min, "argmin": argmin, "var": var, "std": std,
    "mm": mm, "bmm": bmm, "t": t, "numel": numel, "is_tensor": is_tensor,
    "allclose": allclose, "equal": equal,
    "linspace": linspace, "logspace": logspace, "eye": eye, "normal": normal,
    "randint": randint, "randperm": randperm, "as_tensor": as_tensor,
    "get_default_dtype": get_default_dtype, "set_default_dtype": set_default_dtype,
}

#: Node's methods under PyTorch's names (installed below).
METHODS = {
    "to": to, "type": type_, "cuda": cuda, "contiguous": contiguous,
    "float": _cast(dtypes.float32), "double": _cast(dtypes.float64),
    "long": _cast(dtypes.int64), "int": _cast(dtypes.int32), "bool": _cast(dtypes.bool_),
    "half": _cast(dtypes.float16),
    "view_as": view_as, "reshape_as": reshape_as, "expand_as": expand_as, "type_as": type_as,
    "mm": mm, "bmm": bmm, "matmul": ops.matmul, "t": t,
    "clamp": clamp, "clamp_": clamp_, "max": max, "min": min, "argmin": argmin,
    "var": var, "std": std,
    "add_": _in_place_method("+=", "add_"), "sub_": _in_place_method("-=", "sub_"),
    "mul_": _in_place_method("*=", "mul_"), "div_": _in_place_method("/=", "div_"),
    "fill_": fill_, "copy_": copy_,
}


def install() -> None:
    for name, method in METHODS.items():
        setattr(Node, name, method)
    Node.is_cuda = property(lambda self: self.device.type == "cuda")


install()

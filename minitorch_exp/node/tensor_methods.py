"""More of PyTorch's tensor surface on Node: hooks, ``detach_``, ``narrow`` and the
``new_*`` factories. Like node/pytorch.py, each is another name or form of something
the Node level already does; importing this module installs the methods.

* ``x.register_hook(fn)``: node/hooks.py;
* ``x.detach_()``: ``x`` itself, taken out of the graph;
* ``x.narrow(dim, start, length)``: a view, no copy;
* ``x.new_zeros(size)``, ``new_ones``, ``new_full``, ``new_empty``, ``new_tensor``:
  factories whose dtype and device default to ``x``'s;
* ``x.is_xpu``, ``x.is_cpu``.
"""

from __future__ import annotations

from . import ops
from .hooks import register_hook
from .node import Node, empty, full, ones, tensor, zeros


def detach_(x: Node) -> Node:
    """Take ``x`` out of the graph in place: no ``grad_fn``, ``requires_grad`` False."""
    x.grad_fn = None
    x.requires_grad = False
    return x


def narrow(x: Node, dim: int, start: int, length: int) -> Node:
    """``length`` entries of ``x`` along ``dim`` from ``start`` (negative: from the end):
    a view sharing memory, differentiable."""
    dim = dim + x.ndim if dim < 0 else dim
    size = x.shape[dim]
    start = start + size if start < 0 else start
    if not (0 <= dim < x.ndim and 0 <= start and length >= 0 and start + length <= size):
        raise IndexError(f"narrow: start {start} and length {length} along dim {dim} do not "
                         f"fit a tensor of shape {x.shape}")
    key = (slice(None),) * dim + (slice(start, start + length),)
    return ops.getitem(x, key)


def _size(size) -> tuple:
    """PyTorch's ``size`` argument: one tuple or list, or the sizes as varargs."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


def _new(factory):
    def method(x: Node, *size, dtype=None, device=None, requires_grad: bool = False) -> Node:
        return factory(*_size(size), dtype=x.dtype if dtype is None else dtype,
                       device=x.device if device is None else device,
                       requires_grad=requires_grad)
    method.__name__ = f"new_{factory.__name__}"
    method.__doc__ = (f"A new tensor of ``size`` made by ``{factory.__name__}``, of ``x``'s "
                      "dtype and device unless given.")
    return method


def new_full(x: Node, size, fill_value, *, dtype=None, device=None,
             requires_grad: bool = False) -> Node:
    return full(tuple(size), fill_value, dtype=x.dtype if dtype is None else dtype,
                device=x.device if device is None else device, requires_grad=requires_grad)


def new_tensor(x: Node, data, *, dtype=None, device=None, requires_grad: bool = False) -> Node:
    """A copy of ``data`` of ``x``'s dtype and device unless given."""
    return tensor(data, dtype=x.dtype if dtype is None else dtype,
                  device=x.device if device is None else device, requires_grad=requires_grad)


#: Node's methods (installed below); ``narrow`` is ``mt.narrow`` too (api.py).
METHODS = {
    "register_hook": register_hook, "detach_": detach_, "narrow": narrow,
    "new_zeros": _new(zeros), "new_ones": _new(ones), "new_empty": _new(empty),
    "new_full": new_full, "new_tensor": new_tensor,
}


def install() -> None:
    for name, method in METHODS.items():
        setattr(Node, name, method)
    Node.is_xpu = property(lambda self: False)  # no Intel GPUs here
    Node.is_cpu = property(lambda self: self.device.type == "cpu")


install()

"""minitorch_exp: autograd on an expression-template engine, small enough to read.

``import minitorch_exp as mt`` gives the PyTorch-shaped user API (Nodes);
``minitorch_exp.tensor`` is the expression-template layer beneath it.
"""

from .node import (
    Context,
    Function,
    Node,
    arange,
    empty,
    empty_like,
    enable_grad,
    from_numpy,
    full,
    full_like,
    fusion,
    gradcheck,
    is_grad_enabled,
    no_grad,
    ones,
    ones_like,
    rand,
    rand_like,
    randn,
    randn_like,
    set_fusion,
    zeros,
    zeros_like,
)
from .node.anomaly import detect_anomaly
from .node.graph import draw as draw_graph
from .node.graph import to_dot
from .node.ops import (
    abs,
    amax,
    amin,
    argmax,
    cat,
    clip,
    exp,
    expand,
    flatten,
    log,
    log_softmax,
    logsumexp,
    matmul,
    maximum,
    mean,
    minimum,
    op,
    permute,
    relu,
    reshape,
    sigmoid,
    sign,
    softmax,
    sqrt,
    squeeze,
    stack,
    sum,
    tanh,
    transpose,
    unsqueeze,
    where,
)
from .tensor.backends import set_cpu_backend
from .tensor.counters import count_kernels, kernel_counts, reset_kernel_counts, set_debug
from .tensor.creation import manual_seed
from .tensor.device import Device, cuda_available
from .tensor.dtypes import bool_, float32, float64, int32, int64
from .tensor.explain import explain
from .tensor.ops import register_op, unregister_op
from .serialization import load, save

from .node import tensor as _make_node
from . import tensor as _tensor_package  # noqa: E402  (the subpackage, not the factory)

Tensor = Node  # the user-facing tensor type, as in PyTorch


class _CallableTensorPackage(type(_tensor_package)):
    """``mt.tensor`` is both the subpackage ``minitorch_exp.tensor`` and PyTorch's factory.

    Calling the module makes a Node (``mt.tensor([1., 2.], requires_grad=True)``);
    attribute access reaches the Tensor level (``mt.tensor.Tensor``).
    """

    def __call__(self, data, dtype=None, device="cpu", requires_grad=False):
        return _make_node(data, dtype=dtype, device=device, requires_grad=requires_grad)


_tensor_package.__class__ = _CallableTensorPackage
tensor = _tensor_package

__version__ = "0.1.0"

__all__ = [
    "Context", "Device", "Function", "Node", "Tensor", "abs", "amax", "amin", "arange",
    "argmax", "bool_", "cat", "clip", "count_kernels", "cuda_available", "detect_anomaly",
    "draw_graph", "empty", "empty_like", "enable_grad", "exp", "expand", "explain", "flatten",
    "float32", "float64",
    "from_numpy", "full", "full_like", "fusion", "gradcheck", "int32", "int64",
    "is_grad_enabled", "kernel_counts", "load", "log", "log_softmax", "logsumexp",
    "manual_seed", "matmul", "maximum", "mean", "minimum", "no_grad", "ones", "ones_like",
    "op", "permute", "rand", "rand_like", "randn", "randn_like", "register_op", "relu",
    "reset_kernel_counts", "reshape", "save", "set_cpu_backend", "set_debug", "set_fusion",
    "sigmoid", "sign", "softmax", "sqrt", "squeeze", "stack", "sum", "tanh", "tensor",
    "to_dot", "transpose", "unregister_op", "unsqueeze", "where", "zeros", "zeros_like",
]

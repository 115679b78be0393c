"""The user-facing API, loaded on first use of ``minitorch_exp.<name>`` (see __init__.py)."""

from .node import (
    CaptureError,
    Context,
    Function,
    Node,
    arange,
    capture,
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
    tensor,
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
from .serialization import load, save
from .tensor.backends import set_cpu_backend
from .tensor.counters import count_kernels, kernel_counts, reset_kernel_counts, set_debug
from .tensor.creation import manual_seed
from .tensor.device import Device, cuda_available
from .tensor.dtypes import bool_, float32, float64, int32, int64
from .tensor.explain import explain
from .tensor.ops import register_op, unregister_op

Tensor = Node  # the user-facing tensor type, as in PyTorch

__all__ = [
    "CaptureError", "Context", "Device", "Function", "Node", "Tensor", "abs", "amax", "amin",
    "arange", "argmax", "bool_", "capture", "cat", "clip", "count_kernels", "cuda_available",
    "detect_anomaly",
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

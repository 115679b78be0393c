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
    get_fusion_threshold,
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
    set_fusion_threshold,
    tensor,
    zeros,
    zeros_like,
)
from .node import einsum as _einsum
from .node import library_ops as _library_ops
from .node import masks as _masks
from .node import pytorch as _pytorch
from .node import views as _views
from .node.anomaly import detect_anomaly
from .node.devices import device, get_default_device, set_default_device
from .node.grad_mode import inference_mode
from .node.graph import draw as draw_graph
from .node.graph import to_dot
from .node.node import from_dlpack
from .node.ops import FUNCTIONS as _OP_FUNCTIONS
from .node.ops import (
    cat,
    expand,
    flatten,
    log_softmax,
    logsumexp,
    matmul,
    op,
    permute,
    reshape,
    softmax,
    squeeze,
    stack,
    transpose,
    unsqueeze,
)
from .node.tensor_methods import narrow
from .serialization import load, load_safetensors, save, save_safetensors
from .tensor.backends import set_cpu_backend
from .tensor.counters import count_kernels, kernel_counts, reset_kernel_counts, set_debug
from .tensor.creation import manual_seed
from .tensor.device import Device, cuda_available
from .tensor.dtypes import bool_, float32, float64, int32, int64
from .tensor.explain import explain
from .tensor.ops import register_op, unregister_op
from .tensor.threads import get_num_threads, set_num_threads

Tensor = _pytorch.Tensor  # the tensor type (isinstance: a Node), and PyTorch's constructor

#: ``exp``, ``abs``, ``maximum``, ``where``, ``sum``, ``amax``...: one function per row of
#: the op registry (tensor/ops.py), made in node/ops.py.
globals().update(_OP_FUNCTIONS)
#: PyTorch's names for what exists (``clamp``, ``max(x, dim)``, ``mm``, ``linspace``...):
#: node/pytorch.py; docs/pytorch.md lists them.
globals().update(_pytorch.FUNCTIONS)
#: Masks (``masked_fill``, ``tril``, ``triu``: node/masks.py) and pieces (``split``,
#: ``chunk``, ``unbind``, ``flip``, ``roll``: node/views.py).
globals().update(_masks.FUNCTIONS)
globals().update(_views.FUNCTIONS)
#: Library ops (``gather``, ``scatter``, ``sort``, ``topk``, ``cumsum``, ``prod``, ``norm``,
#: ``multinomial``...) and ``Generator``: node/library_ops.py.
globals().update(_library_ops.FUNCTIONS)
#: ``einsum``, ``addmm``, ``baddbmm``: compositions of products (node/einsum.py).
globals().update(_einsum.FUNCTIONS)
#: PyTorch's dtype names (``float32``, ``double``, ``long``...). ``float``, ``int`` and
#: ``bool`` are reached as ``mt.float`` but left out of ``__all__``: a star import must
#: not hide Python's own.
DTYPE_NAMES = _pytorch.DTYPES
globals().update(DTYPE_NAMES)
NOT_STARRED = frozenset({"float", "int", "bool"})

__all__ = [
    "CaptureError", "Context", "Device", "Function", "Node", "Tensor",
    "arange", "bool_", "capture", "cat", "count_kernels", "cuda_available",
    "detect_anomaly",
    "draw_graph", "empty", "empty_like", "enable_grad", "expand", "explain", "flatten",
    "float32", "float64",
    "from_numpy", "full", "full_like", "fusion", "get_fusion_threshold", "get_num_threads",
    "gradcheck",
    "int32", "int64",
    "is_grad_enabled", "kernel_counts", "load", "log_softmax", "logsumexp",
    "manual_seed", "matmul", "no_grad", "ones", "ones_like",
    "op", "permute", "rand", "rand_like", "randn", "randn_like", "register_op",
    "reset_kernel_counts", "reshape", "save", "set_cpu_backend", "set_debug", "set_fusion",
    "set_fusion_threshold", "set_num_threads", "softmax", "squeeze", "stack", "tensor",
    "to_dot", "transpose", "unregister_op", "unsqueeze", "zeros", "zeros_like",
    "device", "get_default_device", "set_default_device", "inference_mode", "narrow",
    "from_dlpack", "load_safetensors", "save_safetensors",
    *sorted(_OP_FUNCTIONS), *sorted(_pytorch.FUNCTIONS),
    *sorted(_masks.FUNCTIONS), *sorted(_views.FUNCTIONS), *sorted(_library_ops.FUNCTIONS),
    *sorted(_einsum.FUNCTIONS),
    *sorted(set(DTYPE_NAMES) - NOT_STARRED - {"float32", "float64", "int32", "int64"}),
]

"""The Node level: a dynamic computation graph with ``backward()`` over fused expressions."""

from . import ops, pytorch, tensor_methods  # PyTorch's spellings, installed on Node
from .backward import backward, topological_order
from .capture import CaptureError, capture
from .function import Context, Function
from .grad_mode import (
    enable_grad,
    fusion,
    get_fusion_threshold,
    is_grad_enabled,
    no_grad,
    set_fusion,
    set_fusion_threshold,
)
from .gradcheck import gradcheck
from .node import (
    Node,
    arange,
    empty,
    empty_like,
    from_numpy,
    full,
    full_like,
    ones,
    ones_like,
    rand,
    rand_like,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)

__all__ = [
    "CaptureError", "Context", "Function", "Node", "arange", "backward", "capture", "empty",
    "empty_like",
    "enable_grad", "from_numpy", "full", "full_like", "fusion", "gradcheck",
    "is_grad_enabled", "no_grad", "ones", "ones_like", "ops", "pytorch", "rand", "rand_like",
    "randn", "randn_like", "set_fusion", "set_fusion_threshold", "get_fusion_threshold",
    "tensor_methods",
    "tensor", "topological_order", "zeros", "zeros_like",
]

"""The Tensor level: strided tensors over shared storage, lazy expressions, fused evaluation.

This package never imports ``minitorch_exp.node`` or ``minitorch_exp.nn``.
"""

from .backends import cpu_backend, set_cpu_backend, using_cpu_backend
from .caches import cache_info, clear_caches
from .counters import count_kernels, kernel_counts, reset_kernel_counts, set_debug
from .creation import (
    arange,
    default_generator,
    empty,
    empty_like,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randn,
    randn_like,
    zeros,
    zeros_like,
)
from .device import Device, as_device, cuda_available
from .dtypes import bool_, float32, float64, int32, int64
from .engine import assign, assign_all, evaluate
from .expr import FUNCTIONS as _OP_FUNCTIONS
from .expr import Exp, apply_op, matmul
from .layout import Layout, broadcast_shapes
from .ops import register_op, unregister_op
from .storage import Storage
from .tensor import Tensor, from_array, from_numpy, tensor

# isort: split
# Last, once the core exists; it hands Exp.explain and the debug printers over.
from . import dlpack as _dlpack  # noqa: E402, F401  (it installs Tensor.__dlpack__)
from . import explain as _explain  # noqa: E402, F401
from .library import FUNCTIONS as _LIBRARY_FUNCTIONS  # noqa: E402
from .masks import FUNCTIONS as _MASK_FUNCTIONS  # noqa: E402
from .slicing import FUNCTIONS as _SLICING_FUNCTIONS  # noqa: E402

#: ``exp``, ``abs``, ``maximum``, ``where``, ``sum``, ``amax``...: one function per row of
#: the op registry (tensor/ops.py), made in expr.py.
globals().update(_OP_FUNCTIONS)
#: ``masked_fill``, ``tril``, ``triu`` (masks.py); ``split``, ``chunk``, ``unbind``, ``flip``
#: (slicing.py).
globals().update(_MASK_FUNCTIONS)
globals().update(_SLICING_FUNCTIONS)
#: ``gather``, ``scatter``, ``cumsum``, ``argsort``...: one per row of the library-op
#: registry (library.py).
globals().update(_LIBRARY_FUNCTIONS)

__all__ = [
    "Device", "Exp", "Layout", "Storage", "Tensor", "apply_op", "arange", "as_device",
    "assign", "assign_all", "bool_", "broadcast_shapes", "cache_info", "clear_caches",
    "count_kernels", "cpu_backend",
    "cuda_available", "default_generator", "empty", "empty_like", "evaluate",
    "float32", "float64", "from_array", "from_numpy", "full", "full_like", "int32", "int64",
    "kernel_counts", "manual_seed", "matmul", "ones",
    "ones_like", "rand", "rand_like", "randn", "randn_like", "register_op",
    "reset_kernel_counts", "set_cpu_backend", "set_debug",
    "tensor", "unregister_op", "using_cpu_backend", "zeros", "zeros_like",
    *sorted(_OP_FUNCTIONS), *sorted(_MASK_FUNCTIONS), *sorted(_SLICING_FUNCTIONS),
]

"""PyTorch's ``torch.accelerator``: the one accelerator kind here is CUDA (``mt.cuda``)."""

from __future__ import annotations

from . import cuda
from .node.devices import device

__all__ = ["current_accelerator", "device_count", "is_available"]


def is_available() -> bool:
    return cuda.is_available()


def current_accelerator() -> device | None:
    """``mt.device("cuda")`` when a GPU can be used, else None (as PyTorch's)."""
    return device("cuda") if cuda.is_available() else None


def device_count() -> int:
    return cuda.device_count()

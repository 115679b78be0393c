"""PyTorch's ``torch.nn.modules.module``."""

from ..module import Module

__all__ = ["Module"]

"""PyTorch's ``torch.nn.modules.flatten``."""

from ..layers import Flatten

__all__ = ["Flatten"]

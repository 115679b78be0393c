"""PyTorch's ``torch.nn.modules.dropout``."""

from ..layers import Dropout, Dropout2d

__all__ = ["Dropout", "Dropout2d"]

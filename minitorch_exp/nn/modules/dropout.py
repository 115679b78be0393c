"""PyTorch's ``torch.nn.modules.dropout``."""

from ..layers import Dropout, Dropout1d, Dropout2d

__all__ = ["Dropout", "Dropout1d", "Dropout2d"]

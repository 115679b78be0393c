"""PyTorch's ``torch.utils``: ``utils.data``."""

from . import data

__all__ = ["data"]

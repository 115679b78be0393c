"""PyTorch's ``torch.nn.modules.sparse``."""

from ..layers import Embedding

__all__ = ["Embedding"]

"""PyTorch's ``torch.nn.modules.normalization``."""

from ..layers import LayerNorm

__all__ = ["LayerNorm"]

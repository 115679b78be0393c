"""PyTorch's ``torch.nn.modules.normalization``."""

from ..layers import LayerNorm
from ..normalization import GroupNorm

__all__ = ["GroupNorm", "LayerNorm"]

"""PyTorch's ``torch.nn.modules.linear``."""

from ..containers import Identity
from ..layers import Linear

__all__ = ["Identity", "Linear"]

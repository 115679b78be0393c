"""PyTorch's ``torch.nn.modules.conv``."""

from ..conv import Conv1d, Conv2d

__all__ = ["Conv1d", "Conv2d"]

"""PyTorch's ``torch.nn.modules.conv``."""

from ..conv import Conv1d, Conv2d
from ..conv_transpose import ConvTranspose1d, ConvTranspose2d

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]

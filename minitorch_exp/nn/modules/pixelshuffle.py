"""PyTorch's ``torch.nn.modules.pixelshuffle``."""

from ..resample import PixelShuffle, PixelUnshuffle

__all__ = ["PixelShuffle", "PixelUnshuffle"]

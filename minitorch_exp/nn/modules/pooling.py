"""PyTorch's ``torch.nn.modules.pooling``."""

from ..pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d"]

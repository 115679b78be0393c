"""PyTorch's ``torch.nn.modules.instancenorm``."""

from ..normalization import InstanceNorm1d, InstanceNorm2d

__all__ = ["InstanceNorm1d", "InstanceNorm2d"]

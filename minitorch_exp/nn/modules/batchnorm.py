"""PyTorch's ``torch.nn.modules.batchnorm``."""

from ..normalization import BatchNorm1d, BatchNorm2d

__all__ = ["BatchNorm1d", "BatchNorm2d"]

"""PyTorch's ``torch.optim.lr_scheduler``: the schedules of ``minitorch_exp.nn.optim``."""

from ..nn.optim import (
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    LRScheduler,
    MultiStepLR,
    OneCycleLR,
    ReduceLROnPlateau,
    StepLR,
)

__all__ = ["CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR", "MultiStepLR",
           "StepLR", "OneCycleLR", "ReduceLROnPlateau"]

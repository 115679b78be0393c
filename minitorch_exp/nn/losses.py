"""Loss modules: thin wrappers over ``nn.functional``."""

from __future__ import annotations

from . import functional as F
from .module import Module


class CrossEntropyLoss(Module):
    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        if size_average is not None or reduce is not None:
            raise TypeError("CrossEntropyLoss: size_average and reduce are deprecated in "
                            "PyTorch and not supported here; use reduction=")
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing
        self.register_buffer("weight", weight)

    def forward(self, logits, target):
        return F.cross_entropy(logits, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, log_probs, target):
        return F.nll_loss(log_probs, target, self.reduction)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):  # noqa: A002
        return F.mse_loss(input, target, self.reduction)


class L1Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):  # noqa: A002
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(Module):
    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__()
        self.reduction, self.beta = reduction, beta

    def forward(self, input, target):  # noqa: A002
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class BCEWithLogitsLoss(Module):
    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__()
        self.weight, self.reduction, self.pos_weight = weight, reduction, pos_weight

    def forward(self, input, target):  # noqa: A002
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class BCELoss(Module):
    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__()
        self.weight, self.reduction = weight, reduction

    def forward(self, input, target):  # noqa: A002
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)

"""Loss modules: thin wrappers over ``nn.functional``."""

from __future__ import annotations

from . import functional as F
from .module import Module


class CrossEntropyLoss(Module):
    def __init__(self, reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        self.reduction, self.label_smoothing = reduction, label_smoothing

    def forward(self, logits, target):
        return F.cross_entropy(logits, target, self.reduction, self.label_smoothing)


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

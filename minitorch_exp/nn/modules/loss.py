"""PyTorch's ``torch.nn.modules.loss``."""

from ..losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
    TripletMarginLoss,
)

__all__ = ["BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss", "NLLLoss",
           "SmoothL1Loss", "CosineEmbeddingLoss", "HuberLoss", "KLDivLoss",
           "MarginRankingLoss", "TripletMarginLoss"]

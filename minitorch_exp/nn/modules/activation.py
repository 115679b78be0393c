"""PyTorch's ``torch.nn.modules.activation``."""

from ..activations import (
    ELU,
    SELU,
    Hardswish,
    Hardtanh,
    LogSigmoid,
    Mish,
    PReLU,
    ReLU6,
    SiLU,
    Softplus,
)
from ..layers import GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh

__all__ = ["GELU", "LeakyReLU", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh",
           "ELU", "SELU", "Hardswish", "Hardtanh", "LogSigmoid", "Mish", "PReLU", "ReLU6",
           "SiLU", "Softplus"]

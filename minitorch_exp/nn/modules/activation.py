"""PyTorch's ``torch.nn.modules.activation``."""

from ..layers import GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh

__all__ = ["GELU", "LeakyReLU", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh"]

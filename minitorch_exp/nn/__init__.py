"""nn: modules, layers, losses, initialisation, optimizers and data loading."""

from . import functional, init, optim, parallel
from .data import DataLoader, Dataset, DistributedSampler, TensorDataset
from .layers import (
    GELU,
    Dropout,
    Flatten,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
)
from .losses import CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module, Parameter

__all__ = [
    "GELU", "CrossEntropyLoss", "DataLoader", "Dataset", "DistributedSampler", "Dropout",
    "Flatten", "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "Module", "NLLLoss",
    "Parameter", "ReLU", "Sequential", "Sigmoid", "Softmax", "Tanh", "TensorDataset",
    "functional", "init", "optim", "parallel",
]

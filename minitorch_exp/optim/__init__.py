"""PyTorch's ``torch.optim``: the optimizers of ``minitorch_exp.nn.optim`` at PyTorch's path,
with ``optim.lr_scheduler`` for the learning-rate schedules."""

from ..nn.optim import LBFGS, SGD, Adadelta, Adagrad, Adam, AdamW, NAdam, Optimizer, RMSprop
from . import lr_scheduler

__all__ = ["SGD", "Adadelta", "Adam", "AdamW", "Optimizer", "lr_scheduler", "Adagrad", "LBFGS",
           "NAdam", "RMSprop"]

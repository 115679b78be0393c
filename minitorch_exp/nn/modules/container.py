"""PyTorch's ``torch.nn.modules.container``."""

from ..containers import ModuleDict, ModuleList, ParameterDict, ParameterList
from ..layers import Sequential

__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]

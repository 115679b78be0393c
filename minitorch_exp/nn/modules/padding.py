"""PyTorch's ``torch.nn.modules.padding``."""

from ..padding import MODULES

globals().update({cls.__name__: cls for cls in MODULES})
__all__ = [cls.__name__ for cls in MODULES]

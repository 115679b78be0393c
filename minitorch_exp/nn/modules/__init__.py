"""PyTorch's ``torch.nn.modules``: the layers of ``minitorch_exp.nn`` at the paths scripts
import them from (``from torch.nn.modules.module import Module``), one file per path."""

from . import (
    activation,
    batchnorm,
    container,
    conv,
    dropout,
    flatten,
    instancenorm,
    linear,
    loss,
    module,
    normalization,
    padding,
    pixelshuffle,
    pooling,
    sparse,
    upsampling,
)
from .activation import *  # noqa: F403
from .batchnorm import *  # noqa: F403
from .container import *  # noqa: F403
from .conv import *  # noqa: F403
from .dropout import *  # noqa: F403
from .flatten import *  # noqa: F403
from .instancenorm import *  # noqa: F403
from .linear import *  # noqa: F403
from .loss import *  # noqa: F403
from .module import *  # noqa: F403
from .normalization import *  # noqa: F403
from .padding import *  # noqa: F403
from .pixelshuffle import *  # noqa: F403
from .pooling import *  # noqa: F403
from .sparse import *  # noqa: F403
from .upsampling import *  # noqa: F403

__all__ = [name for m in (activation, batchnorm, container, conv, dropout, flatten, linear,
                          loss, module, normalization, pooling, sparse, instancenorm,
                          padding, pixelshuffle, upsampling) for name in m.__all__]

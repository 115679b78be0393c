"""PyTorch's ``torch.nn.modules.upsampling``."""

from ..resample import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]

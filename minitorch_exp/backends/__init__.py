"""PyTorch's ``torch.backends``: the flags scripts set for cuDNN, CUDA and MPS. None of
those libraries is used here (GPU kernels are generated and compiled through CuPy), so
the flags are kept, for scripts that read them back, and change nothing."""

from . import cuda, cudnn, mps

__all__ = ["cuda", "cudnn", "mps"]

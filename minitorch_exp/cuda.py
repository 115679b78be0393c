"""PyTorch's ``torch.cuda``: whether CUDA can be used here, and how many GPUs there are.

CUDA runs through CuPy (tensor/device.py); without it, or without a GPU, there is
none. Every random number comes from the one host generator (``mt.manual_seed``),
so the CUDA seeding calls are accepted and do nothing.
"""

from __future__ import annotations

from .tensor.device import cuda_available, cupy_module

__all__ = ["current_device", "device_count", "is_available", "manual_seed",
           "manual_seed_all", "synchronize"]


def is_available() -> bool:
    return cuda_available()


def device_count() -> int:
    return cupy_module().cuda.runtime.getDeviceCount() if cuda_available() else 0


def current_device() -> int:
    """The index of the current GPU (CuPy's), raising when there is none."""
    if not cuda_available():
        raise RuntimeError("no CUDA device here (CuPy or a GPU is missing)")
    return int(cupy_module().cuda.runtime.getDevice())


def synchronize(device=None) -> None:
    """Wait for the work queued on the GPU; nothing to do without one."""
    if cuda_available():
        cupy_module().cuda.runtime.deviceSynchronize()


def manual_seed(seed: int) -> None:
    """Accepted and ignored: CUDA tensors' random numbers come from the host generator,
    seeded by ``mt.manual_seed``."""


manual_seed_all = manual_seed

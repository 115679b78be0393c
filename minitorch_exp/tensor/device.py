"""Devices: where a Storage lives and which array module computes on it.

``cpu`` is NumPy. ``cuda`` / ``cuda:N`` is CuPy, imported only when a CUDA
tensor is first made, so importing minitorch_exp never needs CuPy or a driver.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np


class Device(NamedTuple):
    type: str
    index: int = 0

    def __copy__(self) -> Device:
        return self

    def __deepcopy__(self, memo) -> Device:
        return self  # one object per device: code compares devices with ``is``

    def __str__(self) -> str:
        return "cpu" if self.type == "cpu" else f"cuda:{self.index}"

    def __repr__(self) -> str:
        return f"device('{self}')"

    @property
    def xp(self):
        """The array module: numpy on cpu, cupy on cuda."""
        return np if self.type == "cpu" else cupy_module()


CPU = Device("cpu")


@functools.cache
def as_device(device) -> Device:
    """Parse ``'cpu'``, ``'cuda'``, ``'cuda:1'`` or a Device."""
    if isinstance(device, Device):
        return device
    if device is None:
        return CPU
    text = str(device)
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return CPU
    if kind == "cuda" and (not index or index.isdigit()):
        return Device("cuda", int(index or 0))
    raise ValueError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")


@functools.cache
def cupy_module():
    try:
        import cupy
    except ImportError as err:
        raise RuntimeError(
            "device 'cuda' needs CuPy: pip install 'minitorch_exp[gpu]' "
            "(CUDA 12 driver) or 'minitorch_exp[gpu-cuda13]' (CUDA 13)"
        ) from err
    return cupy


def cuda_available() -> bool:
    try:
        cp = cupy_module()
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False

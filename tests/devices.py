"""The devices the tests run on, in one place.

``DEVICES`` parametrizes a test over ``cpu`` and ``cuda``::

    @pytest.mark.parametrize("device", DEVICES)
    def test_something(device): ...

It is a ``parametrize`` list rather than a fixture so that it composes with
hypothesis's ``@given`` (function-scoped fixtures do not). The ``cuda``
parameter carries the ``cuda`` marker (``-m cuda`` / ``-m 'not cuda'``) and is
skipped, with the reason, where CuPy or a usable CUDA device is missing.

A device test makes its inputs with ``on_device`` (the values *and the strides*
of a NumPy array, so non-contiguous layouts reach the device's kernels too),
reads results back with ``.numpy()`` and compares them with the NumPy / CPU
reference: to the test's usual tolerance on ``cpu``, and to float32-level
tolerance (``tolerance``) on ``cuda``, whose math library and summation order
differ from NumPy's in the last bits. ``mt.gradcheck`` works on every device.

The ``cpu`` parameter runs exactly what the CPU-only tests ran (same inputs,
same hypothesis budgets, same tolerances), so CPU test time does not grow;
``CUDA_ONLY`` gives a test a cuda twin of a CPU-specific test (block sizes).
"""

from __future__ import annotations

import numpy as np
import pytest

from minitorch_exp.tensor import Storage, Tensor, as_device, from_numpy


def gpu_reason() -> str | None:
    """Why the cuda tests cannot run here, or None when they can."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return "no CUDA device"
    except Exception as err:  # no driver, or a driver too old for this CuPy
        return f"no usable CUDA device ({type(err).__name__}: {err})"
    return None


NO_GPU = gpu_reason()

#: Mark for a test that needs the GPU (skips with the reason where there is none).
requires_gpu = pytest.mark.skipif(NO_GPU is not None, reason=f"needs a GPU: {NO_GPU}")

CUDA = pytest.param("cuda", marks=(pytest.mark.cuda, requires_gpu), id="cuda")

#: ``@pytest.mark.parametrize("device", DEVICES)``: every device a test should pass on.
DEVICES = ["cpu", CUDA]

#: The cuda variant of a test whose cpu version exercises CPU-only paths (block sizes).
CUDA_ONLY = [CUDA]

#: Float32-level tolerances for results computed on cuda (relative, absolute).
CUDA_RTOL, CUDA_ATOL = 1e-4, 1e-5


def is_cuda(device) -> bool:
    return device is not None and as_device(device).type == "cuda"


def tolerance(device, rtol: float, atol: float) -> tuple[float, float]:
    """``(rtol, atol)`` for a comparison on ``device``: unchanged on cpu, at least
    float32-level on cuda."""
    if is_cuda(device):
        return max(rtol, CUDA_RTOL), max(atol, CUDA_ATOL)
    return rtol, atol


def on_device(arr: np.ndarray, device="cpu") -> Tensor:
    """A Tensor with the values and the layout (strides, offset) of the NumPy array ``arr``.

    On cpu it shares ``arr``'s memory (``from_numpy``), exactly as the CPU-only
    tests always did. On another device the flat buffer ``arr`` looks into is
    copied over whole and viewed with the same layout, so gaps, negative and
    permuted strides survive the transfer (``Tensor.to`` would make it contiguous).
    """
    t = from_numpy(np.asarray(arr))
    dev = as_device(device)
    if dev.type == "cpu":
        return t
    return Tensor(Storage(dev.xp.asarray(t.storage.data), dev), t.layout)

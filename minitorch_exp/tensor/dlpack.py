"""DLPack: handing a Tensor's memory to NumPy, PyTorch, CuPy or JAX, and taking theirs.

Both ways are zero-copy. Exporting goes through the NumPy view of the tensor
(``ndarray.__dlpack__`` builds the capsule and keeps the buffer alive); importing
goes through ``numpy.from_dlpack`` on the CPU and ``cupy.from_dlpack`` on CUDA
(that branch is one call and is untested here: no GPU).

Memory that crossed is *user-reachable*, as a writable ``.numpy()`` array is
(``Storage.shared``): no lazy value ever reads it late, so a write by the other
library after a value was built never changes that value.

Version counters (autograd's in-place check) count writes made through
minitorch_exp. Every Tensor over the same Storage shares one counter, and
:func:`from_dlpack` finds the Storage again when it is handed memory that one of
our tensors exported (directly, or through NumPy's or PyTorch's view of it), so
a write through the re-imported tensor *is* seen. A write made by the other
library through its own view is not -- nothing announces it -- exactly as PyTorch
does not see a write through ``np.from_dlpack(t)`` or ``torch.from_dlpack(t)``
(tests/tensor/test_dlpack.py pins both).
"""

from __future__ import annotations

import weakref

import numpy as np

from . import dtypes
from . import layout as L
from .device import CPU, Device
from .storage import Storage
from .tensor import Tensor, from_array

__all__ = ["dlpack_device", "from_dlpack", "to_dlpack"]

KDL_CPU, KDL_CUDA = 1, 2

#: Storages whose memory was handed out through DLPack, by ``id``: weak, so an
#: export never keeps a Storage alive (the capsule keeps its buffer alive).
_exported: weakref.WeakValueDictionary[int, Storage] = weakref.WeakValueDictionary()


def to_dlpack(t: Tensor, **kwargs):
    """A DLPack capsule of ``t``'s memory (``Tensor.__dlpack__``); no copy.

    ``kwargs`` are the protocol's (``stream``, ``max_version``, ``dl_device``,
    ``copy``), passed on to the array's own ``__dlpack__``.
    """
    if t.device.type == "cpu":
        arr = t.numpy()  # writable: marks the Storage shared (no late reads)
    else:
        t.storage.share()
        arr = t.array  # CuPy's ndarray; untested without a GPU
    _exported[id(t.storage)] = t.storage
    return arr.__dlpack__(**{k: v for k, v in kwargs.items() if v is not None})


def dlpack_device(t: Tensor) -> tuple[int, int]:
    """``(device type, index)`` as DLPack numbers them: ``(1, 0)`` is the CPU."""
    return (KDL_CPU, 0) if t.device.type == "cpu" else (KDL_CUDA, t.device.index)


class _Capsule:
    """A bare capsule (``torch.utils.dlpack.to_dlpack``'s) dressed as a producer;
    NumPy checks the capsule's own device and refuses one that is not on the CPU."""

    def __init__(self, capsule) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CPU, 0)


def _as_producer(obj):
    if hasattr(obj, "__dlpack__"):
        return obj
    if type(obj).__name__ == "PyCapsule":
        return _Capsule(obj)
    raise TypeError(f"from_dlpack: expected an object with __dlpack__ (a NumPy array, a "
                    f"PyTorch, CuPy or JAX tensor) or a DLPack capsule, "
                    f"found {type(obj).__name__}")


def _pointer(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _exported_view(arr: np.ndarray) -> Tensor | None:
    """A Tensor over the exported Storage that holds exactly ``arr``'s memory, if any."""
    if not _exported:
        return None
    ptr, item = _pointer(arr), arr.dtype.itemsize
    for storage in list(_exported.values()):
        data = storage.data
        if storage.device.type != "cpu" or data.dtype != arr.dtype or not data.size:
            continue
        delta = ptr - _pointer(data)
        if delta % item or any(s % item for s in arr.strides):
            continue
        layout = L.Layout(tuple(arr.shape), tuple(s // item for s in arr.strides),
                          delta // item)
        lo, hi = L.extent(layout)
        if arr.size and 0 <= lo and hi < data.size:
            return Tensor(storage, layout)
    return None


def from_dlpack(obj) -> Tensor:
    """A Tensor sharing the memory of ``obj`` (anything with ``__dlpack__``, or a capsule).

    Memory that one of our tensors exported comes back over the same Storage, with
    its version counter; other memory becomes a new Storage marked shared. A
    read-only producer gives a read-only tensor. A dtype minitorch_exp does not hold
    (uint8, complex64 ...) is refused rather than copied behind the caller's back.
    """
    producer = _as_producer(obj)
    kind, index = producer.__dlpack_device__()
    if int(kind) == KDL_CUDA:  # untested: no GPU here
        from .device import cupy_module
        return from_array(cupy_module().from_dlpack(producer), Device("cuda", int(index)))
    arr = np.from_dlpack(producer)
    if arr.dtype not in dtypes.SUPPORTED:
        names = ", ".join(d.name for d in dtypes.SUPPORTED)
        raise TypeError(f"from_dlpack: expected one of {names} (shared without a copy), "
                        f"found {arr.dtype}: convert it first, e.g. .float() in PyTorch")
    known = _exported_view(arr)
    if known is not None:
        return known
    t = from_array(arr, CPU)
    t.storage.shared = True  # the producer can still write it: see Storage.shared
    return t


def _dlpack(self: Tensor, *, stream=None, max_version=None, dl_device=None, copy=None):
    """A DLPack capsule of this tensor's memory, no copy (tensor/dlpack.py)."""
    return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device,
                     copy=copy)


# Installed from here, so that tensor.py need not import this module (no import circle:
# tests/tensor/test_import_layers.py); tensor/__init__.py imports it.
Tensor.__dlpack__ = _dlpack
Tensor.__dlpack_device__ = dlpack_device

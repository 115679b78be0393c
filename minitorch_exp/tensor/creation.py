"""Factories: new tensors filled with zeros, ones, ranges or random numbers."""

from __future__ import annotations

import math

import numpy as np

from . import capture, dtypes
from .device import CPU, as_device
from .generator import Generator
from .layout import check_shape, contiguous, normalize_shape
from .storage import Storage
from .tensor import Tensor, from_array

_generator = {"rng": Generator()}
_generator["rng"].seed()  # the default stream starts unseeded, from the OS's entropy


def manual_seed(seed: int) -> Generator:
    """Reseed, in place, the default generator used by ``rand``/``randn`` (and by nn.init,
    samplers, ``multinomial``); returns it, as PyTorch's does."""
    return _generator["rng"].manual_seed(seed)


def default_generator() -> Generator:
    """The default random stream (an ``mt.Generator``, so a ``numpy.random.Generator``)."""
    return _generator["rng"]


def _make(arr: np.ndarray, device) -> Tensor:
    device = as_device(device)
    if device.type != "cpu":
        arr = device.xp.asarray(arr)
    return from_array(arr, device)


def _filled(shape, value, dtype, device) -> Tensor:
    shape = check_shape(normalize_shape(shape))
    dtype = dtypes.as_dtype(dtype)
    return _written_on_host(shape, dtype, as_device(device), _fill, value)


def _written_on_host(shape, dtype, device, write, arg) -> Tensor:
    """A new tensor that ``write(tensor, arg)`` fills from the host (a constant, random
    numbers); while capturing, every replay runs it again (see ``capture.host_op``)."""
    t = new_empty(shape, dtype, device)
    write(t, arg)
    if capture.active() is not None:
        capture.active().add(write, (t, arg), t.storage)
    return t


def _fill(t: Tensor, value) -> None:
    t.storage.data.fill(value)  # new_empty made it: the whole flat buffer (on a GPU: a memset)


def empty(*shape, dtype=dtypes.float32, device="cpu") -> Tensor:
    return new_empty(check_shape(normalize_shape(shape)), dtypes.as_dtype(dtype),
                     as_device(device))


def new_empty(shape: tuple, dtype, device) -> Tensor:
    """An uninitialized contiguous tensor; arguments already normalized (the engine's path,
    which makes one for every temporary and first ``.grad``)."""
    data = (np if device is CPU else device.xp).empty(math.prod(shape), dtype=dtype)
    return Tensor(Storage(data, device), contiguous(shape))


def zeros(*shape, dtype=dtypes.float32, device="cpu") -> Tensor:
    return _filled(shape, 0, dtype, device)


def ones(*shape, dtype=dtypes.float32, device="cpu") -> Tensor:
    return _filled(shape, 1, dtype, device)


def full(shape, fill_value, dtype=None, device="cpu") -> Tensor:
    if dtype is None:
        dtype = dtypes.default_dtype_for(fill_value)
    return _filled((shape,) if isinstance(shape, int) else (tuple(shape),), fill_value,
                   dtype, device)


def arange(start, stop=None, step=1, dtype=None, device="cpu") -> Tensor:
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        # A list, not an array: Python floats default to float32 as in ``tensor``.
        dtype = dtypes.default_dtype_for([start, stop, step])
    dtype, device = dtypes.as_dtype(dtype), as_device(device)
    whole = dtype.kind in "iu" and all(isinstance(v, (int, np.integer))
                                       for v in (start, stop, step))
    if device.type != "cpu" and whole:  # made on the device: no copy, no wait
        return from_array(device.xp.arange(start, stop, step, dtype=dtype), device)
    return _make(np.arange(start, stop, step, dtype=dtype), device)


def rand(*shape, dtype=dtypes.float32, device="cpu", generator=None) -> Tensor:
    """Uniform on [0, 1)."""
    return _random(shape, lambda s: _rng(generator).random(s, dtype=np.float64), dtype, device)


def randn(*shape, dtype=dtypes.float32, device="cpu", generator=None) -> Tensor:
    """Standard normal."""
    return _random(shape, lambda s: _rng(generator).standard_normal(s), dtype, device)


def _rng(generator) -> np.random.Generator:
    """``generator``, or the default one as it is now (a replay after ``manual_seed``
    draws from the new one)."""
    return generator or _generator["rng"]


def _random(shape, draw, dtype, device) -> Tensor:
    """A tensor of ``draw(shape)``: host random numbers, drawn anew by every replay of
    a capture, as an eager run would."""
    shape = check_shape(normalize_shape(shape))
    return _written_on_host(shape, dtypes.as_dtype(dtype), as_device(device), _redraw, draw)


def _redraw(t: Tensor, draw) -> None:
    values = draw(t.shape).reshape(-1)
    t.storage.data[...] = values if t.device.type == "cpu" else t.device.xp.asarray(values)


def _like(t, dtype, device):
    return t.shape, (t.dtype if dtype is None else dtype), (t.device if device is None else device)


def empty_like(t, dtype=None, device=None) -> Tensor:
    shape, dtype, device = _like(t, dtype, device)
    return empty(shape, dtype=dtype, device=device)


def zeros_like(t, dtype=None, device=None) -> Tensor:
    shape, dtype, device = _like(t, dtype, device)
    return zeros(shape, dtype=dtype, device=device)


def ones_like(t, dtype=None, device=None) -> Tensor:
    shape, dtype, device = _like(t, dtype, device)
    return ones(shape, dtype=dtype, device=device)


def full_like(t, fill_value, dtype=None, device=None) -> Tensor:
    shape, dtype, device = _like(t, dtype, device)
    return full(shape, fill_value, dtype=dtype, device=device)


def rand_like(t, dtype=None, device=None, generator=None) -> Tensor:
    shape, dtype, device = _like(t, dtype, device)
    return rand(shape, dtype=dtype, device=device, generator=generator)


def randn_like(t, dtype=None, device=None, generator=None) -> Tensor:
    shape, dtype, device = _like(t, dtype, device)
    return randn(shape, dtype=dtype, device=device, generator=generator)

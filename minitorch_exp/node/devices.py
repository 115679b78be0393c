"""PyTorch's device names at the Node level: ``mt.device`` and the default device.

The Tensor level names a device with ``Device`` (tensor/device.py) and always says
which; here ``mt.device("cuda:0")`` is PyTorch's spelling of the same value, and
``mt.set_default_device`` chooses where Node factories (``mt.zeros``, ``mt.tensor``,
...) put a tensor when no ``device=`` is given. Like grad mode, the default belongs
to the thread that sets it.
"""

from __future__ import annotations

import threading

from ..tensor.device import CPU, Device, as_device


class device:  # noqa: N801 -- PyTorch's name
    """``mt.device("cpu")``, ``mt.device("cuda")``, ``mt.device("cuda:1")``,
    ``mt.device("cuda", 1)``: a value naming a device, accepted wherever ``device=`` is;
    equal to the Device it names (``x.device == mt.device("cpu")``) and to its string
    (``mt.device("cuda") == "cuda:0"``). Anything taking a device reads it through its
    string, so it never becomes a tensor's ``device`` itself."""

    __slots__ = ("type", "index")

    def __init__(self, type: str | Device | device, index: int | None = None):  # noqa: A002
        if isinstance(type, (Device, device)) and index is None:
            d = as_device(str(type))
        elif not isinstance(type, str):
            raise TypeError(f"device: expected a string such as 'cpu' or 'cuda:0', or a "
                            f"device, got {type!r}")
        else:
            d = as_device(type if index is None else f"{type}:{int(index)}")
        self.type, self.index = d.type, d.index

    def __str__(self) -> str:
        return str(Device(self.type, self.index))

    def __repr__(self) -> str:
        index = "" if self.type == "cpu" else f", index={self.index}"
        return f"device(type='{self.type}'{index})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = as_device(other)
            except ValueError:
                return False
        if not isinstance(other, (Device, device)):
            return NotImplemented
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))  # a Device's hash: the two are equal


class _Default(threading.local):
    device: Device = CPU


_default = _Default()


def set_default_device(device) -> None:
    """Where Node factories put tensors made without ``device=``, in this thread (None:
    the CPU again). Layers' parameters are not affected: move a model with ``.to()``."""
    _default.device = CPU if device is None else as_device(device)


def get_default_device() -> device:
    return device(_default.device)


def default_device(given=None) -> Device:
    """``given``, or the default device when it is None (the factories' ``device=``)."""
    return _default.device if given is None else given

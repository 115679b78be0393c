"""Storage: one flat buffer on one device, shared by every view of it."""

from __future__ import annotations

import weakref

import numpy as np

from .device import Device


class Storage:
    """A flat 1-D array plus a version counter.

    ``version`` goes up on every write, so a reader that saved a tensor can tell
    later whether it was overwritten. ``readers`` holds lazy values that still
    read this buffer; before a write they are realized (see ``before_write``),
    which keeps lazy evaluation invisible to the user.

    ``shared`` is True once code outside the framework can reach the buffer (an
    array given to ``from_numpy``, or handed out by ``.numpy()``): such writes are
    never announced, so lazy values must not wait to read it (``share``).
    """

    __slots__ = ("data", "device", "version", "readers", "shared", "__weakref__")

    def __init__(self, data, device: Device):
        if data.ndim != 1:
            raise ValueError(f"Storage needs a flat 1-D buffer, got shape {data.shape}")
        self.data = data
        self.device = device
        self.version = 0
        self.readers: weakref.WeakSet | None = None
        self.shared = False

    def __deepcopy__(self, memo) -> Storage:
        """A new Storage over a copy of the buffer: version 0, unshared, no readers."""
        return Storage(self.data.copy(), self.device)

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def __len__(self) -> int:
        return self.data.shape[0]

    def add_reader(self, reader) -> None:
        """Register a lazy value (anything with ``realize()``) that reads this buffer."""
        if self.readers is None:
            self.readers = weakref.WeakSet()
        self.readers.add(reader)

    def before_write(self) -> None:
        """Realize pending readers, then count the write."""
        if self.readers:  # tested here, not in the call: this runs before every kernel
            self._realize_readers()
        self.version += 1

    def share(self) -> None:
        """Mark the buffer reachable from outside: pending readers are realized now,
        and later ones are realized when they are built (``node.lazy_value``)."""
        self._realize_readers()
        self.shared = True

    def _realize_readers(self) -> None:
        if self.readers:
            pending = list(self.readers)
            self.readers.clear()
            for reader in pending:
                reader.realize()

    def __repr__(self) -> str:
        return (f"Storage({len(self)} x {self.dtype}, device='{self.device}', "
                f"version={self.version})")

"""Capture: record the kernels a piece of code launches, then replay only those.

An eager training step spends most of its time in Python: building trees,
checking them, looking up Plans, marshalling kernel arguments, keeping the
Node graph. Run the same step again on new data of the same shapes and all of
that work repeats to produce the very same kernel calls. A ``Recording``
keeps those calls -- each a compiled function with its arguments already
bound -- so that ``replay()`` can run them in order, into the same buffers,
with nothing else around them (the idea of CUDA graphs, done in Python).

A replay repeats kernels and nothing else: not Python decisions, not values
read back to the host. Two rules keep that honest while recording:

* reading a tensor's values to the host (``numpy()``, ``item()``, printing)
  raises ``CaptureError``, since whatever was decided from those values would
  be frozen into every replay;
* host-side work that must happen on every run (drawing random numbers, a
  NumPy scatter-add, an optimizer step whose learning rate and step count
  change, a check of data values that raises, as cross-entropy's of its
  targets) goes through ``host_op``, which runs it and records it. A replay
  runs each where it was recorded, so a check raises before the kernels
  recorded after it write anything.

Recording belongs to a thread: ``recording()`` collects the kernels the thread
that entered it launches, and another thread running meanwhile neither
records nor is refused its host reads. ``active()`` is the calling thread's
recording, or None.

The user-facing wrapper for a whole training step is ``node/capture.py``.
"""

from __future__ import annotations

import contextlib
import threading

from .counters import count


class CaptureError(RuntimeError):
    """Something a captured function did cannot be repeated by a replay."""


class Recording:
    """The kernel calls made while recording, and the buffers they write."""

    __slots__ = ("calls", "written", "_written_ids", "_constants")

    def __init__(self):
        self.calls: list[tuple] = []
        self.written: list = []  # storages, in first-write order
        self._written_ids: set[int] = set()
        self._constants: dict[int, object] = {}

    def note_constant(self, storage) -> None:
        """``storage`` was filled from host data while recording: a replay does not
        fill it again, so no recorded kernel may write into it."""
        self._constants[id(storage)] = storage

    def add(self, fn, args, *storages, tally=None) -> None:
        """Record ``fn(*args)``, which writes ``storages``; ``tally``: the kernel counter
        ``(device, kind)`` a replay of it counts (None: ``fn`` counts itself, or is no
        kernel)."""
        for storage in storages:
            if id(storage) in self._constants:
                raise CaptureError(
                    "a kernel writes in place into a tensor made from host data during the "
                    "capture; replays would start from what the last run left in it. Make "
                    "it before capturing, or with zeros()/full(), which replays refill")
        self.calls.append((fn, args, tally))
        for storage in storages:
            if id(storage) not in self._written_ids:
                self._written_ids.add(id(storage))
                self.written.append(storage)

    def wrote(self, storage) -> bool:
        """Whether a recorded call has written ``storage`` so far."""
        return id(storage) in self._written_ids

    def replay(self) -> None:
        """Run every recorded call again, in order.

        Each written buffer first counts a write (``Storage.before_write``), as the
        eager run did: lazy values still reading it are realized, and saved tensors
        see their version move.
        """
        for storage in self.written:
            storage.before_write()
        for fn, args, tally in self.calls:
            fn(*args)
            if tally is not None:
                count(*tally)

    def __len__(self) -> int:
        return len(self.calls)


class _Current(threading.local):
    """The recording in progress in this thread, or None (in a new thread: None)."""

    rec: Recording | None = None


#: This thread's recording (``this_thread.rec``): ``active()`` without a call, for the
#: checks every op computed at once makes (node/ops.py's ``_now``).
this_thread = _Current()


def active() -> Recording | None:
    """The recording in progress in the calling thread, or None. The engine and the
    tensor factories ask it before each kernel they launch."""
    return this_thread.rec


@contextlib.contextmanager
def recording():
    """Record every kernel this thread launches inside the ``with`` block into a new
    Recording (kernels other threads launch meanwhile are not part of it)."""
    if this_thread.rec is not None:
        raise CaptureError("a capture is already recording; captures do not nest")
    this_thread.rec = rec = Recording()
    try:
        yield rec
    finally:
        this_thread.rec = None


def is_recording() -> bool:
    return this_thread.rec is not None


def host_op(fn, *written_storages) -> None:
    """Run ``fn()`` (host code that writes ``written_storages``); record it when capturing.

    Each replay calls ``fn`` again, so kernels it launches are not recorded
    themselves: recording pauses while it runs. Lazy values still reading what
    it writes are computed first, while recording, so that replays compute
    them too.
    """
    rec = this_thread.rec
    if rec is None:
        fn()
        return
    for storage in written_storages:
        storage.before_write()
    this_thread.rec = None
    try:
        fn()
    finally:
        this_thread.rec = rec
    rec.add(fn, (), *written_storages)


def host_read_error(what: str) -> CaptureError:
    """The error for reading values to the host while recording: a replay cannot repeat it."""
    return CaptureError(
        f"{what} reads tensor values to the host while a step is being captured; a "
        "replay repeats only kernels, so anything decided from those values would be "
        "frozen. Read values outside the captured function (from what it returns)")


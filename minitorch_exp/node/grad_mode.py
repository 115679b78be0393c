"""Whether operations are recorded in the graph: ``no_grad`` and ``enable_grad``.

Both modes here (grad mode and fusion) belong to the thread that sets them, as
grad mode does in PyTorch: ``no_grad()`` in one thread leaves another thread
recording, and a new thread starts with grad enabled and fusion on, whatever
the thread that started it was doing.
"""

from __future__ import annotations

import contextlib
import functools
import threading


class _Modes(threading.local):
    """This thread's modes; the class attributes are a new thread's defaults."""

    grad = True
    fusion = True


_modes = _Modes()


def is_grad_enabled() -> bool:
    return _modes.grad


class _GradMode(contextlib.ContextDecorator):
    """Context manager *and* decorator that sets grad mode, restoring it afterwards."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._saved: dict[int, list[bool]] = {}  # per thread: the modes to restore

    def __enter__(self):
        self._saved.setdefault(threading.get_ident(), []).append(_modes.grad)
        _modes.grad = self.enabled
        return self

    def __exit__(self, *exc):
        ident = threading.get_ident()
        saved = self._saved[ident]
        _modes.grad = saved.pop()
        if not saved:
            del self._saved[ident]
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(self.enabled):
                return fn(*args, **kwargs)
        return wrapper


def no_grad() -> _GradMode:
    """Inside, no graph is recorded: results have ``requires_grad=False``."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    """Turn recording back on inside a ``no_grad`` region."""
    return _GradMode(True)


def fusion_enabled() -> bool:
    return _modes.fusion


@contextlib.contextmanager
def fusion(enabled: bool = True):
    """``with mt.fusion(False):`` realizes every op eagerly (for comparison and debugging)."""
    old = _modes.fusion
    _modes.fusion = enabled
    try:
        yield
    finally:
        _modes.fusion = old


# For the calling thread only, like the rest of this module (a new thread starts fusing).
def set_fusion(enabled: bool) -> None:
    _modes.fusion = bool(enabled)

"""Whether operations are recorded in the graph: ``no_grad`` and ``enable_grad``."""

from __future__ import annotations

import contextlib
import functools

_state = {"enabled": True}


def is_grad_enabled() -> bool:
    return _state["enabled"]


class _GradMode(contextlib.ContextDecorator):
    """Context manager *and* decorator that sets grad mode, restoring it afterwards."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._saved: list[bool] = []

    def __enter__(self):
        self._saved.append(_state["enabled"])
        _state["enabled"] = self.enabled
        return self

    def __exit__(self, *exc):
        _state["enabled"] = self._saved.pop()
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


_fusion = {"enabled": True}


def fusion_enabled() -> bool:
    return _fusion["enabled"]


@contextlib.contextmanager
def fusion(enabled: bool = True):
    """``with mt.fusion(False):`` realizes every op eagerly (for comparison and debugging)."""
    old = _fusion["enabled"]
    _fusion["enabled"] = enabled
    try:
        yield
    finally:
        _fusion["enabled"] = old


def set_fusion(enabled: bool) -> None:
    _fusion["enabled"] = bool(enabled)

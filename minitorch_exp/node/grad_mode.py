"""Whether operations are recorded in the graph (``no_grad``, ``enable_grad``) and fused.

The modes here (grad mode, fusion and the fusion threshold) belong to the thread
that sets them, as grad mode does in PyTorch: ``no_grad()`` in one thread leaves
another thread recording, and a new thread starts with grad enabled, fusion on
and the default threshold, whatever the thread that started it was doing.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading

# The threshold is the engine's policy (tensor/eager.py); it is set from here.
from ..tensor.eager import MEASURED_FUSION_THRESHOLD, THRESHOLD_ENV, policy  # noqa: F401


def _checked_threshold(n, what: str) -> int:
    """``n`` as a threshold: a whole number of elements >= 0, else a ValueError naming
    ``what``."""
    try:
        value = int(n) if isinstance(n, str) else operator.index(n)
    except (TypeError, ValueError):
        value = None
    if value is None or value < 0:
        raise ValueError(f"{what}: the fusion threshold is a whole number of elements "
                         f">= 0 (0 fuses every op), got {n!r}")
    return value


class _Modes(threading.local):
    """This thread's modes; the class attributes are a new thread's defaults."""

    grad = True
    fusion = True


_modes = _Modes()


def is_grad_enabled() -> bool:
    return _modes.grad


class _GradMode(contextlib.ContextDecorator):
    """Context manager *and* decorator that sets grad mode, restoring it afterwards."""

    def __init__(self, enabled: bool | None):
        self.enabled = enabled
        self._saved: dict[int, list[bool]] = {}  # per thread: the modes to restore

    def __enter__(self):
        self._saved.setdefault(threading.get_ident(), []).append(_modes.grad)
        if self.enabled is not None:  # None: as it is (inference_mode(False))
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


def inference_mode(mode=True):
    """PyTorch's ``inference_mode``: here ``no_grad``; ``mode=False`` leaves recording as
    it is. A context manager and a decorator, with or without the call
    (``@mt.inference_mode``, ``@mt.inference_mode()``)."""
    if callable(mode):
        return _GradMode(False)(mode)
    return _GradMode(False if mode else None)


def enable_grad() -> _GradMode:
    """Turn recording back on inside a ``no_grad`` region."""
    return _GradMode(True)


def fusion_enabled() -> bool:
    return _modes.fusion


@contextlib.contextmanager
def fusion(enabled: bool = True, *, threshold: int | None = None):
    """``with mt.fusion(False):`` realizes every op eagerly (for comparison and debugging);
    ``with mt.fusion(threshold=0):`` keeps even the smallest ops lazy, to fuse
    (``set_fusion_threshold``)."""
    old = _modes.fusion, policy.threshold
    if threshold is not None:
        policy.threshold = _checked_threshold(threshold, "fusion(threshold=...)")
    _modes.fusion = enabled
    try:
        yield
    finally:
        _modes.fusion, policy.threshold = old


# For the calling thread only, like the rest of this module (a new thread starts fusing).
def set_fusion(enabled: bool) -> None:
    _modes.fusion = bool(enabled)


def get_fusion_threshold() -> int:
    """Elements below which this thread computes a CPU op at once instead of fusing it."""
    return policy.threshold


def set_fusion_threshold(n: int | None) -> None:
    """Compute CPU ops of fewer than ``n`` elements at once with NumPy (0: fuse every op;
    None: back to the default, ``MINITORCH_FUSION_THRESHOLD`` or the measured one).
    For the calling thread only, like the other modes."""
    if n is None:
        vars(policy).pop("threshold", None)  # the class attribute, the default, shows
        return
    policy.threshold = _checked_threshold(n, "set_fusion_threshold")

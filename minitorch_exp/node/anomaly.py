"""detect_anomaly(): stop at the first op that makes a NaN or an Inf, and say where you wrote it.

A NaN rarely shows up where it was made: it flows through every later op
and surfaces as a NaN loss many steps on. Inside ``with mt.detect_anomaly():``

* every ``Function.apply`` records the line of *your* code that called it
  (the first frame outside this package) on its context, ``ctx.where``;
* every forward result is realized and checked: a NaN or Inf raises
  ``AnomalyError`` naming the op, its inputs' shapes and that line;
* during ``backward()``, every gradient a backward rule returns is realized and
  checked the same way, naming the op whose backward produced it.

Realizing each value turns fusion off, so this mode is for finding bugs, not
for speed (PyTorch's ``detect_anomaly`` is slow for the same reason). The mode
belongs to the thread that enters it: other threads, and threads started
inside it, are not checked.
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import threading

import numpy as np

from ..tensor.engine import realize
from ..tensor.expr import Exp, Scalar, as_exp


class _Depth(threading.local):
    """How many ``detect_anomaly`` blocks this thread is inside (0 in a new thread)."""

    depth = 0


#: ``this_thread.depth``: ``is_anomaly_enabled()`` without a call (node/ops.py's ``_now``).
this_thread = _Depth()


class AnomalyError(RuntimeError):
    """A NaN or Inf found by ``detect_anomaly`` (a RuntimeError, as in PyTorch)."""


class detect_anomaly(contextlib.ContextDecorator):  # noqa: N801 - used like a function
    """Context manager (and decorator): check every forward and backward value for NaN/Inf."""

    def __enter__(self):
        this_thread.depth += 1
        return self

    def __exit__(self, *exc):
        this_thread.depth -= 1
        return False


def is_anomaly_enabled() -> bool:
    return this_thread.depth > 0


# ---- where in the user's code ----------------------------------------------------

def user_frame() -> tuple[str, int, str] | None:
    """``(file, line, function)`` of the first caller outside minitorch_exp."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("minitorch_exp"):
        frame = frame.f_back
    if frame is None:
        return None
    where = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    del frame
    return where


def format_where(where) -> str:
    if where is None:
        return "not recorded (the op was created outside detect_anomaly())"
    file, line, function = where
    code = linecache.getline(file, line).strip()
    return f"{file}:{line}, in {function}" + (f"\n             {code}" if code else "")


# ---- the checks ------------------------------------------------------------------

def op_name(ctx) -> str:
    """``log (Elementwise)`` for a registry op, else the Function's class name."""
    op = ctx.attrs.get("op")
    name = ctx.fn.__name__
    return f"{op} ({name})" if isinstance(op, str) and name == "Elementwise" else name


def _shapes(values) -> str:
    parts = []
    for v in values:
        v = getattr(v, "_value", v)
        parts.append(f"{v.shape} {v.dtype.name}" if isinstance(v, Exp) and type(v) is not Scalar
                     else f"scalar {v!r}")
    return ", ".join(parts) or "none"


def nonfinite(t) -> str | None:
    """``'2 NaN, 1 Inf of 6 elements (first at (0, 1))'``, or None when all are finite."""
    if t.dtype.kind != "f":
        return None
    arr = np.asarray(t.numpy())
    bad = ~np.isfinite(arr)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if arr.ndim else ()
    nan = int(np.isnan(arr).sum())
    return (f"{nan} NaN, {int(bad.sum()) - nan} Inf of {arr.size} elements "
            f"(first at index {first})")


def check_forward(ctx, args, node) -> None:
    """Record where the op was created; realize its result; raise on NaN/Inf."""
    ctx.where = user_frame()
    found = nonfinite(node.value)
    if found:
        raise AnomalyError(
            f"detect_anomaly: {op_name(ctx)} produced a non-finite value in the forward pass\n"
            f"  output:  {node.shape} {node.dtype.name}: {found}\n"
            f"  inputs:  {_shapes(args)}{_inputs_note(args)}\n"
            f"  created: {format_where(ctx.where)}")


def _inputs_note(args) -> str:
    bad = [i for i, a in enumerate(args) if hasattr(a, "_value") and nonfinite(a.value)]
    if not bad:
        return " (all finite: this op made the first non-finite value)"
    return (f" (input {bad[0]} was already non-finite: it was made outside "
            "detect_anomaly() or is a leaf holding NaN/Inf)")


def check_backward(ctx, grads: tuple) -> tuple:
    """Realize each gradient ``ctx``'s backward returned; raise on NaN/Inf."""
    checked = []
    for i, (g, need) in enumerate(zip(grads, ctx.needs_input_grad)):
        if g is None or not need:
            checked.append(g)
            continue
        g = getattr(g, "_value", g)
        g = realize(as_exp(g)) if type(as_exp(g)) is not Scalar else g
        found = nonfinite(g) if isinstance(g, Exp) else None
        if found:
            raise AnomalyError(
                f"detect_anomaly: the backward of {op_name(ctx)} produced a non-finite "
                f"gradient for input {i}\n"
                f"  gradient: {g.shape} {g.dtype.name}: {found}\n"
                f"  inputs:   {_shapes(ctx.inputs)}\n"
                f"  created:  {format_where(ctx.where)}")
        checked.append(g)
    return tuple(checked)

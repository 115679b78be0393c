"""Compiling the numba kernels: source text to a loaded module, kept where it is reused.

A kernel's text (``numba_source.py``) is loaded by ``kernel_cache.load_module``:
from the checked per-user cache directory, where numba's own cache keeps the
compiled code, or compiled in memory. Modules are kept on the Plan they were
made for (``plan.compiled``, under a key naming the structure), and group
kernels here, keyed by their Plans and structure; so a kernel is compiled
once per process, and a second process loads it from disk. ``compile_stats``
counts both.

A user op's ``numpy_fn`` is compiled for scalars (``_scalar_function``) and
bound into the module under its symbol. When numba cannot compile it, the
Plan is marked refused and runs on the NumPy evaluator, with one warning
that says why (``compiled_or_none``). Invariant: a Plan marked refused is
never tried again; a module is only loaded with all of its user ops bound.

Compiling holds ``_LOCK``: two threads needing the same kernel compile it
once.
"""

from __future__ import annotations

import sys
import threading
import warnings
from pathlib import Path

import numba
import numpy as np

from . import caches, kernel_cache
from . import codegen as C
from .numba_source import group_source, kernel_source, reduce_source
from .ops import OPS, user_result

_STATS = {"generated": 0}
_DISPATCHERS: list = []
_LOCK = threading.Lock()


def load_module(source: str, bindings: dict):
    """The kernel module of ``source`` (``kernel_cache.load_module``: from the checked
    cache directory, or compiled in memory), counted for ``compile_stats``."""
    module = kernel_cache.load_module(source, bindings)
    _STATS["generated"] += 1
    _DISPATCHERS.extend([module.serial, module.parallel])
    return module


def compile_stats() -> dict[str, int]:
    """Kernels generated, compiled from scratch, and loaded from numba's disk cache."""
    compiled = sum(sum(d.stats.cache_misses.values()) for d in _DISPATCHERS)
    loaded = sum(sum(d.stats.cache_hits.values()) for d in _DISPATCHERS)
    return {"generated": _STATS["generated"], "compiled": compiled, "loaded": loaded}


# ---- kernels of Plans ----------------------------------------------------------

def elementwise_kernel(plan, key, saver, kinds, dst_dtype):
    """The Plan's loop, compiled once per key: ``("numba", ndim, saver, kinds, dst dtype)``."""
    return _plan_kernel(plan, key, lambda: kernel_source(plan, key[1], saver, kinds, dst_dtype))


def reduce_kernel(plan, reduction, n_kept, n_reduced, saver, kinds, dst_dtype, by_columns):
    """The loops of ``reduction`` (a row of ``ops.REDUCTIONS``) over the Plan, compiled
    once per structure."""
    key = ("numba-reduce", reduction.name, n_kept, n_reduced, saver, kinds, dst_dtype.char,
           by_columns)
    return _plan_kernel(plan, key, lambda: reduce_source(
        plan, reduction, n_kept, n_reduced, saver, kinds, dst_dtype, by_columns))


def _plan_kernel(plan, key, source):
    """The module kept on ``plan`` under ``key``, loaded from ``source()`` the first time."""
    kernel = plan.compiled.get(key)
    if kernel is None:
        with _LOCK:
            bindings = _user_bindings(plan)  # first: it says when a user op cannot compile
            kernel = plan.compiled[key] = load_module(source(), bindings)
    return kernel


#: (plans, ndim, savers, kinds, dst dtype chars) -> the group's module
_GROUP_KERNELS = caches.memo_table("numba.group_kernels", 1024)


def group_kernel(plans, ndim: int, savers, kinds, dst_dtypes):
    """The module running ``plans`` per element in one loop (``numba_source.group_source``),
    compiled once per structure; None when a user op in them cannot be compiled (each
    statement alone then says why, once)."""
    key = (tuple(plans), ndim, tuple(savers), kinds, tuple(dt.char for dt in dst_dtypes))
    kernel = _GROUP_KERNELS.get(key)
    if kernel is None:
        try:
            with _LOCK:
                bindings = {}
                for plan in plans:
                    bindings.update(_user_bindings(plan))
                source = group_source(plans, ndim, savers, kinds, dst_dtypes)
                kernel = _GROUP_KERNELS.keep(key, load_module(source, bindings))
        except UserOpCompileError:
            return None
    return kernel


def compiled_or_none(plan, build):
    """``build()``, or None (with one warning) when a user op cannot be compiled.

    The Plan then runs on the NumPy evaluator, still fused; ``set_cpu_backend('numba')``
    users see why in the warning, which says what the op needs to compile.
    """
    if plan.compiled.get("numba-refused"):
        return None
    try:
        return build()
    except UserOpCompileError as err:
        plan.compiled["numba-refused"] = True
        warnings.warn(f"{err} -- running this expression with the NumPy evaluator instead",
                      RuntimeWarning, stacklevel=_first_frame_outside_package())
        return None


def _first_frame_outside_package() -> int:
    """The ``stacklevel`` that points a warning at the user's line, not at ours."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


# ---- user ops ----------------------------------------------------------------

class UserOpCompileError(TypeError):
    """A user op's ``numpy_fn`` could not be compiled for scalars by numba."""


#: (op name, numpy_fn) -> the function compiled by numba for scalars
_USER_FUNCTIONS = caches.memo_table("numba.user_functions", 1024)


def _scalar_function(op):
    """``op.numpy`` compiled by numba for scalars, checked for each compute dtype used.

    Keyed by the function object: two closures with the same code differ by their cells.
    """
    key = (op.name, op.numpy)
    fn = _USER_FUNCTIONS.get(key)
    if fn is None:
        py = op.numpy
        if isinstance(py, np.ufunc):
            ufunc = py
            py = lambda *args: ufunc(*args)  # noqa: E731 - numba compiles ufunc calls
        fn = _USER_FUNCTIONS.keep(key, numba.njit(error_model="numpy")(py))
    return fn


def _user_bindings(plan) -> dict:
    """Each user op of ``plan`` under its symbol, compiled and tried for its compute
    dtype; raises ``UserOpCompileError`` when numba cannot compile one."""
    bindings = {}
    for ins in plan.instrs:
        op = OPS.get(ins.op)
        if op is None or op.py is not None:
            continue
        fn = _scalar_function(op)
        try:  # a trial call types and compiles it; ``out=None`` is simply omitted
            user_result(op, fn(*[ins.compute.type(1)] * op.arity), ())  # a scalar per element
        except Exception as err:
            raise UserOpCompileError(
                f"user op {op.name!r}: numba could not compile its numpy_fn for "
                f"{ins.compute.name} scalars. For the numba CPU backend a user op's numpy_fn "
                "must also work on scalars in nopython mode (plain arithmetic and np ufuncs, "
                "no out= handling or array-only calls); or use set_cpu_backend('numpy'). "
                f"numba said: {str(err).splitlines()[0]}") from err
        bindings[C.user_op_symbol(op.name)] = fn
    return bindings

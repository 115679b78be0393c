"""Which evaluator runs a Plan on each device.

``cpu`` has two: ``numba`` (one compiled loop per Plan, the default when numba
imports) and ``numpy`` (block-by-block ufuncs, the reference). ``cuda`` has one
generated CUDA kernel per Plan. Choose the CPU one with ``set_cpu_backend`` or
the environment variable ``MINITORCH_CPU_BACKEND``.

What the engine may call on a backend is written down in
``backend_contract.Backend``; every backend implements all of it. This module
picks the backend and is called by the engine; like the backends, it never
imports the engine, the planner or capture. Choosing another CPU backend goes
to the cache owner (``caches.invalidate``): the launches the engine keeps hold
the old backend's kernels. ``generation()`` tells a caller whether that
happened since it last looked.
"""

from __future__ import annotations

import contextlib
import os
import sys

from . import caches, environment
from .backend_contract import Backend


def _default_numba_threading_layer() -> None:
    """TBB for numba's threads where it loads, else workqueue; never GNU OpenMP by
    default (``docs/cpu_kernels.md`` says why, with measurements). A layer or
    a priority named in the environment is left as it is.

    Done at import, without importing numba: numba fixes its layer when its
    threads first start, which ``numba.set_num_threads`` does before any kernel
    of ours runs."""
    _load_pip_tbb()
    if "NUMBA_THREADING_LAYER" in os.environ or "NUMBA_THREADING_LAYER_PRIORITY" in os.environ:
        return
    priority = "tbb workqueue omp"  # numba takes the first that loads; workqueue always does
    os.environ["NUMBA_THREADING_LAYER_PRIORITY"] = priority  # read when numba is imported
    numba = sys.modules.get("numba")
    if numba is not None:
        numba.config.THREADING_LAYER_PRIORITY = priority.split()  # no effect once threads run


def _load_pip_tbb() -> None:
    """Load the ``tbb`` wheel's library by its path, so numba finds it loaded: pip
    puts it in ``<prefix>/lib``, where the loader does not look for it."""
    path = pip_tbb_path()
    if path is not None:
        import ctypes
        with contextlib.suppress(OSError):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def pip_tbb_path() -> str | None:
    """Where the ``tbb`` wheel put ``libtbb.so.12`` (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    import site
    for prefix in (sys.prefix, site.getuserbase()):
        path = os.path.join(prefix, "lib", "libtbb.so.12")
        if os.path.exists(path):
            return path
    return None


_default_numba_threading_layer()
_CPU_BACKENDS: dict[str, object] = {}
_state = {"cpu": environment.choice("MINITORCH_CPU_BACKEND", "numba", ("numba", "numpy"))}


def _cpu_backend(name: str):
    backend = _CPU_BACKENDS.get(name)
    if backend is None:
        if name == "numpy":
            from .cpu_numpy import NumpyBackend
            backend = NumpyBackend()
        elif name == "numba":
            from .cpu_numba import NumbaBackend
            backend = NumbaBackend()
        else:
            raise ValueError(f"unknown CPU backend {name!r}: expected 'numpy' or 'numba'")
        _CPU_BACKENDS[name] = backend
    return backend


def device_backend(device) -> Backend:
    """The evaluator of ``device``: the engine calls it through ``Backend``'s methods
    and nothing else (a capture records what they return, ``engine._record``)."""
    if device.type == "cpu":
        backend = _CPU_BACKENDS.get(_state["cpu"])
        if backend is not None:
            return backend
        try:
            return _cpu_backend(_state["cpu"])
        except ImportError:  # numba missing or broken: the reference evaluator still works
            _state["cpu"] = "numpy"
            return _cpu_backend("numpy")
    from .cuda import cuda_backend
    return cuda_backend()


def generation() -> int:
    """A number that moves whenever something that decided a kernel call changes: the
    CPU backend, numba's thread threshold, an op unregistered, the debug level (all
    through ``caches.invalidate``). A launch or call kept at one generation must not
    be run at another."""
    return caches.generation()


def cpu_backend() -> str:
    return _state["cpu"]


def set_cpu_backend(name: str) -> None:
    """Select the CPU evaluator: ``'numba'`` (compiled) or ``'numpy'`` (reference)."""
    _cpu_backend(name)
    _state["cpu"] = name
    caches.invalidate(f"CPU backend {name!r}")  # kept launches hold the old one's kernels


@contextlib.contextmanager
def using_cpu_backend(name: str):
    old = _state["cpu"]
    set_cpu_backend(name)
    try:
        yield
    finally:
        set_cpu_backend(old)


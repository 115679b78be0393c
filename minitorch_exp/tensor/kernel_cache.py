"""Generated kernel modules kept on disk between runs, and why they can be trusted.

A kernel is a Python module named by the hash of its source; numba compiles
it and pickles the result beside it (``__pycache__/*.nbi``, ``*.nbc``). A
later process runs the module and unpickles numba's files, so whoever can
write to the cache directory can run code in every process that uses it.
Hence these invariants:

* A directory is used only if it is a real directory (not a symbolic link),
  owned by us and writable by nobody else, and each of its parents is owned
  by us or root and writable by nobody else unless sticky (as ``/tmp`` is):
  nobody else can add files or swap the directory for theirs. The same goes
  for its ``__pycache__``. Directories created here are made with mode 0700.
* It is ``MINITORCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/minitorch_exp/kernels``,
  else ``~/.cache/minitorch_exp/kernels``; if that cannot be created or
  written, ``<tmp>/minitorch_exp-<uid>/kernels``. If the one chosen fails the
  checks, kernels are compiled in memory (nothing on disk, numba's cache off)
  and ONE warning names the directory and says why.
* A module's bytes on disk are checked against the hash in its name, and it
  is compiled from those checked bytes, never imported by path. A file that
  does not match is replaced, with one warning.
* numba's files for our kernels live only in the checked ``__pycache__``
  (``NUMBA_CACHE_DIR`` does not move them); a damaged one is deleted and the
  kernel compiled again, with one warning -- never a crash.

Only the standard library and numba are imported: this module knows nothing of
Plans or evaluators.
"""

from __future__ import annotations

import ast
import contextlib
import glob
import hashlib
import linecache
import os
import stat
import sys
import tempfile
import types
import warnings
from pathlib import Path

import numba
from numba.core import caching as numba_caching
from numba.core.caching import CompileResultCacheImpl, FunctionCache

# numba 0.6x made the in-tree locator public; before, it was _InTreeCacheLocator.
_InTreeLocator = getattr(numba_caching, "InTreeCacheLocator", None) or \
    numba_caching._InTreeCacheLocator

PREFIX = "minitorch_kernel_"
_NOT_OURS = (str(Path(__file__).resolve().parents[1]), str(Path(numba.__file__).parent),
             "<minitorch")  # frames a warning skips to reach the user's line
_CHOSEN: dict[Path, Path | None] = {}  # configured directory -> the one used (None: memory)


def module_name(source: str) -> str:
    """``minitorch_kernel_<digest>``: a module's name, which its file must hash to."""
    return PREFIX + _digest(source.encode())


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


# ---- the directory -----------------------------------------------------------

def configured_dir() -> Path:
    """``MINITORCH_CACHE_DIR``, else ``$XDG_CACHE_HOME`` or ``~/.cache``, then
    ``minitorch_exp/kernels`` (made absolute)."""
    env = os.environ.get("MINITORCH_CACHE_DIR")
    if env:
        return Path(os.path.abspath(env))
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.path.abspath(root)) / "minitorch_exp" / "kernels"


def fallback_dir() -> Path:
    """Where kernels go when the configured directory cannot be created or written."""
    return Path(tempfile.gettempdir()) / f"minitorch_exp-{os.getuid()}" / "kernels"


def cache_dir() -> Path | None:
    """The checked directory kernels are kept in; None: compile them in memory.

    Decided once per process (and configured directory), so a directory that
    fails the checks is reported by one warning.
    """
    configured = configured_dir()
    if configured not in _CHOSEN:
        _CHOSEN[configured] = _choose(configured)
    return _CHOSEN[configured]


def _choose(configured: Path) -> Path | None:
    path = configured
    if not _writable(path):
        path = fallback_dir()
        _writable(path)
    problem = _problem(path)
    if problem is None:
        pycache = path / "__pycache__"
        _writable(pycache)
        problem = _problem(pycache)
    if problem is None:
        return path
    _warn(f"minitorch_exp does not keep compiled kernels in {path}: {problem}. Kernels "
          "are compiled in memory in this process and nothing is saved for the next one. "
          "Use a directory that only you can write (mode 0700), e.g. set "
          "MINITORCH_CACHE_DIR to one.")
    return None


def _writable(path: Path) -> bool:
    """Create ``path`` if missing; whether we can then write to it."""
    try:
        _make_private(path)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _make_private(path: Path) -> None:
    """Create ``path`` and each missing parent with mode 0700 (an existing one,
    even a dangling symbolic link, is left as it is for ``_problem`` to judge)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = path.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(new, 0o700)


def _problem(path: Path) -> str | None:
    """Why ``path`` is not a safe cache directory, or None when it is.

    Safe: a real directory owned by us that nobody else can write, whose
    parents are owned by us or root and not writable by others unless sticky.
    """
    try:
        st = os.lstat(path)
    except OSError as err:
        return f"it cannot be created ({err.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    problem = _access_problem(st, (os.geteuid(),), sticky_ok=False)
    if problem:
        return f"it {problem}"
    for parent in Path(os.path.realpath(path)).parents:
        problem = _access_problem(os.stat(parent), (os.geteuid(), 0), sticky_ok=True)
        if problem:
            return f"its parent {parent} {problem}, so its contents could be swapped"
    return None


def _access_problem(st: os.stat_result, owners: tuple[int, ...], sticky_ok: bool) -> str | None:
    if st.st_uid not in owners:
        return f"is owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}"
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return f"is writable by other users (mode {st.st_mode & 0o7777:o})"
    return None


# ---- the modules -------------------------------------------------------------

def load_module(source: str, bindings: dict) -> types.ModuleType:
    """The module of ``source``, with ``bindings`` among its globals, registered in
    ``sys.modules`` under ``module_name(source)``.

    With a checked cache directory it is compiled from its file there, once the
    file's bytes hash to its name; otherwise from ``source`` in memory.
    """
    name = module_name(source)
    directory = cache_dir()
    path = None if directory is None else directory / f"{name}.py"
    data = None if path is None else _checked_bytes(path, source)
    if data is None:
        return _execute(name, source.encode(), None, bindings)
    return _execute(name, data, path, bindings)


def _checked_bytes(path: Path, source: str) -> bytes | None:
    """``path``'s bytes once they hash to its name, written from ``source`` if missing
    or different; None (and one warning) when that cannot be: compile in memory."""
    expected = path.stem.removeprefix(PREFIX)
    try:
        data = _own_file_bytes(path)
        if data is not None and _digest(data) == expected:
            return data
        if data is not None:
            _warn(f"minitorch_exp's cached kernel {path} does not match the hash in its "
                  "name (damaged or altered); it was replaced by a fresh copy.")
        data = source.encode()
        _write(path, data)
        return data
    except OSError as err:
        _warn(f"minitorch_exp cannot use the cached kernel {path} ({err}); this kernel is "
              "compiled in memory.")
        return None


def _own_file_bytes(path: Path) -> bytes | None:
    """The bytes of ``path``; None if it does not exist. OSError unless it is a
    regular file of ours: anything else we do not touch."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"not a regular file owned by uid {os.geteuid()}")
    return path.read_bytes()


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically: a reader sees the old or new file whole."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _execute(name: str, data: bytes, path: Path | None, bindings: dict) -> types.ModuleType:
    """Run ``data`` as module ``name``; with ``path`` (its checked file) the functions
    that ask for numba's cache get one in the checked ``__pycache__``."""
    filename = str(path) if path else f"<{name}>"
    tree = ast.parse(data, filename)
    cached = _turn_off_numba_cache(tree)
    module = types.ModuleType(name)
    module.__dict__.update(bindings)
    if path:
        module.__file__ = filename
    else:  # tracebacks and numba's messages can still show the source
        lines = data.decode().splitlines(keepends=True)
        linecache.cache[filename] = (len(data), None, lines, filename)
    sys.modules[name] = module
    try:
        exec(compile(tree, filename, "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    for function in cached if path else ():
        dispatcher = module.__dict__[function]
        dispatcher._cache = _CheckedDirCache(dispatcher.py_func)
    return module


def _turn_off_numba_cache(tree: ast.Module) -> list[str]:
    """Set each top-level function's ``@njit(cache=True)`` to ``cache=False``; return the
    names of those functions. numba would otherwise choose where their cache goes."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for keyword in _cache_keywords(node):
                keyword.value = ast.copy_location(ast.Constant(False), keyword.value)
                names.append(node.name)
    return names


def _cache_keywords(node: ast.FunctionDef) -> list[ast.keyword]:
    return [kw for deco in node.decorator_list if isinstance(deco, ast.Call)
            for kw in deco.keywords
            if kw.arg == "cache" and isinstance(kw.value, ast.Constant) and kw.value.value]


# ---- numba's files -----------------------------------------------------------

class _CheckedLocator(_InTreeLocator):
    """numba's files of a kernel go to ``__pycache__`` beside its checked file, which is
    made private and checked again if numba has to create it anew."""

    def ensure_cache_path(self):
        path = Path(self.get_cache_path())
        _make_private(path)
        problem = _problem(path)
        if problem:
            raise OSError(f"{path}: {problem}")


class _CheckedDirCacheImpl(CompileResultCacheImpl):
    """numba's compile-result cache of one kernel function, located only in the
    ``__pycache__`` beside the kernel's checked file: ``NUMBA_CACHE_DIR`` and
    ``NUMBA_CACHE_LOCATOR_CLASSES`` are not consulted. File names are numba's own,
    so files written before stay valid."""

    def __init__(self, py_func):  # numba's would pick a locator from the environment
        code = py_func.__code__
        self._lineno = code.co_firstlineno
        self._locator = _CheckedLocator(py_func, code.co_filename)
        fullname = f"{Path(code.co_filename).stem}.{py_func.__qualname__}"
        self._filename_base = self.get_filename_base(fullname, getattr(sys, "abiflags", ""))


class _CheckedDirCache(FunctionCache):
    """numba's cache of one kernel function. Files that fail to load (damaged pickles,
    truncated files) are deleted and the kernel compiled again; a failed save is
    reported. Either way one warning, never an exception."""

    _impl_class = _CheckedDirCacheImpl

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as err:  # unpickling damaged bytes can raise almost anything
            self._discard(err)
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception as err:  # the next run's load discards what was left damaged
            _warn(f"minitorch_exp could not save numba's compiled code in {self.cache_path}: "
                  f"{type(err).__name__}: {err}. The kernel will be compiled again next run.")

    def _discard(self, err: Exception) -> None:
        base = self._impl.filename_base
        for path in Path(self.cache_path).glob(glob.escape(base) + ".*"):
            with contextlib.suppress(OSError):
                path.unlink()
        _warn(f"minitorch_exp discarded numba's cached code {base}.* in {self.cache_path}: "
              f"{type(err).__name__}: {str(err).rstrip('.')}. The kernel is compiled again.")


def _warn(message: str) -> None:
    """One RuntimeWarning, attributed to the first caller outside this package and numba."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(_NOT_OURS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, RuntimeWarning, stacklevel=level)

"""Save and load nested structures of arrays as a single ``.npz`` file.

The file holds one entry per array (``a0``, ``a1``, ...) plus ``__meta__``, a
uint8 array of UTF-8 JSON that describes the structure. Loading never
unpickles: :func:`numpy.load` runs with ``allow_pickle=False``. Writing is
atomic: a crash mid-write leaves any previous file at ``path`` untouched.

Supported values: dicts with str or int keys, lists, tuples, None, bool, int,
float, str, and anything with ``__array__`` (stored via :func:`numpy.asarray`;
numpy scalars become 0-d arrays so their dtype survives).

Metadata layout: ``{"format": FORMAT, "version": 1, "root": node}`` where a
node is ``{"t": kind, ...}``: ``none``; ``bool``/``int``/``str`` with ``v``;
``float`` with ``v`` (finite) or ``bits`` (16 hex digits, for nan/inf);
``list``/``tuple`` with ``items``; ``dict`` with ``items`` as
``[[["s", key] or ["i", key], node], ...]``; ``array`` with ``key``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import struct
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = ["CheckpointError", "FORMAT", "VERSION", "atomic_write", "load", "save"]

FORMAT = "minitorch_exp.checkpoint"
VERSION = 1
META_KEY = "__meta__"

_SCALARS = ("none", "bool", "int", "float", "str")
_SUPPORTED = "dict, list, tuple, None, bool, int, float, str or an array"
# Errors numpy and zipfile raise for damaged archive members.
_READ_ERRORS = (ValueError, EOFError, OSError, zipfile.BadZipFile)


class CheckpointError(ValueError):
    """Raised when a checkpoint file is missing pieces or is corrupt."""


# --------------------------------------------------------------------- encode


def _encode_key(key: Any, where: str) -> list[Any]:
    """Encode a dict key as ``["s", key]`` or ``["i", key]``."""
    if isinstance(key, str):
        return ["s", key]
    if isinstance(key, int) and not isinstance(key, bool):
        return ["i", int(key)]
    raise TypeError(f"{where}: expected dict keys of type str or int, found {type(key).__name__}")


def _encode_scalar(obj: Any) -> dict[str, Any] | None:
    """Encode a Python scalar, or return None if ``obj`` is not one."""
    if obj is None:
        return {"t": "none"}
    if isinstance(obj, bool):
        return {"t": "bool", "v": obj}
    if isinstance(obj, int):
        return {"t": "int", "v": int(obj)}
    if isinstance(obj, float):
        if math.isfinite(obj):
            return {"t": "float", "v": float(obj)}  # JSON keeps repr(): exact
        return {"t": "float", "bits": struct.pack(">d", obj).hex()}
    if isinstance(obj, str):
        return {"t": "str", "v": str(obj)}
    return None


def _encode_array(obj: Any, arrays: dict[str, np.ndarray], where: str) -> dict[str, Any]:
    """Store an array-like under the next free key."""
    array = np.asarray(obj)
    if array.dtype.hasobject:
        expected = "an array of plain (non-object) dtype"
        raise TypeError(f"{where}: expected {expected}, found {array.dtype}")
    key = f"a{len(arrays)}"
    arrays[key] = array
    return {"t": "array", "key": key}


def _encode(obj: Any, arrays: dict[str, np.ndarray], where: str, active: set[int]) -> dict:
    """Encode ``obj`` as a JSON node, collecting arrays into ``arrays``."""
    if isinstance(obj, np.generic):
        return _encode_array(obj, arrays, where)  # keep numpy scalar dtypes exact
    scalar = _encode_scalar(obj)
    if scalar is not None:
        return scalar
    if not isinstance(obj, (dict, list, tuple)):
        if hasattr(obj, "__array__"):
            return _encode_array(obj, arrays, where)
        raise TypeError(f"{where}: expected {_SUPPORTED}, found {type(obj).__name__}")
    if id(obj) in active:
        raise ValueError(f"{where}: the structure contains itself (a reference cycle)")
    active.add(id(obj))
    try:
        if isinstance(obj, dict):
            items = [
                [_encode_key(k, where), _encode(v, arrays, f"{where}[{k!r}]", active)]
                for k, v in obj.items()
            ]
            return {"t": "dict", "items": items}
        kind = "tuple" if isinstance(obj, tuple) else "list"
        items = [_encode(v, arrays, f"{where}[{i}]", active) for i, v in enumerate(obj)]
        return {"t": kind, "items": items}
    finally:
        active.discard(id(obj))


# --------------------------------------------------------------------- write


def _fsync_dir(directory: Path) -> None:
    """Flush a directory entry to disk where the platform allows it."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    with contextlib.suppress(OSError):
        fd = os.open(directory, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Write a file atomically: temp file, flush, fsync, then rename.

    Args:
        path: Target file; replaced only once the new content is on disk.
        write: Called with a binary file object to produce the content.
    """
    path = Path(path)
    directory = path.parent
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Save a nested structure of arrays and scalars to ``path``.

    The path is used exactly as given (no ``.npz`` suffix is added).

    Args:
        obj: Dicts (str/int keys), lists, tuples, scalars and arrays.
        path: Target file.

    Raises:
        TypeError: ``obj`` holds an unsupported value or key.
        ValueError: ``obj`` contains a reference cycle.
    """
    arrays: dict[str, np.ndarray] = {}
    root = _encode(obj, arrays, "obj", set())
    meta = {"format": FORMAT, "version": VERSION, "root": root}
    text = json.dumps(meta, allow_nan=False)  # ASCII: lone surrogates survive
    arrays[META_KEY] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    atomic_write(path, lambda f: np.savez(f, **arrays))


# --------------------------------------------------------------------- decode


class _Decoder:
    """Rebuilds a structure from its JSON description and the npz arrays."""

    def __init__(self, path: Path, npz: Any, wrap: Callable[[np.ndarray], Any] | None) -> None:
        self.path = path
        self.npz = npz
        self.wrap = wrap

    def fail(self, where: str, expected: str, found: Any) -> CheckpointError:
        """Build a CheckpointError naming the file and the position."""
        return CheckpointError(
            f"{self.path}: corrupt metadata at {where}: expected {expected}, found {found!r}"
        )

    def decode(self, node: Any, where: str) -> Any:
        """Decode one JSON node."""
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise self.fail(where, 'an object with a "t" field', node)
        kind = node["t"]
        if kind in _SCALARS:
            return self.scalar(node, where)
        if kind == "array":
            return self.array(node, where)
        if kind in ("list", "tuple"):
            items = [self.decode(v, f"{where}[{i}]") for i, v in enumerate(self.items(node, where))]
            return tuple(items) if kind == "tuple" else items
        if kind == "dict":
            return self.mapping(node, where)
        raise self.fail(where, "a known node type", kind)

    def items(self, node: dict, where: str) -> list:
        """Return the ``items`` list of a container node."""
        items = node.get("items")
        if not isinstance(items, list):
            raise self.fail(where, "an items list", items)
        return items

    def scalar(self, node: dict, where: str) -> Any:
        """Decode a none/bool/int/float/str node."""
        kind, value = node["t"], node.get("v")
        if kind == "none":
            return None
        if kind == "float" and "bits" in node:
            return self.float_bits(node["bits"], where)
        types = {"bool": bool, "int": int, "str": str, "float": float}
        if type(value) is not types[kind]:
            raise self.fail(where, f"a value of type {kind}", value)
        return value

    def float_bits(self, bits: Any, where: str) -> float:
        """Decode a non-finite float stored as 16 hex digits of IEEE bits."""
        if not (isinstance(bits, str) and re.fullmatch("[0-9a-f]{16}", bits)):
            raise self.fail(where, "16 hex digits of float bits", bits)
        return struct.unpack(">d", bytes.fromhex(bits))[0]

    def mapping(self, node: dict, where: str) -> dict:
        """Decode a dict node with typed keys."""
        out: dict[Any, Any] = {}
        for pair in self.items(node, where):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise self.fail(where, "a [key, value] pair", pair)
            key = self.key(pair[0], where)
            out[key] = self.decode(pair[1], f"{where}[{key!r}]")
        return out

    def key(self, enc: Any, where: str) -> str | int:
        """Decode a ``["s", str]`` or ``["i", int]`` key."""
        ok = isinstance(enc, list) and len(enc) == 2
        if ok and enc[0] == "s" and type(enc[1]) is str:
            return enc[1]
        if ok and enc[0] == "i" and type(enc[1]) is int:
            return enc[1]
        raise self.fail(where, 'a key ["s", str] or ["i", int]', enc)

    def array(self, node: dict, where: str) -> Any:
        """Load the array a node refers to, passing it through ``wrap``."""
        key = node.get("key")
        if not isinstance(key, str) or key == META_KEY:
            raise self.fail(where, "an array key", key)
        if key not in self.npz.files:
            raise CheckpointError(f"{self.path}: {where} refers to array {key!r}, "
                                  f"expected it in the file, found only {self.npz.files}")
        try:
            array = self.npz[key]
        except _READ_ERRORS as exc:
            raise CheckpointError(f"{self.path}: array {key!r}: expected a plain array "
                                  f"loadable without pickle, found: {exc}") from exc
        return array if self.wrap is None else self.wrap(array)


def _read_meta(path: Path, npz: Any) -> Any:
    """Return the validated root node from the ``__meta__`` entry."""
    if META_KEY not in npz.files:
        raise CheckpointError(f"{path}: expected a {META_KEY!r} entry, found only {npz.files}")
    try:
        raw = npz[META_KEY]
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"a {raw.dtype} array of shape {raw.shape}")
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (*_READ_ERRORS, RecursionError) as exc:
        raise CheckpointError(f"{path}: expected {META_KEY} to be UTF-8 JSON in a 1-d uint8 "
                              f"array, found: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{path}: expected format {FORMAT!r}, found {found!r}")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path}: expected version {VERSION}, found {meta.get('version')!r}")
    return meta.get("root")


def _open_npz(path: Path) -> Any:
    """Open ``path`` as an npz archive without pickle support."""
    try:
        npz = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: expected an .npz archive, found: {exc}") from exc
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise CheckpointError(f"{path}: expected an .npz archive, found a single .npy array")
    return npz


def load(path: str | os.PathLike[str], wrap: Callable[[np.ndarray], Any] | None = None) -> Any:
    """Load a structure written by :func:`save`.

    Args:
        path: File to read.
        wrap: Optional function applied to every loaded array (e.g. to make
            framework tensors).

    Returns:
        The rebuilt structure.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: The file is not a valid checkpoint.
    """
    path = Path(path)
    with _open_npz(path) as npz:
        root = _read_meta(path, npz)
        try:
            return _Decoder(path, npz, wrap).decode(root, "root")
        except RecursionError:
            raise CheckpointError(f"{path}: expected metadata of sane depth, "
                                  "found nesting too deep to rebuild") from None

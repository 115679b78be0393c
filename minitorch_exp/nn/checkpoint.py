"""Save and load nested structures of arrays as a single ``.npz`` file.

The file holds one entry per array (``a0``, ``a1``, ...) plus ``__meta__``, a
uint8 array of UTF-8 JSON that describes the structure. Loading never
unpickles and never trusts a header: every member must be a stored ``.npy``
of a numeric or bool dtype whose shape and item size match the member's real
size, checked before anything is allocated; anything else raises
:class:`CheckpointError`. Structures nest at most :data:`MAX_DEPTH` levels.

Writing is atomic: the data goes to ``.<name>.<pid>.<random>.tmp`` next to
the target, created with mode 0o666 less the umask, then is renamed over the
target. A crash mid-write leaves any previous file untouched; temp files left
by killed processes are removed by the next save into the same directory.

Supported values: dicts with str or int keys, lists, tuples, None, bool, int,
float, str, and anything with ``__array__`` of a numeric or bool dtype (stored
via :func:`numpy.asarray`; numpy scalars become 0-d arrays so their dtype
survives).

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
import secrets
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = ["CheckpointError", "FORMAT", "MAX_DEPTH", "VERSION", "atomic_write", "load", "save"]

FORMAT = "minitorch_exp.checkpoint"
VERSION = 1
META_KEY = "__meta__"
MAX_DEPTH = 100  # deepest level of any value; the root is level 0

_SCALARS = ("none", "bool", "int", "float", "str")
_SUPPORTED = "dict, list, tuple, None, bool, int, float, str or an array"
_NUMERIC_KINDS = "biufc"  # bool, signed, unsigned, float, complex
# What numpy and zipfile raise for damaged archives and members.
_READ_ERRORS = (ValueError, EOFError, OSError, NotImplementedError, zipfile.BadZipFile,
                struct.error, zlib.error)
# Zip flag bits zipfile cannot read: encrypted, patched data, strong encryption.
_UNREADABLE_FLAGS = 0x1 | 0x20 | 0x40
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[0-9a-f]{8}\.tmp")


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


def _dtype_text(dtype: np.dtype) -> str:
    """Name a dtype in messages, with its type string where that differs."""
    return str(dtype) if str(dtype) == dtype.str else f"{dtype} ({dtype.str})"


def _is_numeric(dtype: np.dtype) -> bool:
    return dtype.kind in _NUMERIC_KINDS and dtype.fields is None and dtype.subdtype is None


def _encode_array(obj: Any, arrays: dict[str, np.ndarray], where: str) -> dict[str, Any]:
    """Store an array-like under the next free key."""
    array = np.asarray(obj)
    if not _is_numeric(array.dtype):
        expected = "an array of a numeric or bool (non-object) dtype"
        raise TypeError(f"{where}: expected {expected}, found {_dtype_text(array.dtype)}")
    key = f"a{len(arrays)}"
    arrays[key] = array
    return {"t": "array", "key": key}


def _encode(obj: Any, arrays: dict[str, np.ndarray], where: str, active: set[int],
            depth: int = 0) -> dict:
    """Encode ``obj`` as a JSON node, collecting arrays into ``arrays``."""
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: expected nesting at most {MAX_DEPTH} levels deep, "
                         f"found level {depth}")
    if isinstance(obj, np.generic) and _is_numeric(obj.dtype):
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
                [_encode_key(k, where), _encode(v, arrays, f"{where}[{k!r}]", active, depth + 1)]
                for k, v in obj.items()
            ]
            return {"t": "dict", "items": items}
        kind = "tuple" if isinstance(obj, tuple) else "list"
        items = [_encode(v, arrays, f"{where}[{i}]", active, depth + 1)
                 for i, v in enumerate(obj)]
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


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (in doubt: yes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # e.g. PermissionError: it exists but belongs to someone else
    return True


def _remove_stale_temps(directory: Path) -> None:
    """Delete temp files of our naming pattern whose writing process is gone."""
    if os.name != "posix":  # no harmless liveness probe elsewhere
        return
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            match = _TEMP_NAME.fullmatch(entry.name)
            if match and int(match["pid"]) != os.getpid() and not _pid_alive(int(match["pid"])):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _create_temp(path: Path) -> tuple[int, Path]:
    """Create ``.<name>.<pid>.<random>.tmp`` beside ``path``, mode 0o666 less the umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        with contextlib.suppress(FileExistsError):
            return os.open(tmp, flags, 0o666), tmp


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Write a file atomically: temp file, flush, fsync, then rename.

    A new file gets mode 0o666 less the umask (the kernel applies it when the
    temp file is created); a replaced file keeps its mode. Temp files of
    earlier writers that were killed are removed from the directory first.

    Args:
        path: Target file; replaced only once the new content is on disk.
        write: Called with a binary file object to produce the content.
    """
    path = Path(path)
    directory = path.parent
    _remove_stale_temps(directory)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else None
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
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
        TypeError: ``obj`` holds an unsupported value or key, or an array
            whose dtype is not numeric or bool.
        ValueError: ``obj`` contains a reference cycle or nests deeper than
            :data:`MAX_DEPTH`.
    """
    arrays: dict[str, np.ndarray] = {}
    root = _encode(obj, arrays, "obj", set())
    meta = {"format": FORMAT, "version": VERSION, "root": root}
    text = json.dumps(meta, allow_nan=False)  # ASCII: lone surrogates survive
    arrays[META_KEY] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    atomic_write(path, lambda f: np.savez(f, **arrays))


# --------------------------------------------------------------------- read


class _Archive:
    """The members of an open npz, each read as a checked numeric array."""

    def __init__(self, path: Path, archive: zipfile.ZipFile) -> None:
        self.path = path
        self.zip = archive
        self.size = path.stat().st_size
        self.members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}

    def fail(self, key: str, expected: str, found: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: array {key!r}: expected {expected}, found {found}")

    def read(self, key: str) -> np.ndarray:
        """Read member ``key`` after checking its zip entry and its .npy header."""
        info = self.members[key]
        self.check_entry(key, info)
        try:
            with self.zip.open(info) as member:
                return self.read_npy(key, member, info.file_size)
        except CheckpointError:
            raise
        except _READ_ERRORS as exc:
            raise self.fail(key, "an intact archive member",
                            f"{type(exc).__name__}: {exc}") from exc

    def check_entry(self, key: str, info: zipfile.ZipInfo) -> None:
        """Refuse entries zipfile cannot read plainly, or sizes the file cannot hold."""
        if info.flag_bits & _UNREADABLE_FLAGS:
            raise self.fail(key, "a plain (unencrypted, unpatched) member",
                            f"zip flag bits 0x{info.flag_bits:04x}")
        if info.compress_type != zipfile.ZIP_STORED:
            raise self.fail(key, "a stored (uncompressed) member, as save() writes",
                            f"compression method {info.compress_type}")
        if info.compress_size != info.file_size or info.file_size > self.size:
            raise self.fail(key, f"a stored member within the {self.size}-byte file",
                            f"sizes {info.compress_size} stored, {info.file_size} uncompressed")

    def read_npy(self, key: str, member: BinaryIO, size: int) -> np.ndarray:
        """Parse an .npy member; its header must describe exactly the bytes present."""
        head = member.read(8)
        if head[:6] != np.lib.format.MAGIC_PREFIX:
            raise self.fail(key, "an .npy member starting with b'\\x93NUMPY'", repr(head))
        version = (head[6], head[7])
        if version not in _NPY_HEADER_READERS:
            raise self.fail(key, ".npy format version 1.0 or 2.0", "{}.{}".format(*version))
        shape, fortran_order, dtype = _NPY_HEADER_READERS[version](member)
        if not _is_numeric(dtype):
            raise self.fail(key, "a numeric or bool dtype (loadable without pickle)",
                            _dtype_text(dtype))
        nbytes = math.prod(shape) * dtype.itemsize
        available = size - member.tell()
        if min(shape, default=0) < 0 or nbytes != available:
            found = f"a header claiming shape {shape} x {dtype.itemsize}-byte {dtype} = {nbytes}"
            raise self.fail(key, f"{available} bytes of data after the header", f"{found} bytes")
        data = member.read(nbytes)
        if len(data) != nbytes:
            raise self.fail(key, f"{nbytes} bytes of data", f"end of member after {len(data)}")
        array = np.frombuffer(data, dtype)
        array = array.reshape(shape[::-1]).T if fortran_order else array.reshape(shape)
        return array.copy(order="K")


def _json_depth(text: str) -> int:
    """Deepest nesting of brackets and braces in JSON text, outside strings."""
    codes = np.frombuffer(re.sub(r'"(?:[^"\\]|\\.)*"', "", text).encode(), np.uint8)
    opens, closes = np.isin(codes, list(b"[{")), np.isin(codes, list(b"]}"))
    return int(np.cumsum(opens.astype(np.int64) - closes).max(initial=0))


class _Decoder:
    """Rebuilds a structure from its JSON description and the archive's arrays."""

    def __init__(self, path: Path, archive: _Archive,
                 wrap: Callable[[np.ndarray], Any] | None) -> None:
        self.path = path
        self.archive = archive
        self.wrap = wrap

    def fail(self, where: str, expected: str, found: Any) -> CheckpointError:
        """Build a CheckpointError naming the file and the position."""
        return CheckpointError(
            f"{self.path}: corrupt metadata at {where}: expected {expected}, found {found!r}"
        )

    def decode(self, node: Any, where: str, depth: int = 0) -> Any:
        """Decode one JSON node found ``depth`` containers below the root."""
        if depth > MAX_DEPTH:
            raise CheckpointError(f"{self.path}: at {where}: expected nesting at most "
                                  f"{MAX_DEPTH} levels deep, found level {depth}")
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise self.fail(where, 'an object with a "t" field', node)
        kind = node["t"]
        if kind in _SCALARS:
            return self.scalar(node, where)
        if kind == "array":
            return self.array(node, where)
        if kind in ("list", "tuple"):
            items = [self.decode(v, f"{where}[{i}]", depth + 1)
                     for i, v in enumerate(self.items(node, where))]
            return tuple(items) if kind == "tuple" else items
        if kind == "dict":
            return self.mapping(node, where, depth)
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

    def mapping(self, node: dict, where: str, depth: int) -> dict:
        """Decode a dict node with typed keys."""
        out: dict[Any, Any] = {}
        for pair in self.items(node, where):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise self.fail(where, "a [key, value] pair", pair)
            key = self.key(pair[0], where)
            out[key] = self.decode(pair[1], f"{where}[{key!r}]", depth + 1)
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
        if key not in self.archive.members:
            raise CheckpointError(f"{self.path}: {where} refers to array {key!r}, expected it "
                                  f"in the file, found only {sorted(self.archive.members)}")
        array = self.archive.read(key)
        return array if self.wrap is None else self.wrap(array)


def _read_meta(path: Path, archive: _Archive) -> Any:
    """Return the validated root node from the ``__meta__`` entry."""
    if META_KEY not in archive.members:
        raise CheckpointError(f"{path}: expected a {META_KEY!r} entry, "
                              f"found only {sorted(archive.members)}")
    raw = archive.read(META_KEY)
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"a {raw.dtype} array of shape {raw.shape}")
        text = raw.tobytes().decode("utf-8")
        depth, limit = _json_depth(text), 3 * MAX_DEPTH + 2  # a dict level is 3 JSON levels
        if depth > limit:
            raise CheckpointError(f"{path}: expected nesting at most {MAX_DEPTH} levels deep "
                                  f"(JSON depth {limit}), found JSON depth {depth}")
        meta = json.loads(text)
    except ValueError as exc:
        if isinstance(exc, CheckpointError):
            raise
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
    with open(path, "rb") as f:  # FileNotFoundError and PermissionError pass through
        head = f.read(6)
    if head == np.lib.format.MAGIC_PREFIX:
        raise CheckpointError(f"{path}: expected an .npz archive, found a single .npy array")
    if not head.startswith(b"PK"):
        raise CheckpointError(f"{path}: expected an .npz archive (a zip file), "
                              f"found first bytes {head!r}")
    try:
        npz = np.load(path, allow_pickle=False)
    except _READ_ERRORS as exc:
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
        archive = _Archive(path, npz.zip)
        root = _read_meta(path, archive)
        return _Decoder(path, archive, wrap).decode(root, "root")

"""The safetensors format, read and written with NumPy alone (no pickle, no new dependency).

A file is three parts::

    8 bytes   N, the header's length, unsigned little-endian
    N bytes   a JSON object: {name: {"dtype": "F32", "shape": [2, 3],
              "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
    the rest  the tensors' bytes, C order, little-endian; offsets count from here

Reading trusts nothing in the header. ``N`` must fit in the file and under
:data:`MAX_HEADER_BYTES`; the header must be UTF-8 JSON without duplicate keys;
every entry's dtype must be one minitorch_exp holds, its shape's byte count
must equal its ``data_offsets`` span, and the spans, sorted, must tile the
data exactly: no overlap, no gap, nothing past the end. All of it is checked
before any tensor is allocated, so a read allocates at most the file's size.
Anything else raises :class:`SafetensorsError`, naming the file, the entry and
the byte offsets in the file.

Writing pads the header with spaces so the data starts 8-byte aligned (as the
safetensors package does), orders tensors by item size so each stays aligned,
and goes through ``checkpoint.atomic_write``: a crash leaves the old file.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .checkpoint import CheckpointError, atomic_write

__all__ = ["DTYPES", "MAX_HEADER_BYTES", "SafetensorsError", "load_file", "save_file"]

#: safetensors' dtype names for the dtypes minitorch_exp holds.
DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "I64": np.dtype("<i8"),
          "I32": np.dtype("<i4"), "BOOL": np.dtype("?"), "F16": np.dtype("<f2")}
_NAMES = {dtype.newbyteorder("="): name for name, dtype in DTYPES.items()}
#: The safetensors package refuses headers over 100 MB; so do we.
MAX_HEADER_BYTES = 100_000_000
MAX_DIMS = 64  # NumPy's limit
METADATA = "__metadata__"
_FIELDS = {"dtype", "shape", "data_offsets"}


class SafetensorsError(CheckpointError):
    """A safetensors file that is damaged, hostile, or holds a dtype we do not support."""


# --------------------------------------------------------------------- write


def _entries(tensors: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
    """Each value as a C-ordered little-endian array, checked."""
    out = []
    for name, value in tensors.items():
        if not isinstance(name, str) or name == METADATA:
            raise TypeError(f"save_file: expected tensor names of type str other than "
                            f"{METADATA!r}, found {name!r}")
        array = np.asarray(value)
        native = array.dtype.newbyteorder("=") if array.dtype.byteorder != "|" else array.dtype
        if native not in _NAMES:
            kept = ", ".join(f"{d.name} ({n})" for n, d in DTYPES.items())
            raise TypeError(f"save_file: tensor {name!r}: expected one of {kept}, "
                            f"found {array.dtype}")
        # np.asarray, not np.ascontiguousarray: that one makes a 0-d array 1-d
        out.append((name, np.asarray(array, DTYPES[_NAMES[native]], order="C")))
    return out


def _metadata(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError(f"save_file: expected metadata mapping str to str, found {metadata!r}")
    return dict(metadata)


def save_file(tensors: Mapping[str, Any], path: str | os.PathLike[str],
              metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` (name -> array-like) as a safetensors file, atomically.

    Args:
        tensors: Arrays of float64, float32, int64, int32 or bool.
        path: Target file.
        metadata: Optional text-to-text mapping stored as ``__metadata__``.

    Raises:
        TypeError: A name that is not a string, a dtype not listed above, or
            metadata that is not text to text.
    """
    entries = _entries(tensors)
    entries.sort(key=lambda e: -e[1].dtype.itemsize)  # stable: keeps the caller's order
    header: dict[str, Any] = {}
    meta = _metadata(metadata)
    if meta is not None:
        header[METADATA] = meta
    offset = 0
    for name, array in entries:
        header[name] = {"dtype": _NAMES[array.dtype.newbyteorder("=")],
                        "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(len(text) + 8) % 8)

    def write(f: BinaryIO) -> None:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, array in entries:
            f.write(memoryview(array.reshape(-1)).cast("B"))

    atomic_write(path, write)


# --------------------------------------------------------------------- read


class _Header:
    """The checked header of one file: ``entries`` is [(name, dtype, shape, begin, end)]
    in data order, offsets relative to ``start``, the first data byte of the file."""

    def __init__(self, path: Path, f: BinaryIO, size: int) -> None:
        self.path = path
        self.size = size
        n = self.length(f)
        self.start = 8 + n
        self.data_size = size - self.start
        header = self.parse(f.read(n))
        self.metadata = self.check_metadata(header.pop(METADATA, None))
        self.entries = self.check_spans([self.entry(k, v) for k, v in header.items()])

    def fail(self, expected: str, found: str, name: str | None = None) -> SafetensorsError:
        where = f"{self.path}" + ("" if name is None else f": tensor {name!r}")
        return SafetensorsError(f"{where}: expected {expected}, found {found}")

    def length(self, f: BinaryIO) -> int:
        head = f.read(8)
        if len(head) < 8:
            raise self.fail("an 8-byte header length", f"a {self.size}-byte file")
        n = struct.unpack("<Q", head)[0]
        if n > min(self.size - 8, MAX_HEADER_BYTES):
            raise self.fail(f"a header length within the file's {self.size - 8} bytes after "
                            f"the length and at most {MAX_HEADER_BYTES}",
                            f"{n} (bytes 0..8)")
        return n

    def parse(self, raw: bytes) -> dict:
        def no_duplicates(pairs):
            seen: dict[str, Any] = {}
            for key, value in pairs:
                if key in seen:
                    raise self.fail("unique keys in the header", f"{key!r} twice")
                seen[key] = value
            return seen

        if not raw.startswith(b"{"):
            raise self.fail("a JSON object header starting with '{' at byte 8",
                            f"{raw[:16]!r}")
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
        except SafetensorsError:
            raise
        except (ValueError, RecursionError) as exc:
            raise self.fail(f"a UTF-8 JSON header in bytes 8..{self.start}",
                            f"{type(exc).__name__}: {exc}") from None
        if not isinstance(header, dict):
            raise self.fail("a JSON object header", type(header).__name__)
        return header

    def check_metadata(self, meta: Any) -> dict[str, str] | None:
        if meta is None:
            return None
        if not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
            raise self.fail(f"{METADATA} mapping text to text", repr(meta)[:200])
        return meta

    def entry(self, name: str, info: Any) -> tuple[str, np.dtype, tuple, int, int]:
        if not isinstance(info, dict) or set(info) != _FIELDS:
            found = sorted(info) if isinstance(info, dict) else type(info).__name__
            raise self.fail(f"an object with fields {sorted(_FIELDS)}", f"{found}", name)
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            kept = ", ".join(DTYPES)
            hint = ": convert it to F32 before saving" if str(dtype)[:1] in "FB" else ""
            raise self.fail(f"a dtype minitorch_exp holds ({kept})",
                            f"dtype {str(dtype)[:40]!r}{hint}", name)
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
                and all(type(d) is int and d >= 0 for d in shape)):
            raise self.fail(f"a shape of at most {MAX_DIMS} non-negative ints",
                            repr(shape)[:200], name)
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise self.fail("data_offsets [begin, end] with 0 <= begin <= end",
                            repr(offsets)[:200], name)
        begin, end = offsets
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if nbytes != end - begin:
            raise self.fail(f"shape {shape} of {dtype} to need {nbytes} bytes",
                            f"data_offsets [{begin}, {end}] holding {end - begin} "
                            f"{self.where(begin, end)}", name)
        return name, DTYPES[dtype], tuple(shape), begin, end

    def where(self, begin: int, end: int) -> str:
        return f"(file bytes {self.start + begin}..{self.start + end})"

    def check_spans(self, entries: list) -> list:
        """Sorted by offset, the spans must tile the data section exactly."""
        entries.sort(key=lambda e: (e[3], e[4]))
        at, previous = 0, None
        for name, _, _, begin, end in entries:
            if begin != at:
                what = "overlaps" if begin < at else "leaves a gap after"
                after = f"tensor {previous!r}" if previous else "the header"
                raise self.fail(f"data to start at offset {at}, where {after} ends",
                                f"data_offsets [{begin}, {end}] {self.where(begin, end)}, "
                                f"which {what} it", name)
            if end > self.data_size:
                raise self.fail(f"data within the file's {self.data_size} data bytes "
                                f"(the file is {self.size} bytes)",
                                f"data_offsets [{begin}, {end}] {self.where(begin, end)}",
                                name)
            at, previous = end, name
        if at != self.data_size:
            raise self.fail(f"the tensors to cover all {self.data_size} data bytes",
                            f"{self.data_size - at} bytes after the last tensor "
                            f"(file bytes {self.start + at}..{self.size})")
        return entries


def read_header(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The checked header of a file, without its data: ({name: (dtype, shape)}, metadata)."""
    path = Path(path)
    with open(path, "rb") as f:
        header = _Header(path, f, os.fstat(f.fileno()).st_size)
    return {e[0]: (e[1].newbyteorder("="), e[2]) for e in header.entries}, header.metadata


def load_file(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read every tensor of a safetensors file as a new, writable NumPy array.

    Returns:
        name -> array, in the order of the data in the file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        SafetensorsError: The file is damaged or hostile, or holds a dtype
            minitorch_exp does not support (BF16, F8_*, I8, U8 ...).
    """
    path = Path(path)
    with open(path, "rb") as f:
        header = _Header(path, f, os.fstat(f.fileno()).st_size)
        f.seek(header.start)
        out = {}
        for name, dtype, shape, begin, end in header.entries:
            array = np.empty(shape, dtype.newbyteorder("="))
            got = f.readinto(memoryview(array.reshape(-1)).cast("B")) if end > begin else 0
            if got != end - begin:  # the file shrank while we read it
                raise header.fail(f"{end - begin} bytes {header.where(begin, end)}",
                                  f"end of file after {got}", name)
            if dtype.newbyteorder("=") != dtype:
                array = array.byteswap()  # big-endian hosts: the file is little-endian
            out[name] = array
    return out

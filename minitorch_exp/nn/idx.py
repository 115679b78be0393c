"""Reader for the IDX file format used by MNIST and its relatives.

An IDX file is a 4-byte magic number (two zero bytes, a type code, the number
of dimensions), one big-endian uint32 per dimension, then the elements in
row-major order, big-endian. Files may be gzip-compressed; compression is
detected from the first two bytes, not from the file name.

The reader never trusts the header: a header claiming more than ``max_bytes``
of element data (default :data:`MAX_BYTES`) is refused before anything is
read; the payload is then read in bounded chunks, stopping at the claimed size
(so a gzip bomb decompresses no further than the claim), and memory follows
the data actually present. Every malformed input raises :class:`IDXError`
naming the file, the byte offset, and what was expected.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np

from ..tensor import environment

__all__ = ["IDXError", "MNIST", "load_mnist", "read_idx"]

GZIP_MAGIC = b"\x1f\x8b"
MAX_NDIM = 4
MAX_ELEMENTS = 2**31
MAX_BYTES = 2 * 2**30  # default cap on the element data a header may claim
CHUNK_BYTES = 1 << 20

# Type code -> big-endian dtype of the stored elements.
TYPE_CODES: dict[int, np.dtype] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_CORRUPT_GZIP = (EOFError, zlib.error, gzip.BadGzipFile)


class IDXError(ValueError):
    """Raised when a file is not a well-formed IDX file."""


class _Stream:
    """A binary stream that counts the (decompressed) bytes read so far."""

    def __init__(self, fileobj: BinaryIO, path: Path, compressed: bool, max_bytes: int) -> None:
        self.fileobj = fileobj
        self.path = path
        self.compressed = compressed
        self.max_bytes = max_bytes
        self.offset = 0

    def error(self, offset: int, expected: str, found: str) -> IDXError:
        """Build an IDXError for this file at ``offset``."""
        where = "decompressed byte offset" if self.compressed else "byte offset"
        return IDXError(f"{self.path}: at {where} {offset}: expected {expected}, found {found}")

    def read(self, n: int) -> bytes:
        """Read up to ``n`` bytes, turning gzip corruption into IDXError."""
        try:
            data = self.fileobj.read(n)
        except _CORRUPT_GZIP as exc:
            expected = f"a valid gzip stream (reading {n} bytes from here)"
            raise self.error(self.offset, expected, f"corrupt gzip data: {exc}") from exc
        self.offset += len(data)
        return data

    def read_exact(self, n: int, what: str) -> bytes:
        """Read exactly ``n`` bytes or raise an IDXError describing ``what``."""
        start = self.offset
        data = self.read(n)
        if len(data) != n:
            expected = f"{n} bytes of {what} from offset {start}"
            raise self.error(self.offset, expected, f"end of file after {len(data)}")
        return data


def _read_header(stream: _Stream) -> tuple[np.dtype, tuple[int, ...]]:
    """Parse and validate the magic number and the dimension sizes."""
    magic = stream.read_exact(4, "magic number")
    if magic[:2] != b"\x00\x00":
        raise stream.error(0, "magic starting with bytes 00 00", f"{magic[:2].hex(' ')}")
    code, ndim = magic[2], magic[3]
    if code not in TYPE_CODES:
        known = ", ".join(f"0x{c:02X}" for c in TYPE_CODES)
        raise stream.error(2, f"a type code among {known}", f"0x{code:02X}")
    if not 1 <= ndim <= MAX_NDIM:
        raise stream.error(3, f"a number of dimensions in 1..{MAX_NDIM}", str(ndim))
    raw_dims = stream.read_exact(4 * ndim, f"{ndim} dimension sizes")
    dims = tuple(int(d) for d in np.frombuffer(raw_dims, dtype=">u4"))
    _check_size(stream, dims, TYPE_CODES[code])
    return TYPE_CODES[code], dims


def _check_size(stream: _Stream, dims: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse dimension sizes whose product is not a sane element or byte count."""
    for i, dim in enumerate(dims):
        if dim >= MAX_ELEMENTS:
            raise stream.error(4 + 4 * i, f"dimension {i} below {MAX_ELEMENTS}", str(dim))
    count = int(np.prod(dims, dtype=object))
    shape = " x ".join(map(str, dims))
    if count > MAX_ELEMENTS:
        raise stream.error(
            4, f"at most {MAX_ELEMENTS} elements", f"dimensions {shape} = {count} elements"
        )
    nbytes = count * dtype.itemsize
    if nbytes > stream.max_bytes:
        found = f"dimensions {shape} of {dtype.itemsize}-byte {dtype.name} = {nbytes} bytes"
        raise stream.error(4, f"at most {stream.max_bytes} bytes of element data", found)


def _read_payload(stream: _Stream, nbytes: int) -> bytearray:
    """Read ``nbytes`` in bounded chunks, stopping early if the data ends."""
    start = stream.offset
    buf = bytearray()
    while len(buf) < nbytes:
        chunk = stream.read(min(CHUNK_BYTES, nbytes - len(buf)))
        if not chunk:
            expected = f"{nbytes} bytes of element data from offset {start}"
            raise stream.error(stream.offset, expected, f"end of file after {len(buf)}")
        buf += chunk
    return buf


def _check_end(stream: _Stream) -> None:
    """Raise if anything follows the element data."""
    end = stream.offset
    extra = stream.read(CHUNK_BYTES)
    if extra:
        more = "" if len(extra) < CHUNK_BYTES else " or more"
        raise stream.error(end, "end of file", f"{len(extra)}{more} trailing byte(s)")


def _read_stream(stream: _Stream) -> np.ndarray:
    dtype, dims = _read_header(stream)
    count = int(np.prod(dims, dtype=np.int64))
    buf = _read_payload(stream, count * dtype.itemsize)
    _check_end(stream)
    array = np.frombuffer(buf, dtype=dtype).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=False)


def read_idx(path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES) -> np.ndarray:
    """Read an IDX file, raw or gzip-compressed.

    Args:
        path: File to read.
        max_bytes: Largest element data (dimensions x item size, in bytes)
            the header may claim; larger claims are refused unread.

    Returns:
        The array, with the file's shape and dtype in native byte order.

    Raises:
        IDXError: The file is malformed (bad magic, type code, sizes, data
            length, or corrupt gzip) or claims more than ``max_bytes``.
        OSError: The file cannot be opened.
    """
    path = Path(path)
    with open(path, "rb") as raw:
        compressed = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        if not compressed:
            return _read_stream(_Stream(raw, path, False, max_bytes))
        with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            return _read_stream(_Stream(unzipped, path, True, max_bytes))


class MNIST(NamedTuple):
    """The four MNIST arrays: uint8 images [N, 28, 28] and uint8 labels [N]."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def default_roots() -> list[Path]:
    """Directories searched by :func:`load_mnist` when no root is given."""
    roots = []
    env = environment.path("MINITORCH_DATA")
    if env:
        roots += [env, env / "mnist"]
    roots.append(Path(__file__).resolve().parents[2] / "data" / "mnist")
    roots.append(Path.cwd() / "data" / "mnist")
    return roots


def _find_file(root: Path, stem: str) -> Path | None:
    """Return ``root/stem`` or ``root/stem.gz``, whichever exists first."""
    for name in (stem, stem + ".gz"):
        if (root / name).is_file():
            return root / name
    return None


def _find_root(roots: list[Path]) -> dict[str, Path]:
    """Return the four files from the first root that has all of them."""
    for root in roots:
        found = {key: _find_file(root, stem) for key, stem in MNIST_FILES.items()}
        if all(found.values()):
            return found  # type: ignore[return-value]
    tried = "\n  ".join(str(r) for r in roots)
    names = ", ".join(f"{s}[.gz]" for s in MNIST_FILES.values())
    raise FileNotFoundError(f"no directory holds all of {names}; tried:\n  {tried}")


def _check_pair(images: np.ndarray, labels: np.ndarray, files: tuple[Path, Path]) -> None:
    """Check that an image file and a label file belong together."""
    if images.dtype != np.uint8 or images.ndim != 3:
        raise ValueError(f"{files[0]}: expected uint8 images [N, H, W], found "
                         f"{images.dtype} with shape {images.shape}")
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise ValueError(f"{files[1]}: expected uint8 labels [N], found "
                         f"{labels.dtype} with shape {labels.shape}")
    if len(images) != len(labels):
        raise ValueError(f"{files[0]} holds {len(images)} images but {files[1]} holds "
                         f"{len(labels)} labels; expected equal counts")


def load_mnist(
    root: str | os.PathLike[str] | None = None, *, max_bytes: int = MAX_BYTES
) -> MNIST:
    """Load MNIST (or any dataset in the same layout, e.g. Fashion-MNIST).

    Args:
        root: Directory holding the four IDX files, each either ``.gz`` or
            uncompressed. When None, searches ``$MINITORCH_DATA`` (and its
            ``mnist`` subfolder), then ``<repo>/data/mnist``, then
            ``./data/mnist``.
        max_bytes: Passed to :func:`read_idx` for each file.

    Returns:
        An :class:`MNIST` tuple of numpy arrays.

    Raises:
        FileNotFoundError: No searched directory holds all four files.
        IDXError: A file is malformed.
        ValueError: Shapes, dtypes or counts do not match.
    """
    roots = default_roots() if root is None else [Path(root)]
    files = _find_root(roots)
    arrays = {key: read_idx(path, max_bytes=max_bytes) for key, path in files.items()}
    for split in ("train", "test"):
        pair = (files[f"{split}_images"], files[f"{split}_labels"])
        _check_pair(arrays[f"{split}_images"], arrays[f"{split}_labels"], pair)
    return MNIST(**arrays)

"""The IDX reader caps what it reads by bytes: gzip bombs and lying headers fail fast."""

from __future__ import annotations

import gzip
import re
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from minitorch_exp.nn import idx
from minitorch_exp.nn.idx import IDXError, load_mnist, read_idx

MB = 2**20


def header(code: int, *dims: int) -> bytes:
    return bytes([0, 0, code, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims)


def gzip_of_zeros(prefix: bytes, n_zeros: int) -> bytes:
    """gzip of ``prefix`` then ``n_zeros`` zero bytes, built without holding them all."""
    out = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip container
    parts = [out.compress(prefix)]
    zeros = bytes(4 * MB)
    for start in range(0, n_zeros, len(zeros)):
        parts.append(out.compress(zeros[: min(len(zeros), n_zeros - start)]))
    parts.append(out.flush())
    return b"".join(parts)


def read_measured(path: Path, **kwargs) -> tuple[str, float, int]:
    """read_idx(path) must raise IDXError; return message, seconds, peak traced bytes."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(IDXError) as info:
            read_idx(path, **kwargs)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert str(path) in message and "expected" in message and "found" in message
    return message, seconds, peak


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    """A ~200 KB gzip holding a header that claims 200 MB, then 200 MB of zeros."""
    n = 200 * MB
    path = tmp_path_factory.mktemp("bomb") / "bomb.idx.gz"
    path.write_bytes(gzip_of_zeros(header(0x08, n), n))
    assert path.stat().st_size < 1 * MB
    return path


def test_default_limit_is_a_module_constant() -> None:
    assert idx.MAX_BYTES == 2 * 2**30


def test_header_claim_over_the_byte_limit_is_refused_before_reading(bomb) -> None:
    message, seconds, peak = read_measured(bomb, max_bytes=4 * MB)
    assert "at most 4194304 bytes" in message, message
    assert "209715200 bytes" in message, message
    assert re.search(r"byte offset 4\b", message), message
    assert seconds < 1.0 and peak < 8 * MB, (seconds, peak)


def test_payload_beyond_the_claim_stops_at_the_claim(tmp_path) -> None:
    """The header claims 3 MB (under the cap) but 200 MB follow: stop right after 3 MB."""
    path = tmp_path / "longer.gz"
    path.write_bytes(gzip_of_zeros(header(0x08, 3 * MB), 200 * MB))
    message, seconds, peak = read_measured(path, max_bytes=4 * MB)
    assert "trailing byte" in message and f"offset {8 + 3 * MB}" in message, message
    assert seconds < 1.0 and peak < 16 * MB, (seconds, peak)


def test_float64_claim_is_measured_in_bytes(tmp_path) -> None:
    """2**29 float64 elements are 4 GiB: over the default 2 GiB, refused up front
    (today this allocates until MemoryError when the data is really there)."""
    path = tmp_path / "f64.gz"
    path.write_bytes(gzip.compress(header(0x0E, 2**14, 2**15) + bytes(64)))
    message, seconds, peak = read_measured(path)
    assert "at most 2147483648 bytes" in message, message
    assert "4294967296 bytes" in message and "8-byte" in message, message
    assert seconds < 1.0 and peak < 8 * MB


def test_limit_can_be_raised_and_lowered(tmp_path) -> None:
    array = np.arange(1000, dtype=">i4")
    path = tmp_path / "ints"
    path.write_bytes(header(0x0C, 1000) + array.tobytes())
    assert read_idx(path, max_bytes=4000).tolist() == array.tolist()
    with pytest.raises(IDXError, match="at most 3999 bytes"):
        read_idx(path, max_bytes=3999)


def test_truncated_gzip_names_the_offset(tmp_path) -> None:
    path = tmp_path / "short.gz"
    path.write_bytes(gzip.compress(header(0x08, 100) + bytes(60)))
    message, _, _ = read_measured(path)
    assert "decompressed byte offset 68" in message and "after 60" in message, message


def test_load_mnist_passes_the_limit_on(tmp_path) -> None:
    for stem in idx.MNIST_FILES.values():
        dims = (2, 28, 28) if "images" in stem else (2,)
        (tmp_path / stem).write_bytes(header(0x08, *dims) + bytes(int(np.prod(dims))))
    assert load_mnist(tmp_path).train_images.shape == (2, 28, 28)
    with pytest.raises(IDXError, match="at most 100 bytes"):
        load_mnist(tmp_path, max_bytes=100)

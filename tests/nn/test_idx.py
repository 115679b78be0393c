"""Tests for the IDX reader and the MNIST loader."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minitorch_exp.nn.idx import (
    MNIST_FILES,
    TYPE_CODES,
    IDXError,
    default_roots,
    load_mnist,
    read_idx,
)

REPO_MNIST = Path(__file__).resolve().parents[2] / "data" / "mnist"


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    """Encode ``array`` as an IDX file with the given type code."""
    header = bytes([0, 0, code, array.ndim])
    header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(TYPE_CODES[code]).tobytes()


def header(code: int, *dims: int) -> bytes:
    """An IDX header with arbitrary (possibly lying) dimensions."""
    return bytes([0, 0, code, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims)


def write(directory: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to ``directory/name`` and return the path."""
    path = directory / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------ good files


@st.composite
def idx_arrays(draw: st.DrawFn) -> tuple[int, np.ndarray]:
    """A type code and an array of the matching native dtype."""
    code = draw(st.sampled_from(sorted(TYPE_CODES)))
    dtype = TYPE_CODES[code].newbyteorder("=")
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5))
    return code, draw(hnp.arrays(dtype, shape))


@settings(max_examples=150, deadline=None)
@given(case=idx_arrays(), compress=st.booleans())
def test_round_trip_every_type_code(tmp_path_factory, case, compress) -> None:
    code, array = case
    data = idx_bytes(array, code)
    if compress:
        data = gzip.compress(data)
    path = write(tmp_path_factory.mktemp("idx"), "file.idx", data)
    got = read_idx(path)
    assert got.dtype == array.dtype and got.dtype.isnative
    assert got.shape == array.shape
    assert got.tobytes() == array.tobytes()  # bit-exact, NaN payloads included


def test_gzip_detected_by_magic_not_name(tmp_path) -> None:
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    raw = write(tmp_path, "looks.gz", idx_bytes(array, 0x0C))
    zipped = write(tmp_path, "looks-raw.idx", gzip.compress(idx_bytes(array, 0x0C)))
    np.testing.assert_array_equal(read_idx(raw), array)
    np.testing.assert_array_equal(read_idx(zipped), array)


def test_big_endian_values_are_decoded(tmp_path) -> None:
    data = header(0x0B, 2) + b"\x01\x02\xff\xfe"
    got = read_idx(write(tmp_path, "f.idx", data))
    assert got.tolist() == [0x0102, -2]


# ------------------------------------------------------------------ bad files


def assert_idx_error(path: Path, offset: int, *fragments: str) -> None:
    """read_idx(path) raises an IDXError naming the file, offset and fragments."""
    with pytest.raises(IDXError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message
    assert re.search(rf"byte offset {offset}\b", message), message
    assert "expected" in message and "found" in message
    for fragment in fragments:
        assert fragment in message, message


GOOD = idx_bytes(np.arange(24, dtype=np.uint8).reshape(2, 3, 4), 0x08)  # 16-byte header


MALFORMED = [
    ("empty", b"", 0, ["4 bytes of magic number", "after 0"]),
    ("short-magic", b"\x00\x00", 2, ["4 bytes of magic number", "after 2"]),
    ("wrong-magic", b"\x01\x00" + GOOD[2:], 0, ["00 00", "01 00"]),
    ("png", b"\x89PNG\r\n\x1a\n" + bytes(32), 0, ["00 00", "89 50"]),
    ("unknown-type", b"\x00\x00\x0a\x03" + GOOD[4:], 2, ["0x08", "0x0A"]),
    ("zero-dims", b"\x00\x00\x08\x00", 3, ["1..4", "found 0"]),
    ("five-dims", header(0x08, 1, 1, 1, 1, 1), 3, ["1..4", "found 5"]),
    ("short-dims", GOOD[:10], 10, ["12 bytes of 3 dimension sizes", "after 6"]),
    ("truncated", GOOD[:-5], 35, ["24 bytes of element data from offset 16", "after 19"]),
    ("no-payload", GOOD[:16], 16, ["24 bytes of element data", "after 0"]),
    ("trailing", GOOD + b"junk", 40, ["end of file", "4 trailing"]),
    ("huge-dim", header(0x08, 0, 2**32 - 1), 8, ["dimension 1 below", "4294967295"]),
]


@pytest.mark.parametrize(
    ("name", "data", "offset", "fragments"), MALFORMED, ids=[case[0] for case in MALFORMED]
)
def test_malformed_raw_files(tmp_path, name, data, offset, fragments) -> None:
    assert_idx_error(write(tmp_path, name, data), offset, *fragments)


def test_truncated_multibyte_payload(tmp_path) -> None:
    data = idx_bytes(np.ones((3, 5), np.float64), 0x0E)[:-3]
    path = write(tmp_path, "f64", data)
    assert_idx_error(path, 12 + 120 - 3, "120 bytes of element data from offset 12")


def test_gzip_of_malformed_content_reports_decompressed_offset(tmp_path) -> None:
    path = write(tmp_path, "trailing.gz", gzip.compress(GOOD + b"x"))
    assert_idx_error(path, 40, "decompressed byte offset", "1 trailing")


@pytest.mark.parametrize(
    ("name", "mangle"),
    [
        ("cut", lambda z: z[: len(z) // 2]),
        ("cut-footer", lambda z: z[:-4]),
        ("bad-crc", lambda z: z[:-8] + bytes([z[-8] ^ 0xFF]) + z[-7:]),
        ("garbage-after", lambda z: z + b"not gzip"),
        ("bad-deflate", lambda z: z[:10] + b"\xff" * 8 + z[18:]),
    ],
)
def test_corrupt_gzip(tmp_path, name, mangle) -> None:
    payload = idx_bytes(np.arange(5000, dtype=np.int16) % 97, 0x0B)
    path = write(tmp_path, name, mangle(gzip.compress(payload)))
    with pytest.raises(IDXError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message and "decompressed byte offset" in message
    assert "expected" in message and "found" in message


# ------------------------------------------------------------------ lying headers


def measure(path: Path) -> tuple[str, float, int]:
    """Read ``path`` expecting IDXError; return message, seconds, peak bytes."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(IDXError) as info:
            read_idx(path)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return str(info.value), seconds, peak


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(
    ("name", "data", "fragment"),
    [
        ("over-cap", header(0x08, 2**30, 2**30) + bytes(100), "at most 2147483648 elements"),
        ("over-cap-4d", header(0x0E, 2**16, 2**16, 2**16, 2**16), "at most 2147483648"),
        ("under-cap-u8", header(0x08, 2**31 - 1) + bytes(100), "2147483647 bytes"),
        ("under-cap-f64", header(0x0E, 2**15, 2**16) + bytes(800), "17179869184 bytes"),
    ],
)
def test_lying_header_is_cheap(tmp_path, compress, name, data, fragment) -> None:
    path = write(tmp_path, name, gzip.compress(data) if compress else data)
    message, seconds, peak = measure(path)
    assert fragment in message
    assert seconds < 2.0
    assert peak < 16 * 2**20, f"peak {peak} bytes for a {len(data)}-byte file"


# ------------------------------------------------------------------ MNIST


@pytest.fixture(scope="module")
def mnist():
    return load_mnist(REPO_MNIST)


def test_mnist_shapes_and_dtypes(mnist) -> None:
    assert mnist.train_images.shape == (60000, 28, 28)
    assert mnist.train_labels.shape == (60000,)
    assert mnist.test_images.shape == (10000, 28, 28)
    assert mnist.test_labels.shape == (10000,)
    assert all(a.dtype == np.uint8 for a in mnist)


def test_mnist_statistics(mnist) -> None:
    assert mnist.train_labels.max() == 9 and mnist.test_labels.max() == 9
    train_counts = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    test_counts = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert np.bincount(mnist.train_labels).tolist() == train_counts
    assert np.bincount(mnist.test_labels).tolist() == test_counts
    assert int(mnist.train_images.sum(dtype=np.int64)) == 1567298545
    assert int(mnist.test_images.sum(dtype=np.int64)) == 264923200


def test_default_search_finds_repo_data(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("MINITORCH_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_mnist().test_labels[:5].tolist() == [7, 2, 1, 0, 4]


def fake_mnist(root: Path, n_train: int, n_labels: int, compress: bool) -> None:
    """Write a tiny MNIST-layout dataset, optionally with mismatched counts."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, n_labels, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, 2, dtype=np.uint8),
    }
    for key, array in arrays.items():
        data = idx_bytes(array, 0x08)
        name = MNIST_FILES[key] + (".gz" if compress else "")
        write(root, name, gzip.compress(data) if compress else data)


@pytest.mark.parametrize("compress", [False, True])
def test_env_var_root_with_either_file_names(monkeypatch, tmp_path, compress) -> None:
    fake_mnist(tmp_path / "fashion", 3, 3, compress)
    monkeypatch.setenv("MINITORCH_DATA", str(tmp_path / "fashion"))
    data = load_mnist()
    assert data.train_images.shape == (3, 28, 28) and data.test_labels.shape == (2,)


def test_env_var_may_point_at_parent_folder(monkeypatch, tmp_path) -> None:
    fake_mnist(tmp_path / "mnist", 4, 4, compress=True)
    monkeypatch.setenv("MINITORCH_DATA", str(tmp_path))
    assert len(load_mnist().train_labels) == 4


def test_count_mismatch(tmp_path) -> None:
    fake_mnist(tmp_path, 3, 2, compress=False)
    with pytest.raises(ValueError, match=r"3 images .* 2 labels"):
        load_mnist(tmp_path)


def test_missing_files_lists_every_path_tried(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MINITORCH_DATA", str(tmp_path / "env"))
    monkeypatch.chdir(tmp_path)
    roots = default_roots()
    assert roots[0] == tmp_path / "env" and roots[-1] == tmp_path / "data" / "mnist"
    monkeypatch.setattr("minitorch_exp.nn.idx.default_roots", lambda: roots[:2] + roots[3:])
    with pytest.raises(FileNotFoundError) as info:
        load_mnist()
    for root in roots[:2] + roots[3:]:
        assert str(root) in str(info.value)


def test_explicit_root_only(tmp_path) -> None:
    shutil.copy(REPO_MNIST / "t10k-labels-idx1-ubyte.gz", tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path))):
        load_mnist(tmp_path)
    assert os.listdir(tmp_path) == ["t10k-labels-idx1-ubyte.gz"]

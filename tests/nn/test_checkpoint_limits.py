"""Hostile checkpoints fail with CheckpointError; saves clean up after killed saves
and honour the umask."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.nn import checkpoint
from minitorch_exp.nn.checkpoint import CheckpointError, load, save

from .test_checkpoint import assert_same, meta_for, write_npz

ROOT = Path(__file__).resolve().parents[2]


def npy_bytes(shape, descr: str = "<f8", data: bytes = b"") -> bytes:
    """An .npy file whose header claims ``shape`` and ``descr``, followed by ``data``."""
    out = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + data


def zip_members(path: Path, **members: bytes) -> Path:
    """A stored zip with the given raw members (valid CRCs, any content)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def meta_npy(root) -> bytes:
    meta = np.frombuffer(json.dumps(meta_for(root)).encode(), np.uint8)
    out = io.BytesIO()
    np.save(out, meta)
    return out.getvalue()


ARRAY_ROOT = {"t": "array", "key": "a0"}


def assert_refused(path: Path, *fragments: str) -> str:
    with pytest.raises(CheckpointError) as info:
        load(path)
    message = str(info.value)
    assert str(path) in message and "expected" in message and "found" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ------------------------------------------------------------------ members


@pytest.mark.parametrize("name", ["a0.npy", "a0"])
def test_member_without_npy_magic(tmp_path, name) -> None:
    path = zip_members(tmp_path / "f.npz", **{"__meta__.npy": meta_npy(ARRAY_ROOT),
                                              name: b"hello, not an array"})
    assert_refused(path, "'a0'", "NUMPY", "hello")


def test_meta_without_npy_magic(tmp_path) -> None:
    path = zip_members(tmp_path / "f.npz", **{"__meta__.npy": b'{"format": 1}'})
    assert_refused(path, "'__meta__'", "NUMPY")


@pytest.mark.parametrize("shape", [(2**40,), (2**20, 2**20), (1, 2**62)])
def test_header_claiming_huge_shape(tmp_path, shape) -> None:
    member = npy_bytes(shape, "<f8", bytes(8))
    path = zip_members(tmp_path / "f.npz", **{"__meta__.npy": meta_npy(ARRAY_ROOT),
                                              "a0.npy": member})
    message = assert_refused(path, "'a0'", "8 bytes")
    assert str(int(np.prod(shape, dtype=object)) * 8) in message


def test_header_claiming_fewer_bytes_than_present(tmp_path) -> None:
    member = npy_bytes((2,), "<f4", bytes(12))
    path = zip_members(tmp_path / "f.npz", **{"__meta__.npy": meta_npy(ARRAY_ROOT),
                                              "a0.npy": member})
    assert_refused(path, "'a0'", "12 bytes", "= 8 bytes")


def test_member_size_beyond_the_archive(tmp_path) -> None:
    """A central directory that claims a 2**40-byte member in a tiny file."""
    path = tmp_path / "f.npz"
    save({"w": np.ones(3)}, path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("a0.npy")
    central = [i for i in range(len(data)) if data.startswith(b"PK\x01\x02", i)]
    entry = next(i for i in central if data[i + 46:i + 46 + 6] == b"a0.npy")
    for field in (20, 24):  # compressed and uncompressed sizes
        data[entry + field:entry + field + 4] = (2**32 - 2).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert info.file_size < 1000
    assert_refused(path, "'a0'", str(2**32 - 2))


@pytest.mark.parametrize(
    ("array", "dtype"),
    [
        (np.array(["nan", "1.5"]), "<U3"),
        (np.array([b"nan"]), "|S3"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "<M8[D]"),
        (np.zeros(2, dtype=[("a", "<f4")]), "[('a', '<f4')]"),
    ],
)
def test_non_numeric_arrays_are_refused(tmp_path, array, dtype) -> None:
    path = write_npz(tmp_path / "f.npz", meta_for(ARRAY_ROOT), a0=array)
    assert_refused(path, "'a0'", "numeric", dtype)
    with pytest.raises(CheckpointError, match="numeric"):
        mt.load(path)
    with pytest.raises(TypeError, match="numeric"):
        save({"w": array}, tmp_path / "g.npz")
    assert not (tmp_path / "g.npz").exists()


def test_object_dtype_header_is_refused_before_reading(tmp_path) -> None:
    member = npy_bytes((1,), "|O", b"\x80\x04N.")  # a pickle of None
    path = zip_members(tmp_path / "f.npz", **{"__meta__.npy": meta_npy(ARRAY_ROOT),
                                              "a0.npy": member})
    assert_refused(path, "'a0'", "numeric", "object")


def test_numeric_dtypes_still_round_trip(tmp_path) -> None:
    obj = {"c": np.array([1 + 2j], np.complex64), "h": np.ones(2, np.float16),
           "be": np.arange(3, dtype=">i4"), "f": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
           "s": np.str_("text"), "e": np.zeros((0, 3), np.uint16)}
    save(obj, tmp_path / "f.npz")
    got = load(tmp_path / "f.npz")
    assert got["s"] == "text" and type(got["s"]) is str
    for key in ("c", "h", "be", "f", "e"):
        assert_same(got[key], obj[key])
    assert got["f"].flags.writeable


# ------------------------------------------------------------------ nesting


def nested(depth: int) -> list:
    obj: list = []
    for _ in range(depth):
        obj = [obj]
    return obj


@pytest.mark.parametrize("depth", [checkpoint.MAX_DEPTH + 1, 5000])
def test_save_refuses_deep_nesting(tmp_path, depth) -> None:
    with pytest.raises(ValueError, match=f"at most {checkpoint.MAX_DEPTH} levels"):
        save({"x": nested(depth)}, tmp_path / "f.npz")
    with pytest.raises(ValueError, match=f"at most {checkpoint.MAX_DEPTH} levels"):
        mt.save({"x": nested(depth)}, tmp_path / "f.npz")
    assert os.listdir(tmp_path) == []


def test_deepest_allowed_nesting_round_trips(tmp_path) -> None:
    obj = nested(checkpoint.MAX_DEPTH)
    save(obj, tmp_path / "f.npz")
    assert load(tmp_path / "f.npz") == obj


@pytest.mark.parametrize("depth", [checkpoint.MAX_DEPTH + 1, 5000])
def test_load_refuses_deep_nesting(tmp_path, depth) -> None:
    node = '{"t": "list", "items": [' * depth + '{"t": "none"}' + "]}" * depth
    text = json.dumps(meta_for(None)).replace("null", node)  # json.dumps would recurse
    path = write_npz(tmp_path / "f.npz", text)
    assert_refused(path, f"at most {checkpoint.MAX_DEPTH} levels")


def test_load_refuses_deep_json_that_is_not_a_node(tmp_path) -> None:
    path = write_npz(tmp_path / "f.npz", "[" * 5000 + "]" * 5000)
    assert_refused(path, "nesting", "5000")


# ------------------------------------------------------------------ fuzzing


GOOD_STATE = {"w": np.arange(6.0).reshape(2, 3), "b": np.ones(2, np.float32),
              "step": 3, "nested": [1, (2.5, None, "s")]}


@pytest.fixture(scope="module")
def good_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("good") / "f.npz"
    save(GOOD_STATE, path)
    return path.read_bytes()


def load_or_refuse(path: Path) -> None:
    """Either the exact original comes back or CheckpointError: nothing else."""
    try:
        got = load(path)
    except CheckpointError:
        return
    assert_same(got, GOOD_STATE)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                      min_size=1, max_size=3),
       cut=st.none() | st.floats(0, 1))
def test_fuzzed_bytes_load_exactly_or_raise_checkpoint_error(tmp_path_factory, good_bytes,
                                                             flips, cut) -> None:
    data = bytearray(good_bytes)
    for where, xor in flips:
        data[int(where * len(data))] ^= xor
    if cut is not None:
        data = data[: int(cut * len(data))]
    path = tmp_path_factory.mktemp("fuzz") / "f.npz"
    path.write_bytes(bytes(data))
    load_or_refuse(path)


def test_every_flag_bit_of_every_zip_header(tmp_path, good_bytes) -> None:
    """Flip each bit of the general-purpose flags and compression method fields of
    every local and central header (encryption, patched data, strong encryption...)."""
    data = bytes(good_bytes)
    starts = [(i, 6) for i in range(len(data)) if data.startswith(b"PK\x03\x04", i)]
    starts += [(i, 8) for i in range(len(data)) if data.startswith(b"PK\x01\x02", i)]
    path = tmp_path / "f.npz"
    for start, flags in starts:
        for offset in range(flags, flags + 4):  # 2 bytes of flags, 2 of method
            for bit in range(8):
                mangled = bytearray(data)
                mangled[start + offset] ^= 1 << bit
                path.write_bytes(bytes(mangled))
                load_or_refuse(path)


# ------------------------------------------------------------------ temp files


def kill_mid_save(directory: Path) -> None:
    """Run a save in a child process that SIGKILLs itself halfway through writing."""
    script = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from minitorch_exp.nn import checkpoint
        def half(f, **arrays):
            f.write(b"PK" + bytes(100_000))
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        checkpoint.np.savez = half
        checkpoint.save({{"w": np.ones(3)}}, {str(directory / "model.npz")!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60)
    assert proc.returncode == -signal.SIGKILL


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.skipif(os.name != "posix", reason="pid liveness is probed with kill(pid, 0)")
def test_temp_files_of_killed_saves_are_removed(tmp_path) -> None:
    for _ in range(3):  # each save clears the orphan of the one killed before it
        kill_mid_save(tmp_path)
        orphans = [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
        assert len(orphans) == 1, os.listdir(tmp_path)
    save({"w": np.zeros(2)}, tmp_path / "other.npz")  # any save into the folder cleans
    assert os.listdir(tmp_path) == ["other.npz"]


@pytest.mark.skipif(os.name != "posix", reason="pid liveness is probed with kill(pid, 0)")
def test_only_stale_temp_files_of_our_pattern_are_removed(tmp_path) -> None:
    keep = [
        f".model.npz.{os.getpid()}.0123abcd.tmp",  # this process: maybe another thread
        f".model.npz.{os.getppid()}.0123abcd.tmp",  # a live process
        f".model.npz.{dead_pid()}.tmp",  # not our pattern
        "model.npz.tmp",
        "notes.txt",
    ]
    stale = f".model.npz.{dead_pid()}.89abcdef.tmp"
    for name in [*keep, stale]:
        (tmp_path / name).write_bytes(b"x")
    save({"w": np.zeros(2)}, tmp_path / "model.npz")
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, "model.npz"])


# ------------------------------------------------------------------ permissions


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it afterwards."""
    previous = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(previous)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_new_files_honour_the_umask(tmp_path, umask, mask) -> None:
    umask(mask)
    save({"w": np.ones(2)}, tmp_path / "f.npz")
    assert stat.S_IMODE((tmp_path / "f.npz").stat().st_mode) == 0o666 & ~mask


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_existing_file_keeps_its_mode(tmp_path, umask) -> None:
    umask(0o022)
    path = tmp_path / "f.npz"
    save({"w": np.ones(2)}, path)
    path.chmod(0o600)
    save({"w": np.zeros(2)}, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

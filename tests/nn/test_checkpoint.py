"""Tests for checkpoint save/load."""

from __future__ import annotations

import json
import math
import os
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minitorch_exp.nn import checkpoint
from minitorch_exp.nn.checkpoint import CheckpointError, load, save

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_, np.uint8]

arrays = st.sampled_from(DTYPES).flatmap(
    lambda dtype: hnp.arrays(
        dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
keys = st.text(max_size=6) | st.integers(-(2**40), 2**40)
structures = st.recursive(
    scalars | arrays,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=12,
)


def assert_same(got: Any, want: Any) -> None:
    """Exact equality: same types, dtypes, shapes and bits."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    elif isinstance(want, float):
        assert struct.pack("<d", got) == struct.pack("<d", want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        assert [type(k) for k in got] == [type(k) for k in want]
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
    else:
        assert got == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=structures)
def test_round_trip(tmp_path_factory, obj) -> None:
    path = tmp_path_factory.mktemp("ckpt") / "model.npz"
    save(obj, path)
    assert_same(load(path), obj)


def test_round_trip_special_floats_and_keys(tmp_path) -> None:
    nan_bits = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_BEEF))[0]
    obj = {1: -0.0, "1": math.inf, -5: [nan_bits, -math.inf, 1e-310], "t": (1, (2,), [])}
    save(obj, tmp_path / "f.npz")
    assert_same(load(tmp_path / "f.npz"), obj)


def test_numpy_scalars_keep_dtype(tmp_path) -> None:
    save([np.float32(1.5), np.int64(-3), np.bool_(True)], tmp_path / "f.npz")
    got = load(tmp_path / "f.npz")
    assert [a.dtype for a in got] == [np.float32, np.int64, np.bool_]
    assert all(a.shape == () for a in got)


class Box:
    """A non-numpy array-like, as a framework tensor would be."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.array


def test_array_likes_and_wrap(tmp_path) -> None:
    state = {"w": Box(np.eye(2, dtype=np.float32)), "b": np.zeros(2), "step": 7}
    save(state, tmp_path / "f.npz")
    got = load(tmp_path / "f.npz", wrap=Box)
    assert isinstance(got["w"], Box) and isinstance(got["b"], Box)
    np.testing.assert_array_equal(got["w"].array, np.eye(2))
    assert got["w"].array.dtype == np.float32 and got["step"] == 7


def test_file_layout(tmp_path) -> None:
    save({"a": np.ones(3), "b": [np.zeros(1)]}, tmp_path / "f.npz")
    with zipfile.ZipFile(tmp_path / "f.npz") as archive:
        names = sorted(archive.namelist())
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
    assert names == ["__meta__.npy", "a0.npy", "a1.npy"]
    with np.load(tmp_path / "f.npz", allow_pickle=False) as npz:
        meta = json.loads(npz["__meta__"].tobytes())
    assert meta["version"] == checkpoint.VERSION and meta["format"] == checkpoint.FORMAT


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        ({1.5: 1}, "dict keys of type str or int, found float"),
        ({True: 1}, "found bool"),
        ([{1, 2}], r"obj\[0\]: expected .* found set"),
        ({"x": object()}, r"obj\['x'\]"),
        (np.array([1, "a"], dtype=object), "non-object"),
    ],
)
def test_save_refuses_unsupported(tmp_path, obj, match) -> None:
    with pytest.raises(TypeError, match=match):
        save(obj, tmp_path / "f.npz")
    assert os.listdir(tmp_path) == []


def test_save_refuses_cycles(tmp_path) -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="cycle"):
        save({"a": loop}, tmp_path / "f.npz")


def test_shared_subtree_is_not_a_cycle(tmp_path) -> None:
    shared = [1, 2]
    save({"a": shared, "b": shared}, tmp_path / "f.npz")
    assert load(tmp_path / "f.npz") == {"a": [1, 2], "b": [1, 2]}


def write_npz(path: Path, meta: Any, **arrays: np.ndarray) -> Path:
    """Write an npz with hand-made metadata (a dict becomes JSON)."""
    if not isinstance(meta, np.ndarray):
        text = meta if isinstance(meta, str) else json.dumps(meta)
        meta = np.frombuffer(text.encode(), dtype=np.uint8)
    np.savez(path, __meta__=meta, **arrays)
    return path


def meta_for(root: Any, version: Any = 1) -> dict:
    return {"format": checkpoint.FORMAT, "version": version, "root": root}


def test_object_array_is_refused_without_unpickling(tmp_path, monkeypatch) -> None:
    path = write_npz(tmp_path / "evil.npz", meta_for({"t": "array", "key": "a0"}),
                     a0=np.array([{"x": 1}, None], dtype=object))

    def no_pickle(*args, **kwargs):
        raise AssertionError("load() tried to unpickle")

    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    with pytest.raises(CheckpointError, match="without pickle") as info:
        load(path)
    assert str(path) in str(info.value)


def test_load_passes_allow_pickle_false(tmp_path, monkeypatch) -> None:
    save({"a": np.ones(2)}, tmp_path / "f.npz")
    seen = []
    real = np.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("allow_pickle"))
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "load", spy)
    load(tmp_path / "f.npz")
    assert seen == [False]


def test_pickle_file_is_refused(tmp_path) -> None:
    path = tmp_path / "f.npz"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(CheckpointError, match="expected an .npz archive"):
        load(path)


@pytest.mark.parametrize(
    ("meta", "arrays", "match"),
    [
        (None, {"a0": np.ones(1)}, "expected a '__meta__' entry"),
        ("{not json", {}, "UTF-8 JSON"),
        (np.zeros(3, np.float32), {}, "1-d uint8"),
        (b"\xff\xfe", {}, "UTF-8 JSON"),
        ({"format": "other", "version": 1, "root": None}, {}, "expected format"),
        (meta_for({"t": "none"}, version=99), {}, "expected version 1, found 99"),
        (meta_for({"t": "array", "key": "a7"}), {"a0": np.ones(1)}, "refers to array 'a7'"),
        (meta_for({"t": "array", "key": "__meta__"}), {}, "an array key"),
        (meta_for({"t": "frob"}), {}, "a known node type, found 'frob'"),
        (meta_for({"t": "int", "v": "3"}), {}, "a value of type int"),
        (meta_for({"t": "float", "bits": "xyz"}), {}, "16 hex digits"),
        (meta_for({"t": "list", "items": 3}), {}, "an items list"),
        (meta_for({"t": "dict", "items": [[["q", 1], {"t": "none"}]]}), {}, r"a key \["),
        (meta_for([]), {}, 'an object with a "t" field'),
    ],
)
def test_corrupt_metadata(tmp_path, meta, arrays, match) -> None:
    path = tmp_path / "f.npz"
    if meta is None:
        np.savez(path, **arrays)
    elif isinstance(meta, bytes):
        write_npz(path, np.frombuffer(meta, dtype=np.uint8), **arrays)
    else:
        write_npz(path, meta, **arrays)
    with pytest.raises(CheckpointError, match=match) as info:
        load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("content", [b"", b"hello world", b"PK\x03\x04truncated"])
def test_not_an_npz(tmp_path, content) -> None:
    path = tmp_path / "f.npz"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=str(path)):
        load(path)


def test_single_npy_is_refused(tmp_path) -> None:
    np.save(tmp_path / "f.npy", np.ones(3))
    with pytest.raises(CheckpointError, match="single .npy"):
        load(tmp_path / "f.npy")


def test_missing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope.npz")


# ------------------------------------------------------------------ atomicity


def old_checkpoint(directory: Path) -> tuple[Path, bytes]:
    path = directory / "model.npz"
    save({"version": "old", "w": np.arange(4.0)}, path)
    return path, path.read_bytes()


def test_failure_inside_savez_keeps_previous_file(tmp_path, monkeypatch) -> None:
    path, before = old_checkpoint(tmp_path)

    def half_write(file, *args, **kwargs):
        file.write(b"PK\x03\x04 partial garbage")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", half_write)
    with pytest.raises(OSError, match="disk full"):
        save({"version": "new"}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.npz"]
    monkeypatch.undo()
    assert load(path)["version"] == "old"


def test_failure_in_replace_keeps_previous_file(tmp_path, monkeypatch) -> None:
    path, before = old_checkpoint(tmp_path)

    def broken_replace(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="rename failed"):
        save({"version": "new"}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.npz"]


def test_keyboard_interrupt_cleans_up(tmp_path, monkeypatch) -> None:
    path, before = old_checkpoint(tmp_path)

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save({"version": "new"}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.npz"]


def test_data_is_fsynced_before_rename(tmp_path, monkeypatch) -> None:
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(os, "replace",
                        lambda a, b: (events.append("replace"), real_replace(a, b)))
    save([1], tmp_path / "f.npz")
    assert events[:2] == ["fsync", "replace"]


def test_overwrite_replaces_content(tmp_path) -> None:
    path, _ = old_checkpoint(tmp_path)
    save({"version": "new"}, path)
    assert load(path) == {"version": "new"}
    assert os.listdir(tmp_path) == ["model.npz"]


@pytest.mark.parametrize("name", ["ckpt", "model.ckpt", "weights.v2"])
def test_path_used_exactly_as_given(tmp_path, name) -> None:
    save({"a": np.ones(2)}, tmp_path / name)
    assert os.listdir(tmp_path) == [name]
    np.testing.assert_array_equal(load(str(tmp_path / name))["a"], np.ones(2))

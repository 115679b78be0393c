"""safetensors files: round trips, files of the safetensors package (NumPy and PyTorch
APIs) both ways, a PyTorch LeNet's weights giving PyTorch's predictions, and hostile
headers refused with SafetensorsError naming the file, the entry and the bytes."""

from __future__ import annotations

import json
import os
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.safetensors import MAX_HEADER_BYTES, SafetensorsError, load_file, save_file

from .._scripts import load_script

ROOT = Path(__file__).resolve().parents[2]

ARRAYS = {
    "w": np.arange(12, dtype=np.float32).reshape(3, 4),
    "d": np.array([-0.0, np.nan, np.inf, 5e-324]),
    "i": np.array([[-(2**63), 2**63 - 1]], dtype=np.int64),
    "j": np.arange(5, dtype=np.int32)[::-2],  # a strided view
    "b": np.array([True, False, True]),
    "s": np.array(2.5, dtype=np.float32),  # 0-d
    "e": np.zeros((0, 3), np.float32),
}
#: What the safetensors package is given: it writes a strided view's raw buffer.
CONTIGUOUS = {k: np.array(v, order="C") for k, v in ARRAYS.items()}


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        g = np.asarray(got[k])
        assert g.dtype == v.dtype and g.shape == v.shape, k
        np.testing.assert_array_equal(g, v)


def raw_file(path: Path, header, data: bytes = b"", length: int | None = None) -> Path:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(text) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + text + data)
    return path


def refused(path: Path, *fragments: str) -> str:
    with pytest.raises(SafetensorsError) as info:
        mt.load_safetensors(path)
    message = str(info.value)
    assert str(path) in message and "expected" in message and "found" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ------------------------------------------------------------------ round trips


def test_round_trip_keeps_dtypes_shapes_values_and_metadata(tmp_path) -> None:
    path = tmp_path / "a.safetensors"
    save_file(ARRAYS, path, metadata={"format": "np", "note": "é"})
    assert_same(load_file(path), ARRAYS)
    assert mt.serialization.safetensors_metadata(path) == {"format": "np", "note": "é"}
    assert (8 + struct.unpack("<Q", path.read_bytes()[:8])[0]) % 8 == 0  # data aligned


def test_nodes_and_modules_round_trip_into_load_state_dict(tmp_path) -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    path = tmp_path / "m.safetensors"
    mt.save_safetensors(model, path)
    loaded = mt.load_safetensors(path)
    assert all(isinstance(v, mt.Tensor) for v in loaded.values())
    assert set(loaded) == set(model.state_dict())
    twin = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    assert twin.load_state_dict(loaded) == ([], [])
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(twin.state_dict()[k].numpy(), v.numpy())
    loaded["0.weight"] += 1  # loaded tensors are writable and our own


def test_save_refuses_unsupported_dtypes_and_names(tmp_path) -> None:
    with pytest.raises(TypeError, match="'h'.*uint16"):
        save_file({"h": np.zeros(2, np.uint16)}, tmp_path / "x")
    with pytest.raises(TypeError, match="__metadata__"):
        save_file({"__metadata__": np.zeros(2)}, tmp_path / "x")
    with pytest.raises(TypeError, match="metadata"):
        save_file({"a": np.zeros(2)}, tmp_path / "x", metadata={"a": 1})
    assert not list(tmp_path.iterdir())


def test_a_failed_save_leaves_the_old_file(tmp_path) -> None:
    path = tmp_path / "a.safetensors"
    save_file({"a": np.ones(2)}, path)

    class Boom:
        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        save_file({"a": np.zeros(2), "b": Boom()}, path)
    np.testing.assert_array_equal(load_file(path)["a"], np.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["a.safetensors"]


# ------------------------------------------------------------------ the package


def test_files_of_the_numpy_api_load(tmp_path) -> None:
    st_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "np.safetensors"
    st_numpy.save_file(CONTIGUOUS, str(path), metadata={"k": "v"})
    assert_same(load_file(path), ARRAYS)
    assert mt.serialization.safetensors_metadata(path) == {"k": "v"}


def test_our_files_load_in_the_numpy_api(tmp_path) -> None:
    st_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "ours.safetensors"
    save_file(ARRAYS, path, metadata={"k": "v"})
    assert_same(st_numpy.load_file(str(path)), ARRAYS)


def test_files_of_the_torch_api_load_and_ours_load_there(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    theirs = {k: torch.from_numpy(v) for k, v in CONTIGUOUS.items()}
    path = tmp_path / "torch.safetensors"
    st_torch.save_file(theirs, str(path))
    assert_same({k: v.numpy() for k, v in mt.load_safetensors(path).items()}, ARRAYS)
    ours = tmp_path / "ours.safetensors"
    mt.save_safetensors({k: mt.tensor(v) for k, v in ARRAYS.items()}, ours)
    assert_same({k: v.numpy() for k, v in st_torch.load_file(str(ours)).items()}, ARRAYS)


def test_bf16_from_torch_is_refused_naming_the_dtype(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    path = tmp_path / "bf16.safetensors"
    st_torch.save_file({"w": torch.ones(2, dtype=torch.bfloat16)}, str(path))
    refused(path, "'w'", "BF16", "F32")


@pytest.fixture(scope="module")
def lenet_example():
    pytest.importorskip("tqdm")
    return load_script("examples/mnist_cnn.py", "mnist_cnn_st")


def torch_lenet(torch):
    """The example's LeNet written in PyTorch: the same attribute names, so the same keys."""
    tnn, tF = torch.nn, torch.nn.functional

    class LeNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = tnn.Conv2d(1, 20, 5)
            self.conv2 = tnn.Conv2d(20, 50, 5)
            self.fc1 = tnn.Linear(800, 500)
            self.dropout = tnn.Dropout(0.5)
            self.fc2 = tnn.Linear(500, 10)

        def forward(self, x):
            x = tF.max_pool2d(tF.relu(self.conv1(x)), 2)
            x = tF.max_pool2d(tF.relu(self.conv2(x)), 2)
            x = tF.relu(self.fc1(torch.flatten(x, 1)))
            return self.fc2(self.dropout(x))

    return LeNet()


def test_a_pytorch_lenet_gives_pytorch_predictions_both_ways(tmp_path, lenet_example) -> None:
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    theirs = torch_lenet(torch).eval()
    x = np.random.default_rng(0).standard_normal((16, 1, 28, 28)).astype(np.float32)
    path = tmp_path / "lenet.safetensors"
    st_torch.save_file(theirs.state_dict(), str(path))
    ours = lenet_example.LeNet().eval()
    assert ours.load_state_dict(mt.load_safetensors(path)) == ([], [])
    with torch.no_grad():
        want = theirs(torch.from_numpy(x)).numpy()
    got = ours(mt.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert (got.argmax(1) == want.argmax(1)).all()

    # and back: our weights, saved by us, read by PyTorch
    mt.manual_seed(1)
    ours = lenet_example.LeNet().eval()
    back = tmp_path / "ours.safetensors"
    mt.save_safetensors(ours, back)
    fresh = torch_lenet(torch).eval()
    fresh.load_state_dict(st_torch.load_file(str(back)))
    with torch.no_grad():
        np.testing.assert_allclose(ours(mt.from_numpy(x)).numpy(),
                                   fresh(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ hostile files


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def test_header_bombs(tmp_path) -> None:
    refused(raw_file(tmp_path / "a", {"w": entry()}, b"\0" * 8, length=2**63), "header length",
            str(2**63))
    refused(raw_file(tmp_path / "b", {"w": entry()}, b"\0" * 8, length=10**6),
            "within the file")
    big = tmp_path / "c"
    with open(big, "wb") as f:  # a sparse file larger than the cap
        f.write(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{")
        f.truncate(MAX_HEADER_BYTES + 64)
    refused(big, f"at most {MAX_HEADER_BYTES}")
    refused(raw_file(tmp_path / "d", b"", b""), "{")
    (tmp_path / "e").write_bytes(b"\x01\x02")
    refused(tmp_path / "e", "8-byte header length")


def test_truncated_files(tmp_path) -> None:
    path = tmp_path / "t.safetensors"
    save_file({"a": np.ones(4, np.float32), "b": np.ones(3)}, path)
    whole = path.read_bytes()
    start = 8 + struct.unpack("<Q", whole[:8])[0]
    path.write_bytes(whole[:-5])
    refused(path, "'a'", "[24, 40]", f"file bytes {start + 24}..{start + 40}")
    path.write_bytes(whole[:12])
    refused(path, "header length")


def test_overlapping_gapped_and_out_of_bounds_offsets(tmp_path) -> None:
    two = {"a": entry(offsets=(0, 8)), "b": entry(offsets=(4, 12))}
    refused(raw_file(tmp_path / "o", two, b"\0" * 12), "'b'", "[4, 12]", "overlaps", "'a'")
    gap = {"a": entry(offsets=(0, 8)), "b": entry(offsets=(12, 20))}
    refused(raw_file(tmp_path / "g", gap, b"\0" * 20), "'b'", "gap")
    refused(raw_file(tmp_path / "x", {"a": entry(offsets=(0, 8))}, b"\0" * 4), "'a'",
            "4 data bytes")
    refused(raw_file(tmp_path / "r", {"a": entry(offsets=(8, 0))}, b"\0" * 8), "'a'",
            "begin <= end")
    refused(raw_file(tmp_path / "n", {"a": entry(offsets=(-8, 0))}, b"\0" * 8), "'a'")
    refused(raw_file(tmp_path / "t", {"a": entry()}, b"\0" * 12), "4 bytes after the last")


def test_out_of_order_entries_are_read_by_offset(tmp_path) -> None:
    header = {"z": entry(offsets=(8, 16)), "a": entry(offsets=(0, 8))}
    data = np.arange(4, dtype="<f4").tobytes()
    got = mt.load_safetensors(raw_file(tmp_path / "f", header, data))
    assert list(got) == ["a", "z"]
    np.testing.assert_array_equal(got["z"].numpy(), [2, 3])


def test_shapes_dtypes_keys_and_json(tmp_path) -> None:
    refused(raw_file(tmp_path / "s", {"a": entry(shape=(3,))}, b"\0" * 8), "'a'",
            "12 bytes", "[0, 8]")
    refused(raw_file(tmp_path / "s2", {"a": entry(shape=(-2, -1))}, b"\0" * 8), "'a'",
            "non-negative")
    for dtype in ("BF16", "F8_E4M3", "U8", "C64", 7):
        message = refused(raw_file(tmp_path / "d", {"a": entry(dtype=dtype)}, b"\0" * 8),
                          "'a'", repr(dtype))
        assert "F64, F32, I64, I32, BOOL" in message
    refused(raw_file(tmp_path / "k", b'{"a":' + json.dumps(entry()).encode() + b',"a":'
                     + json.dumps(entry()).encode() + b"}", b"\0" * 8), "'a' twice")
    refused(raw_file(tmp_path / "j", b"{not json", b""), "JSON")
    refused(raw_file(tmp_path / "u", b'{"\xff":1}', b""), "UTF-8")
    refused(raw_file(tmp_path / "l", b"[1]", b""), "{")
    refused(raw_file(tmp_path / "deep", b"{" + b'"a":[' * 100_000, b""), "JSON")
    refused(raw_file(tmp_path / "f", {"a": {**entry(), "extra": 1}}, b"\0" * 8), "'a'",
            "extra")
    refused(raw_file(tmp_path / "m", {"__metadata__": {"a": 1}}), "__metadata__")


@st.composite
def crafted_files(draw) -> bytes:
    """Headers a hostile writer could make: real ones with fields, offsets, lengths,
    and bytes changed, or arbitrary JSON values."""
    n = draw(st.integers(0, 3))
    header: dict = {}
    at = 0
    for i in range(n):
        dtype = draw(st.sampled_from(["F32", "F64", "I64", "BOOL", "F16", "BF16", "X"]))
        shape = draw(st.lists(st.integers(-2, 2**40) | st.integers(0, 4), max_size=3))
        size = draw(st.integers(0, 64))
        begin = at + draw(st.sampled_from([0, 0, 0, -4, 4, 2**62]))
        header[f"t{i}"] = entry(dtype, shape, (begin, begin + size))
        at = begin + size
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=3),
                                                      st.text(max_size=3) | st.integers()))
    junk = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                        lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(st.text(max_size=3), c, max_size=3), max_leaves=8)
    if draw(st.booleans()):
        header[draw(st.sampled_from(["t0", "x"]))] = draw(junk)
    text = json.dumps(header).encode()
    if draw(st.booleans()) and text:
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + draw(st.binary(min_size=1, max_size=2)) + text[i + 1:]
    length = len(text) + draw(st.sampled_from([0, 0, 0, -1, 1, 2**40]))
    data = draw(st.binary(max_size=96))
    return struct.pack("<Q", max(length, 0)) + text + data


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(crafted_files())
def test_crafted_headers_fail_only_with_safetensors_error(tmp_path_factory, blob) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "f.safetensors"
    path.write_bytes(blob)
    tracemalloc.start()
    try:
        load_file(path)
    except SafetensorsError as exc:
        assert str(path) in str(exc)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 4 * os.path.getsize(path) + 64 * 1024  # never the header's claims


def _sequence_pair(torch, kind: str):
    """The same sequence model in PyTorch and here: (theirs, ours, input shape)."""
    if kind == "lstm":
        return (torch.nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True),
                nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True), (3, 5, 6))
    if kind == "gru":
        return (torch.nn.GRU(6, 8, batch_first=True), nn.GRU(6, 8, batch_first=True),
                (3, 5, 6))
    settings = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    return (torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**settings), 2,
                                        enable_nested_tensor=False),
            nn.TransformerEncoder(nn.TransformerEncoderLayer(**settings), 2), (3, 5, 8))


@pytest.mark.parametrize("kind", ["lstm", "gru", "transformer"])
def test_pytorch_sequence_models_load_through_safetensors(tmp_path, kind) -> None:
    """A PyTorch LSTM, GRU and Transformer encoder saved with safetensors.torch load here
    one to one (PyTorch's key names and layouts) and give PyTorch's outputs; ours,
    saved here, load there and give ours."""
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    theirs, ours, shape = _sequence_pair(torch, kind)
    theirs.eval(), ours.eval()
    path = tmp_path / f"{kind}.safetensors"
    st_torch.save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, str(path))
    assert ours.load_state_dict(mt.load_safetensors(path)) == ([], [])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)

    def outputs(model, lib):
        with (torch.no_grad() if lib is torch else mt.no_grad()):
            out = model(lib.from_numpy(x))
        return (out[0] if isinstance(out, tuple) else out).numpy()

    np.testing.assert_allclose(outputs(ours, mt), outputs(theirs, torch), rtol=1e-4,
                               atol=1e-5)
    back = tmp_path / f"ours-{kind}.safetensors"
    mt.manual_seed(2)
    ours = _sequence_pair(torch, kind)[1].eval()
    mt.save_safetensors(ours, back)
    fresh = _sequence_pair(torch, kind)[0].eval()
    fresh.load_state_dict(st_torch.load_file(str(back)))
    np.testing.assert_allclose(outputs(fresh, torch), outputs(ours, mt), rtol=1e-4,
                               atol=1e-5)

"""mt.save(model) / mt.load of whole models without pickle: exact round trips, tied
weights, allowed classes only, and hostile files refused without importing or calling
anything (sentinels record every import and call)."""

from __future__ import annotations

import copy
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import checkpoint
from minitorch_exp.nn import functional as F
from minitorch_exp.nn.checkpoint import CheckpointError
from minitorch_exp.nn.model_file import UnsafeGlobalError, encode

from .._scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


class TiedNet(nn.Module):
    """A user's class: a tied weight, a non-persistent buffer, a function attribute."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", mt.tensor([2.0]), persistent=False)
        self.act = F.gelu
        self.sizes = {"in": 5, "names": ("a", None, 1.5)}

    def forward(self, idx):
        return self.head(self.act(self.embed(idx)) * self.scale)


def outputs_equal(a, b, *inputs) -> None:
    a.eval()
    b.eval()
    out_a, out_b = a(*inputs), b(*inputs)
    out_a = out_a[0] if isinstance(out_a, tuple) else out_a
    out_b = out_b[0] if isinstance(out_b, tuple) else out_b
    np.testing.assert_array_equal(out_a.numpy(), out_b.numpy())


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4), nn.Linear(4, 2)),
     (5, 3)),
    (lambda: nn.LSTM(3, 4, num_layers=2), (2, 1, 3)),
    (lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16), (3, 2, 8)),
    (lambda: nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.MaxPool2d(2), nn.Flatten()),
     (1, 1, 4, 4)),
])
def test_nn_models_round_trip_exactly(tmp_path, make, shape) -> None:
    mt.manual_seed(0)
    model = make()
    model.train(False)
    path = tmp_path / "m.pt"
    mt.save(model, path)
    loaded = mt.load(path)
    assert type(loaded) is type(model) and repr(loaded) == repr(model)
    assert loaded.training is False
    assert list(loaded.state_dict()) == list(model.state_dict())
    outputs_equal(model, loaded, mt.randn(*shape))


def test_a_user_class_needs_allowing_then_keeps_ties_buffers_and_settings(tmp_path) -> None:
    model = TiedNet()
    path = tmp_path / "tied.pt"
    mt.save(model, path)
    with pytest.raises(UnsafeGlobalError, match=r"TiedNet.*add_safe_globals"):
        mt.load(path)
    with mt.serialization.safe_globals([TiedNet]):
        loaded = mt.load(path)
    assert TiedNet not in mt.serialization.get_safe_globals()
    assert loaded.head.weight is loaded.embed.weight
    assert isinstance(loaded.head.weight, nn.Parameter) and loaded.head.weight.requires_grad
    assert loaded.act is F.gelu and loaded.sizes == model.sizes
    np.testing.assert_array_equal(loaded.scale.numpy(), [2.0])
    idx = mt.tensor([[0, 3, 4]])
    outputs_equal(model, loaded, idx)
    assert len(list(loaded.parameters())) == len(list(model.parameters())) == 1  # tied
    opt = nn.optim.SGD(loaded.parameters(), lr=0.1)
    loaded(idx).sum().backward()
    opt.step()


def test_add_safe_globals_and_weights_only(tmp_path) -> None:
    path = tmp_path / "tied.pt"
    mt.save(TiedNet(), path)
    mt.serialization.add_safe_globals([TiedNet])
    try:
        assert isinstance(mt.load(path), TiedNet)
        with pytest.raises(UnsafeGlobalError, match="weights_only=True.*Embedding"):
            mt.load(path, weights_only=True)
        with mt.serialization.safe_globals([nn.Embedding, nn.Linear, F.gelu]):
            assert isinstance(mt.load(path, weights_only=True), TiedNet)
    finally:
        mt.serialization.clear_safe_globals()
    assert mt.serialization.get_safe_globals() == []


def test_the_example_lenet_round_trips(tmp_path) -> None:
    pytest.importorskip("tqdm")
    example = load_script("examples/mnist_cnn.py", "mnist_cnn_whole")
    sys.modules["mnist_cnn_whole"] = example
    try:
        model = example.LeNet(width=(4, 8), hidden=16)
        mt.save(model, tmp_path / "lenet.pt")
        with mt.serialization.safe_globals([example.LeNet]):
            loaded = mt.load(tmp_path / "lenet.pt")
        outputs_equal(model, loaded, mt.randn(2, 1, 28, 28))
    finally:
        del sys.modules["mnist_cnn_whole"]


def test_saving_refuses_what_cannot_be_named(tmp_path) -> None:
    model = nn.Linear(2, 2)
    model.callback = lambda x: x
    with pytest.raises(TypeError, match="<lambda>.*module level"):
        mt.save(model, tmp_path / "x.pt")
    model = nn.Linear(2, 2)
    model.register_forward_hook(lambda *a: None)
    with pytest.raises(TypeError, match="hooks"):
        mt.save(model, tmp_path / "x.pt")
    model = nn.Linear(2, 2)
    model.thing = object()
    with pytest.raises(TypeError, match=r"model\.thing.*object"):
        mt.save(model, tmp_path / "x.pt")
    assert not list(tmp_path.iterdir())


def test_state_dict_checkpoints_load_as_before(tmp_path) -> None:
    model = nn.Linear(2, 3)
    mt.save({"model": model.state_dict(), "step": 3, "t": (1, [2.0])}, tmp_path / "c.pt")
    state = mt.load(tmp_path / "c.pt")
    assert state["step"] == 3 and state["t"] == (1, [2.0])
    assert isinstance(state["model"]["weight"], mt.Tensor)


# ------------------------------------------------------------------ hostile files


class Sentinel:
    """Records any import attempt and any call into sentinel code."""

    def __init__(self):
        self.events: list[str] = []

    def find_spec(self, name, path=None, target=None):
        self.events.append(f"import {name}")
        return None


@pytest.fixture
def sentinel(monkeypatch):
    record = Sentinel()
    monkeypatch.setattr(sys, "meta_path", [record, *sys.meta_path])

    class Meta(type):
        def __call__(cls, *a, **k):
            record.events.append("call")
            return super().__call__(*a, **k)

    class Evil(nn.Module, metaclass=Meta):
        def __new__(cls, *a, **k):
            record.events.append("__new__")
            return super().__new__(cls)

        def __init__(self):
            record.events.append("__init__")

        def __setattr__(self, name, value):
            record.events.append("__setattr__")

    module = types.ModuleType("evil_sentinel")
    module.Evil = Evil
    module.__getattr__ = lambda name: record.events.append(f"getattr {name}")
    Evil.__module__, Evil.__qualname__ = "evil_sentinel", "Evil"
    monkeypatch.setitem(sys.modules, "evil_sentinel", module)
    record.Evil = Evil
    return record


def model_file(path: Path, root: dict) -> Path:
    checkpoint.save({"format": "minitorch_exp.module", "version": 1, "root": root}, path)
    return path


def module_node(module: str, qualname: str, attrs=None, n: int = 0) -> dict:
    return {"t": "module", "id": n, "class": [module, qualname], "attrs": attrs or {}}


@pytest.mark.parametrize("ref", [
    ["os", "system"], ["builtins", "eval"], ["subprocess", "Popen"],
    ["never_imported_module_xyz", "Thing"], ["evil_sentinel", "Evil"],
    ["evil_sentinel", "Missing"], ["minitorch_exp.nn.checkpoint", "atomic_write"],
    ["minitorch_exp.nn", "functional"], ["minitorch_exp.nn.not_a_module_xyz", "X"],
    ["minitorch_exp.nn.module", "Module.__init__"], ["minitorch_exp.nn.layers", "Linear.zz"],
])
def test_refused_names_import_and_call_nothing(tmp_path, sentinel, ref) -> None:
    before = set(sys.modules)
    as_class = model_file(tmp_path / "a.pt", module_node(*ref))
    as_value = model_file(tmp_path / "b.pt", module_node(
        "minitorch_exp.nn.layers", "ReLU", {"act": {"t": "global", "ref": ref}}))
    for path in (as_class, as_value):
        with pytest.raises(UnsafeGlobalError) as info:
            mt.load(path)
        assert str(path) in str(info.value) and ".".join(ref) in str(info.value)
    assert sentinel.events == [] and set(sys.modules) == before


def test_an_allowed_class_gets_only_new_and_its_dict(tmp_path, sentinel) -> None:
    attrs = {"training": {"t": "plain", "v": False}, "_buffers": {"t": "dict", "items": []},
             "x": {"t": "plain", "v": 3}}
    path = model_file(tmp_path / "a.pt", module_node("evil_sentinel", "Evil", attrs))
    with mt.serialization.safe_globals([sentinel.Evil]):
        obj = mt.load(path)
    assert sentinel.events == ["__new__"]
    assert vars(obj) == {"training": False, "_buffers": {}, "x": 3}


def test_dunder_attributes_and_forward_references_are_refused(tmp_path) -> None:
    relu = ("minitorch_exp.nn.layers", "ReLU")
    path = model_file(tmp_path / "a.pt", module_node(*relu, {"__class__": {
        "t": "global", "ref": ["minitorch_exp.nn.layers", "Linear"]}}))
    with pytest.raises(CheckpointError, match="__class__"):
        mt.load(path)
    path = model_file(tmp_path / "b.pt", module_node(*relu, {"a": {"t": "ref", "id": 7}}))
    with pytest.raises(CheckpointError, match="described before"):
        mt.load(path)
    bad = {"t": "tensor", "id": 1, "kind": "parameter", "requires_grad": True,
           "data": np.arange(3)}
    path = model_file(tmp_path / "c.pt", module_node(*relu, {"w": bad}))
    with pytest.raises(CheckpointError, match="float data"):
        mt.load(path)


def mutations(draw, node):
    """``node`` with a few of its parts replaced by hostile values."""
    junk = st.recursive(
        st.none() | st.booleans() | st.integers(-3, 3) | st.floats() | st.text(max_size=6)
        | st.sampled_from(["module", "tensor", "ref", "global", "plain", "dict", "__class__",
                           "os", "system", "minitorch_exp.nn.layers", "Linear"])
        | st.builds(np.zeros, st.integers(0, 3)),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(
            st.sampled_from(["t", "id", "v", "class", "attrs", "items", "ref", "kind",
                             "data", "requires_grad", "name"]), c, max_size=4),
        max_leaves=10)
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        if draw(st.booleans()):
            node[key] = draw(junk)
        else:
            mutations(draw, node[key])
    elif isinstance(node, list) and node:
        i = draw(st.integers(0, len(node) - 1))
        if draw(st.booleans()):
            node[i] = draw(junk)
        else:
            mutations(draw, node[i])


BASE = encode(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.ReLU()))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_descriptions_fail_only_with_checkpoint_error(tmp_path_factory, data) -> None:
    root = copy.deepcopy(BASE)
    for _ in range(data.draw(st.integers(1, 3))):
        mutations(data.draw, root)
    path = tmp_path_factory.mktemp("fuzz") / "m.pt"
    try:
        checkpoint.save(root, path)
    except (TypeError, ValueError):
        return  # not writable as a checkpoint (e.g. a nan key): nothing to load
    before = set(sys.modules)
    try:
        mt.load(path)
    except CheckpointError as exc:
        assert str(path) in str(exc)
    # this package's own modules may load on first use; nothing else may be imported
    assert {m for m in set(sys.modules) - before if not m.startswith("minitorch_exp.")} == set()

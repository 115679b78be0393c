"""Module API: parameter discovery, names, modes, gradients, state dicts, repr."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn


class Block(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Net(nn.Module):
    """Parameters directly, in a list of modules, in a dict of modules, in a list of params."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(np.ones(3, np.float32))
        self.blocks = [Block(3), Block(3)]
        self.heads = {"a": nn.Linear(3, 2), "b": nn.Linear(3, 1, bias=False)}
        self.extras = [nn.Parameter(np.zeros(2, np.float32))]
        self.drop = nn.Dropout(0.5)
        self.not_a_param = np.ones(3)  # plain arrays are not parameters

    def forward(self, x):
        x = x * self.scale
        for b in self.blocks:
            x = b(x)
        return self.heads["a"](self.drop(x))


def test_parameters_found_in_attributes_lists_and_dicts():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "extras.0", "blocks.0.fc.weight", "blocks.0.fc.bias",
                     "blocks.1.fc.weight", "blocks.1.fc.bias", "heads.a.weight",
                     "heads.a.bias", "heads.b.weight"]
    params = list(net.parameters())
    assert len(params) == len(names)
    assert all(isinstance(p, nn.Parameter) and p.requires_grad and p.is_leaf for p in params)
    assert params[2] is net.blocks[0].fc.weight


def test_sequential_names_and_indexing():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight",
                                                       "2.bias"]
    assert len(model) == 3 and isinstance(model[1], nn.Tanh)
    assert [type(m).__name__ for m in model] == ["Linear", "Tanh", "Linear"]
    nested = nn.Sequential(nn.Sequential(nn.Linear(2, 2)), nn.ReLU())
    assert [n for n, _ in nested.named_parameters()] == ["0.0.weight", "0.0.bias"]


def test_shared_parameter_listed_once():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, shared)
    assert len(list(model.parameters())) == 2


def test_children_and_modules():
    net = Net()
    kids = list(net.named_children())
    assert [n for n, _ in kids] == ["blocks.0", "blocks.1", "heads.a", "heads.b", "drop"]
    assert list(net.children()) == [m for _, m in kids]
    names = [n for n, _ in net.named_modules()]
    assert names[0] == "" and "blocks.1.fc" in names and "blocks.1.act" in names
    assert len(list(net.modules())) == len(names) == 1 + 5 + 4


def test_train_eval_switches_every_module_and_only_dropout_changes_output():
    mt.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.ReLU())
    x = mt.randn(16, 8)
    assert model.training and all(m.training for m in model.modules())
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    a, b = model(x).numpy().copy(), model(x).numpy().copy()
    np.testing.assert_array_equal(a, b)  # eval: dropout is the identity
    no_dropout = nn.Sequential(model[0], model[2])
    np.testing.assert_array_equal(a, no_dropout(x).numpy())
    model.train()
    assert all(m.training for m in model.modules())
    c = model(x).numpy()
    assert not np.array_equal(a, c)  # train: dropout active
    # Linear and ReLU ignore the flag
    lin = model[0]
    y_train = lin(x).numpy().copy()
    lin.eval()
    np.testing.assert_array_equal(y_train, lin(x).numpy())


def test_zero_grad_clears_gradients():
    model = nn.Sequential(nn.Linear(3, 2))
    mt.sum(model(mt.randn(4, 3))).backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_state_dict_round_trip_and_in_place_load():
    mt.manual_seed(1)
    src, dst = Net(), Net()
    sd = src.state_dict()
    assert list(sd) == [n for n, _ in src.named_parameters()]
    assert all(not v.requires_grad for v in sd.values())
    weight = dst.blocks[0].fc.weight
    dst.load_state_dict(sd)
    assert dst.blocks[0].fc.weight is weight  # loaded in place: optimizers keep working
    for (n1, p1), (n2, p2) in zip(src.named_parameters(), dst.named_parameters()):
        assert n1 == n2
        np.testing.assert_array_equal(p1.numpy(), p2.numpy())
    # plain arrays load too
    dst.load_state_dict({k: v.numpy() * 2 for k, v in sd.items()})
    np.testing.assert_array_equal(dst.scale.numpy(), 2 * src.scale.numpy())


def test_load_state_dict_strict_errors():
    model = nn.Sequential(nn.Linear(3, 2))
    sd = dict(model.state_dict())
    missing = {k: v for k, v in sd.items() if k != "0.bias"}
    with pytest.raises(KeyError, match=r"missing keys \['0.bias'\]"):
        model.load_state_dict(missing)
    with pytest.raises(KeyError, match=r"unexpected keys \['1.weight'\]"):
        model.load_state_dict({**sd, "1.weight": np.zeros(2, np.float32)})
    before = model[0].weight.numpy().copy()
    model.load_state_dict(missing, strict=False)  # loads what is there
    model.load_state_dict({**sd, "extra": np.zeros(1)}, strict=False)
    np.testing.assert_array_equal(model[0].weight.numpy(), before)


def test_load_state_dict_shape_mismatch_changes_nothing():
    model = nn.Sequential(nn.Linear(3, 2))
    w0 = model[0].weight.numpy().copy()
    bad = {"0.weight": np.full((2, 3), 7.0, np.float32), "0.bias": np.zeros(5, np.float32)}
    with pytest.raises(ValueError, match=r"0\.bias.*\(5,\).*\(2,\)"):
        model.load_state_dict(bad)
    np.testing.assert_array_equal(model[0].weight.numpy(), w0)


def test_to_cpu_keeps_parameters_and_returns_self():
    model = nn.Sequential(nn.Linear(3, 2))
    before = [p.numpy().copy() for p in model.parameters()]
    assert model.to("cpu") is model
    for p, b in zip(model.parameters(), before):
        assert p.device.type == "cpu"
        np.testing.assert_array_equal(p.numpy(), b)


def test_repr_is_readable():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Dropout(0.25),
                          nn.Sequential(nn.Linear(3, 2, bias=False)))
    text = repr(model)
    assert text == (
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=3, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Dropout(p=0.25)\n"
        "  (3): Sequential(\n"
        "    (0): Linear(in_features=3, out_features=2, bias=False)\n"
        "  )\n"
        ")")
    assert repr(nn.Parameter(np.zeros(2, np.float32))).startswith("Parameter containing:")
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.LayerNorm(3)) == "LayerNorm((3,), eps=1e-05)"
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"


def test_unknown_attribute_raises_attribute_error():
    model = nn.Linear(2, 2)
    with pytest.raises(AttributeError):
        model.wieght  # noqa: B018
    with pytest.raises(AttributeError):
        nn.Sequential().nope  # noqa: B018


def test_forward_not_defined():
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_parameter_from_node_and_rejects_other_things():
    p = nn.Parameter(mt.ones(2))
    assert p.requires_grad and p.is_leaf
    with pytest.raises(TypeError):
        nn.Parameter([1.0, 2.0])

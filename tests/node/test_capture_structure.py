"""``mt.capture`` records again when a model's structure or an optimizer's groups change.

A replay repeats the recorded kernels: a layer swapped in after the recording,
a parameter replaced or removed, a layer appended to a Sequential, a param
group added to the optimizer would all be ignored by it. Each test trains two
identically built twins, one through ``mt.capture`` and one eagerly, applies
the same change to both between two calls, and requires every loss,
parameter and gradient to stay equal bit for bit.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.module import Parameter, structure_version

F = nn.functional
# Bit for bit needs the same kernels both ways, even on tiny tensors (tensor/eager.py).
pytestmark = pytest.mark.usefixtures("fuse_all")
CALLS = 6
CHANGE_AT = 3  # the change comes after the warm-up, the recording and a replay


class Net(nn.Module):
    """A Sequential body and a dict of heads: containers of both kinds."""

    def __init__(self, seed: int):
        super().__init__()
        gen = np.random.default_rng(seed)
        self.body = nn.Sequential(nn.Linear(6, 12, generator=gen), nn.ReLU())
        self.heads = {"out": nn.Linear(12, 3, generator=gen)}

    def forward(self, x):
        return self.heads["out"](self.body(x))


def linear(n_in: int, n_out: int, seed: int = 5) -> nn.Linear:
    return nn.Linear(n_in, n_out, generator=np.random.default_rng(seed))


def data(seed: int = 0):
    gen = np.random.default_rng(seed)
    return (mt.tensor(gen.standard_normal((16, 6)).astype(np.float32)),
            mt.tensor(gen.integers(0, 3, 16)))


def snapshot(model, loss) -> list[np.ndarray]:
    out = [loss.numpy().copy()]
    for p in model.parameters():
        out.append(p.numpy().copy())
        out.append(None if p.grad is None else p.grad.numpy().copy())
    return out


def assert_equal_runs(captured: list, eager: list) -> None:
    for call, (got, want) in enumerate(zip(captured, eager)):
        assert len(got) == len(want), f"call {call}: another number of parameters"
        for i, (a, b) in enumerate(zip(got, want)):
            assert (a is None) == (b is None), f"call {call}, array {i}: a gradient is missing"
            assert a is None or np.array_equal(a, b), f"call {call}, array {i} differs"


def train(model, opt, change, use_capture: bool) -> list:
    """``CALLS`` steps; ``change(model, opt)`` before call ``CHANGE_AT``."""
    x, y = data()

    def step(x, y):
        model.zero_grad()  # new layers too, which the optimizer does not know
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = mt.capture(step) if use_capture else step
    out = []
    for call in range(CALLS):
        if call == CHANGE_AT:
            change(model, opt)
        out.append(snapshot(model, run(x, y)))
    return out


def captured_and_eager(build, change) -> tuple[list, list]:
    runs = []
    for use_capture in (True, False):
        model, opt = build()
        runs.append(train(model, opt, change, use_capture))
    return runs[0], runs[1]


def sequential():
    gen = np.random.default_rng(1)
    model = nn.Sequential(nn.Linear(6, 12, generator=gen), nn.ReLU(),
                          nn.Linear(12, 3, generator=gen))
    return model, nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def net():
    model = Net(1)
    return model, nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


# ---- the model's structure ----------------------------------------------------------------

def replace_last_layer(model, opt):
    model.layers[-1] = linear(12, 3)


def replace_a_weight(model, opt):
    model.layers[0].weight = Parameter(np.full((12, 6), 0.05, np.float32))


def remove_a_bias(model, opt):
    model.layers[0].bias = None


def delete_a_bias(model, opt):
    del model.layers[2].bias
    model.layers[2].bias = None  # Linear.forward reads it


def append_a_layer(model, opt):
    model.layers.append(nn.Tanh())


def insert_a_layer(model, opt):
    model.layers.insert(2, nn.Linear(12, 12, generator=np.random.default_rng(3)))


def delete_a_layer(model, opt):
    del model.layers[1]


def replace_the_layer_list(model, opt):
    model.layers = [*model.layers[:-1], linear(12, 3)]


def replace_a_submodule(model, opt):
    model.body = nn.Sequential(linear(6, 12), nn.Tanh())


def replace_a_dict_item(model, opt):
    model.heads["out"] = linear(12, 3)


def replace_the_dict(model, opt):
    model.heads = {"out": linear(12, 3)}


SEQUENTIAL_CHANGES = [replace_last_layer, replace_a_weight, remove_a_bias, delete_a_bias,
                      append_a_layer, insert_a_layer, delete_a_layer, replace_the_layer_list]
NET_CHANGES = [replace_a_submodule, replace_a_dict_item, replace_the_dict]


@pytest.mark.parametrize("change", SEQUENTIAL_CHANGES, ids=lambda f: f.__name__)
def test_a_changed_sequential_is_recorded_again(change):
    assert_equal_runs(*captured_and_eager(sequential, change))


@pytest.mark.parametrize("change", NET_CHANGES, ids=lambda f: f.__name__)
def test_a_changed_submodule_or_dict_of_modules_is_recorded_again(change):
    assert_equal_runs(*captured_and_eager(net, change))


def test_the_loss_after_replacing_the_last_layer_is_the_new_models_loss():
    """The example of the bug report, against a model built with the new layer."""
    x, y = data()
    model, opt = sequential()

    @mt.capture
    def step(x, y):
        model.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    for _ in range(3):
        step(x, y)
    model.layers[-1] = linear(12, 3)
    fresh, _ = sequential()
    fresh.layers[-1] = linear(12, 3)
    want = F.cross_entropy(fresh(x), y).numpy()
    assert np.array_equal(step(x, y).numpy(), want)
    assert np.array_equal(step(x, y).numpy(), want)


# ---- the optimizer's param groups -----------------------------------------------------------

def frozen_head():
    """Only the first layer trains at first; the head joins later (fine-tuning)."""
    model, _ = sequential()
    for p in model.layers[2].parameters():
        p.requires_grad_(False)
    return model, nn.optim.SGD(model.layers[0].parameters(), lr=0.1, momentum=0.9)


def head_group(model) -> dict:
    params = list(model.layers[2].parameters())
    for p in params:
        p.requires_grad_(True)
    return {"params": params, "lr": 0.05, "momentum": 0.9, "dampening": 0.0,
            "weight_decay": 0.0, "nesterov": False}


def append_a_group(model, opt):
    opt.param_groups.append(head_group(model))


def replace_the_groups(model, opt):
    opt.param_groups = [*opt.param_groups, head_group(model)]


def add_param_group(model, opt):
    opt.add_param_group(head_group(model))


@pytest.mark.parametrize("change", [append_a_group, replace_the_groups, add_param_group],
                         ids=lambda f: f.__name__)
def test_a_param_group_added_is_recorded_again(change):
    captured, eager = captured_and_eager(frozen_head, change)
    assert_equal_runs(captured, eager)
    head_weight = 5  # the snapshot: loss, then each parameter and its gradient
    before = eager[CHANGE_AT - 1][head_weight]
    assert np.array_equal(eager[0][head_weight], before)  # frozen
    assert not np.array_equal(before, eager[-1][head_weight])  # trained once added


# ---- the version itself --------------------------------------------------------------------

def test_the_version_moves_only_for_structure():
    model, opt = net()
    v = structure_version()
    model.training_note = "not structure"
    model.body.layers[0].in_features = 6
    opt.param_groups[0]["lr"] = 0.01  # a schedule: the replayed step reads it anyway
    model.train()
    assert structure_version() == v
    model.body.layers.append(nn.ReLU())
    assert structure_version() > v


def test_tracked_containers_still_behave_as_lists_and_dicts():
    model, _ = sequential()
    assert isinstance(model.layers, list) and model.layers == list(model.layers)
    twin = copy.deepcopy(model)
    assert [type(m) for m in twin.layers] == [type(m) for m in model.layers]
    assert len(list(twin.parameters())) == 4
    net_model = Net(1)
    assert isinstance(net_model.heads, dict) and list(net_model.heads) == ["out"]


def test_after_a_change_the_step_warms_up_records_and_replays_again():
    model, opt = sequential()
    body_runs = []
    x, y = data()

    @mt.capture
    def step(x, y):
        body_runs.append(1)
        model.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for call in range(8):
        if call == 4:
            replace_last_layer(model, opt)
        step(x, y)
    assert len(body_runs) == 4  # warm-up and recording, twice; the other calls replay

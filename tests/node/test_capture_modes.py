"""``mt.capture`` follows the Python values a step reads from modules and optimizers.

A replay runs none of the step's Python, so whatever the recorded run decided
from a Python value is frozen into it. The values a training step reads from
its model and optimizer are watched instead:

* a module's ``training`` flag (``train()``/``eval()``) is part of what a
  recording depends on: each mode gets a recording of its own, and switching
  back replays the one made for it;
* any other setting of a module (``dropout.p``, ``bn.momentum``) changed
  between calls makes the next call record again;
* the optimizer's step runs eagerly on every replay, so its hyperparameters
  (learning rate, momentum, weight decay, betas, eps) are read afresh.

Each test trains twins, one captured and one eager, and requires every output,
parameter, gradient and buffer to stay equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn

F = nn.functional
# Bit for bit needs the same kernels both ways, even on tiny tensors (tensor/eager.py).
pytestmark = pytest.mark.usefixtures("fuse_all")


def conv_net(dropout: float = 0.0) -> nn.Sequential:
    """Conv, BatchNorm (running statistics: train and eval differ) and dropout."""
    mt.manual_seed(0)  # twins start from the same weights
    drops = [nn.Dropout2d(dropout), nn.Flatten(), nn.Dropout(dropout)] if dropout else \
        [nn.Flatten()]
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), *drops,
                         nn.Linear(72, 3))


def batches(n: int, seed: int = 0):
    gen = np.random.default_rng(seed)
    return [(mt.tensor(gen.standard_normal((4, 1, 8, 8)).astype(np.float32)),
             mt.tensor(gen.integers(0, 3, 4))) for _ in range(n)]


def state(model, out) -> list[np.ndarray]:
    """The output, the modules' training flags, then every parameter, gradient and
    buffer (running statistics)."""
    arrays = [out.numpy().copy(), np.array([m.training for m in model.modules()])]
    for p in model.parameters():
        arrays += [p.numpy().copy()] + ([p.grad.numpy().copy()] if p.grad is not None else [])
    return arrays + [b.numpy().copy() for b in model.buffers()]


def assert_equal_runs(captured: list, eager: list) -> None:
    assert len(captured) == len(eager)
    for call, (got, want) in enumerate(zip(captured, eager)):
        assert len(got) == len(want), f"call {call}: an array is missing"
        for i, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(a, b, err_msg=f"call {call}, array {i}")


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def sgd(params):
    return nn.optim.SGD(params, lr=0.1, momentum=0.9)


def plain_step(model, opt):
    """``train_step`` on ``model`` and ``opt``, as a function of the batch."""
    return lambda x, y: train_step(model, opt, x, y)


def twin_runs(step_of, calls, between=lambda model, opt, i: None, optimizer=sgd):
    """Run ``step_of(model, opt)`` captured and eagerly on twins, calling ``between``
    on both before each call, in the mode ``calls`` names. Returns both runs and how
    often the captured body ran."""
    runs, body_runs = [], []
    for captured in (True, False):
        model = conv_net(dropout=0.5)
        opt = optimizer(model.parameters())
        body = step_of(model, opt)
        if captured:
            def counted(*args, body=body):
                body_runs.append(1)
                return body(*args)
            body = mt.capture(counted)
        mt.manual_seed(7)  # both twins draw the same dropout masks
        run = []
        for i, (x, y) in enumerate(batches(len(calls))):
            between(model, opt, i)
            model.train(calls[i] == "train")
            run.append(state(model, body(x, y)))
        runs.append(run)
    return runs, len(body_runs)


# ---- the training flag -----------------------------------------------------------------

def test_eval_after_recording_in_train_mode_gives_the_eval_output():
    """Issue 37's report: the train-mode recording was replayed after ``eval()``."""
    model = conv_net()
    f = mt.capture(lambda x: model(x))
    x = mt.randn(4, 1, 8, 8)
    with mt.no_grad():
        for _ in range(3):
            f(x)
        model.eval()
        for _ in range(3):
            np.testing.assert_array_equal(f(x).numpy(), model(x).numpy())


def test_each_mode_is_recorded_once_and_switching_back_replays_it():
    calls = ["train"] * 3 + ["eval"] * 3 + ["train"] * 3 + ["eval"] * 3 + ["train"] * 2
    (captured, eager), body_runs = twin_runs(plain_step, calls)
    assert_equal_runs(captured, eager)
    assert body_runs == 4  # a warm-up and a recording per mode, then only replays


def test_a_mode_set_inside_the_step_is_no_dependency_and_is_set_by_replays():
    """``model.train()`` first thing in the step: the flag it reads is the one it set,
    whatever the caller left (an evaluation between steps), and a replay leaves the
    model in train mode as the eager step does."""
    def step_of(model, opt):
        def step(x, y):
            model.train()
            return train_step(model, opt, x, y)
        return step

    (captured, eager), body_runs = twin_runs(step_of, ["eval"] * 6)  # the caller's mode
    assert_equal_runs(captured, eager)
    assert body_runs == 2


def test_a_flag_read_by_a_custom_module_is_followed():
    class Doubling(nn.Module):
        def forward(self, x):
            return x * 2.0 if self.training else x

    model = Doubling()
    f = mt.capture(lambda x: model(x) + 1.0)
    x = mt.tensor([1.0, 2.0])
    for mode, want in [(True, [3.0, 5.0])] * 3 + [(False, [2.0, 3.0])] * 3 + \
            [(True, [3.0, 5.0])] * 2:
        model.train(mode)
        np.testing.assert_array_equal(f(x).numpy(), want)
    assert len(f.recordings) == 2


# ---- other settings of modules -------------------------------------------------------------

SETTINGS = {
    "dropout_p": lambda model: setattr(model.layers[5], "p", 0.1),
    "dropout2d_p": lambda model: setattr(model.layers[3], "p", 0.0),
    "bn_momentum": lambda model: setattr(model.layers[1], "momentum", 0.5),
    "bn_eps": lambda model: setattr(model.layers[1], "eps", 0.5),
    "bn_momentum_none": lambda model: setattr(model.layers[1], "momentum", None),
}


@pytest.mark.parametrize("change", sorted(SETTINGS))
def test_a_module_setting_changed_between_calls_is_recorded_again(change):
    def between(model, opt, i):
        if i == 3:
            SETTINGS[change](model)

    (captured, eager), body_runs = twin_runs(plain_step, ["train"] * 6, between)
    assert_equal_runs(captured, eager)
    assert body_runs == 4


def test_setting_a_module_attribute_to_the_same_value_keeps_the_recording():
    (captured, eager), body_runs = twin_runs(
        plain_step, ["train"] * 6, lambda model, opt, i: setattr(model.layers[1], "eps", 1e-5))
    assert_equal_runs(captured, eager)
    assert body_runs == 2


# ---- optimizer hyperparameters -------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda params: nn.optim.SGD(params, lr=0.1),
    "adam": lambda params: nn.optim.Adam(params, lr=0.01),
    "adamw": lambda params: nn.optim.AdamW(params, lr=0.01),
}
CHANGES = [
    ("sgd", "momentum", 0.9), ("sgd", "weight_decay", 0.1), ("sgd", "lr", 0.5),
    ("adam", "betas", (0.5, 0.9)), ("adam", "eps", 0.1), ("adam", "weight_decay", 0.1),
    ("adamw", "weight_decay", 0.5), ("adamw", "lr", 0.1),
]


@pytest.mark.parametrize(("optimizer", "key", "value"), CHANGES)
def test_optimizer_hyperparameters_changed_between_calls_are_used(optimizer, key, value):
    def between(model, opt, i):
        if i == 4:
            opt.param_groups[0][key] = value

    (captured, eager), body_runs = twin_runs(plain_step, ["train"] * 7, between,
                                             optimizer=OPTIMIZERS[optimizer])
    assert_equal_runs(captured, eager)
    assert body_runs == 2  # the step is replayed as itself: no new recording

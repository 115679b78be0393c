"""A replay checks data values as an eager call does: class targets out of range raise.

Eager ``cross_entropy``/``nll_loss`` raise ``ValueError`` for a target outside
``[0, C)``. A replay runs no Python, so the check is a host op of the recording
that every replay repeats where the eager call makes it -- after the forward
kernels it needs, before the backward and the optimizer's step -- so a bad batch
raises the eager error and leaves the weights and the optimizer state as they
were (each test compares with an eager twin fed the same batches). Checks that
need values a recording cannot read (embedding indices, tensor-indexed
gathers) refuse to be recorded instead: never replayed unchecked.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn

F = nn.functional
pytestmark = pytest.mark.usefixtures("fuse_all")
LOSSES = {"cross_entropy": F.cross_entropy,
          "nll_loss": lambda z, y: F.nll_loss(F.log_softmax(z, 1), y),
          "smoothed": lambda z, y: F.cross_entropy(z, y, label_smoothing=0.1)}
BAD = [3, -1, 10**9]


def model_and_optimizer():
    mt.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    return model, nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def step_of(model, opt, loss_fn, shift: bool = False):
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y + 1 if shift else y)  # shift: targets computed in the step
        loss.backward()
        opt.step()
        return loss
    return step


def weights(model, opt) -> list[np.ndarray]:
    """Parameters and the optimizer's momentum."""
    return ([p.numpy().copy() for p in model.parameters()] +
            [v.numpy().copy() for s in opt.state.values() for v in s.values()
             if hasattr(v, "numpy")])


def state(model, opt) -> list[np.ndarray]:
    """The weights, then the buffers (BatchNorm's running statistics)."""
    return weights(model, opt) + [b.numpy().copy() for b in model.buffers()]


def feed(step, model, opt, targets: list) -> list:
    """Call ``step`` on each batch of targets: per call, the loss or the error's text,
    then the state it leaves."""
    x = mt.tensor(np.linspace(-1, 1, 4 * len(targets[0]), dtype=np.float32).reshape(-1, 4))
    out = []
    for y in targets:
        try:
            result = step(x, mt.tensor(np.array(y)))
            out.append([result.numpy().copy(), *state(model, opt)])
        except ValueError as err:
            out.append([str(err), *state(model, opt)])
    return out


def assert_equal_runs(captured, eager) -> None:
    for call, (got, want) in enumerate(zip(captured, eager, strict=True)):
        assert isinstance(got[0], str) == isinstance(want[0], str), f"call {call}"
        assert len(got) == len(want), f"call {call}"
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b, err_msg=f"call {call}")


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_a_bad_target_raises_in_a_replay_and_leaves_the_weights(loss, bad):
    model, opt = model_and_optimizer()
    step = mt.capture(step_of(model, opt, LOSSES[loss]))
    feed(step, model, opt, [[0, 2], [1, 2], [2, 0]])  # warm-up, recording, replay
    assert len(step.recordings) == 1
    before = weights(model, opt)
    x = mt.ones(2, 4)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"class targets must be in \[0, 3\)"):
            step(x, mt.tensor([0, bad]))
        np.testing.assert_equal(weights(model, opt), before)
    assert len(step.recordings) == 1  # still replaying, not refused into eager calls


@pytest.mark.parametrize("shift", [False, True], ids=["argument", "computed_in_the_step"])
def test_replays_with_bad_batches_equal_an_eager_twin(shift):
    """The check runs where the eager call runs it: after the forward kernels (the
    BatchNorm statistics moved, as eagerly) and on targets computed in the step."""
    good = [0, 1, 1, 0] if shift else [0, 2, 1, 2]
    bad = [0, 2, 1, 1] if shift else [0, 3, 1, 2]
    targets = [good, good, good, bad, good, [-5, 0, 0, 0], good, bad, good]
    runs = []
    for captured in (True, False):
        model, opt = model_and_optimizer()
        step = step_of(model, opt, F.cross_entropy, shift)
        runs.append(feed(mt.capture(step) if captured else step, model, opt, targets))
    assert_equal_runs(*runs)
    assert sum(isinstance(call[0], str) for call in runs[0]) == 3


def test_a_captured_embedding_looks_up_and_checks_each_batch():
    """The lookup is a library call and the range check a host op: replays give each new
    batch's rows and gradients, and a bad index raises before the step writes anything."""
    emb = nn.Embedding(5, 3)
    opt = nn.optim.SGD(emb.parameters(), lr=0.1)

    def step(i, g):
        opt.zero_grad()
        loss = (emb(i) * g).sum()
        loss.backward()
        opt.step()
        return loss

    captured = mt.capture(step)
    rng = np.random.default_rng(0)
    for indices in ([0, 4, 4], [1, 2, 3], [3, 3, 0], [2, 0, 1]):
        g = mt.tensor(rng.standard_normal((3, 3)).astype(np.float32))
        before = emb.weight.numpy().copy()
        want = before.copy()
        np.add.at(want, indices, -0.1 * g.numpy())
        loss = captured(mt.tensor(indices), g)
        np.testing.assert_allclose(loss.numpy(), (before[indices] * g.numpy()).sum(),
                                   rtol=1e-5)
        np.testing.assert_allclose(emb.weight.numpy(), want, rtol=1e-5, atol=1e-6)
    assert len(captured.recordings) == 1
    before = emb.weight.numpy().copy()
    for bad in ([0, 5, 1], [-1, 0, 0]):
        with pytest.raises(IndexError, match=r"indices must be in \[0, 5\)"):
            captured(mt.tensor(bad), g)
        np.testing.assert_array_equal(emb.weight.numpy(), before)
    assert len(captured.recordings) == 1


def test_steps_whose_checks_read_index_values_are_refused_not_replayed():
    w = nn.Parameter(np.ones((5, 3), np.float32))
    body = lambda w, x, i: (w[i] * x).sum()  # noqa: E731
    step = mt.capture(lambda x, i: body(w, x, i))
    x = mt.ones(2, 3)
    step(x, mt.tensor([0, 4]))  # the warm-up runs eagerly
    for i in ([0, 4], [0, 5]):
        with pytest.raises(mt.CaptureError, match="reads tensor values"):
            step(x, mt.tensor(i))
    assert step.recordings == []


def test_an_ignored_target_without_class_weights_is_refused_by_a_replay():
    """Eagerly an ``ignore_index`` row counts for nothing (a host-side choice of path);
    a replay of the fused path cannot leave rows out, so its check refuses the batch
    rather than train on it."""
    model, opt = model_and_optimizer()
    step = mt.capture(step_of(model, opt, F.cross_entropy))
    feed(step, model, opt, [[0, 2], [1, 2], [2, 0]])
    before = weights(model, opt)
    with pytest.raises(ValueError, match="class targets must be in"):
        step(mt.ones(2, 4), mt.tensor([0, -100]))
    np.testing.assert_equal(weights(model, opt), before)
    assert len(step.recordings) == 1


def test_class_weights_with_ignored_and_bad_targets_replay_as_eager():
    """With ``weight=`` the loss is tensor ops only: ignored rows are masked by kernels,
    and the range check runs on the targets computed in the step."""
    w = mt.tensor([1.0, 2.0, 0.5])
    targets = [[0, 2, 1, 2], [1, 2, -100, 0], [0, 0, 1, 2], [2, -100, -100, 1],
               [0, 3, 1, 2], [1, 1, -100, 0], [-7, 0, 0, 0], [2, 1, 0, -100]]
    runs = []
    for captured in (True, False):
        model, opt = model_and_optimizer()
        step = step_of(model, opt, lambda z, y: F.cross_entropy(z, y, w))
        runs.append(feed(mt.capture(step) if captured else step, model, opt, targets))
    assert_equal_runs(*runs)
    assert sum(isinstance(call[0], str) for call in runs[0]) == 2

"""BatchNorm1d/2d: training and evaluation values, gradients and running statistics
against PyTorch step by step; finite differences; buffers in the state dict; a captured
training step updates the running statistics on every replay."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.functional import batch_norm

SHAPES = {"BatchNorm1d": [(6, 3), (5, 3, 4)], "BatchNorm2d": [(4, 3, 5, 2)]}
CASES = [(name, shape) for name, shapes in SHAPES.items() for shape in shapes]


def _pair(name, torch, **kwargs):
    """Our module and PyTorch's, float64, with the same (non-trivial) affine parameters."""
    ours = getattr(nn, name)(3, dtype=np.float64, **kwargs)
    theirs = getattr(torch.nn, name)(3, dtype=torch.float64, **kwargs)
    if ours.affine:
        rng = np.random.default_rng(0)
        with torch.no_grad():
            for p, tp in zip(ours.parameters(), theirs.parameters()):
                values = rng.uniform(0.5, 1.5, 3)
                p.value[...] = mt.tensor(values).value
                tp.copy_(torch.from_numpy(values))
    return ours, theirs


def _close(a, b, what):
    np.testing.assert_allclose(np.asarray(a), b.detach().numpy(), rtol=1e-10, atol=1e-12,
                               err_msg=what)


@pytest.mark.parametrize("name, shape", CASES)
@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
@pytest.mark.parametrize("affine", [True, False])
def test_training_steps_then_eval_match_pytorch(name, shape, momentum, affine):
    torch = pytest.importorskip("torch")
    ours, theirs = _pair(name, torch, momentum=momentum, affine=affine)
    rng = np.random.default_rng(1)
    for step in range(3):
        x = rng.standard_normal(shape) * 2 + 1
        g = rng.standard_normal(shape)
        xn, tx = mt.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, tout = ours(xn), theirs(tx)
        out.backward(mt.tensor(g))
        tout.backward(torch.from_numpy(g))
        _close(out.numpy(), tout, f"output, step {step}")
        _close(xn.grad.numpy(), tx.grad, f"input gradient, step {step}")
        for p, tp in zip(ours.parameters(), theirs.parameters()):
            _close(p.grad.numpy(), tp.grad, f"parameter gradient, step {step}")
            p.grad, tp.grad = None, None
        _close(ours.running_mean.numpy(), theirs.running_mean, "running_mean")
        _close(ours.running_var.numpy(), theirs.running_var, "running_var")
    assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item() == 3
    ours.eval()
    theirs.eval()
    x = rng.standard_normal(shape)
    _close(ours(mt.tensor(x)).numpy(), theirs(torch.from_numpy(x)), "eval output")
    _close(ours.running_mean.numpy(), theirs.running_mean, "eval leaves running_mean alone")


@pytest.mark.parametrize("name, shape", CASES)
def test_without_running_statistics_batch_statistics_are_used_in_eval_too(name, shape):
    torch = pytest.importorskip("torch")
    ours, theirs = _pair(name, torch, track_running_stats=False)
    assert ours.running_mean is None and list(ours.buffers()) == []
    ours.eval()
    theirs.eval()
    x = np.random.default_rng(2).standard_normal(shape)
    _close(ours(mt.tensor(x)).numpy(), theirs(torch.from_numpy(x)), "output")


def test_eval_normalizes_by_the_running_statistics():
    bn = nn.BatchNorm2d(2, affine=False, dtype=np.float64)
    bn.running_mean.value[...] = mt.tensor([1.0, -2.0], dtype=mt.float64).value
    bn.running_var.value[...] = mt.tensor([4.0, 0.25], dtype=mt.float64).value
    bn.eval()
    x = np.random.default_rng(3).standard_normal((3, 2, 2, 2))
    expected = (x - np.array([1.0, -2.0])[:, None, None]) / np.sqrt(
        np.array([4.0, 0.25])[:, None, None] + 1e-5)
    np.testing.assert_allclose(bn(mt.tensor(x)).numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradcheck(training):
    rng = np.random.default_rng(4)
    x = mt.tensor(rng.standard_normal((4, 3, 2, 2)), requires_grad=True)
    w = mt.tensor(rng.uniform(0.5, 1.5, 3), requires_grad=True)
    b = mt.tensor(rng.standard_normal(3), requires_grad=True)
    mean, var = mt.tensor(rng.standard_normal(3)), mt.tensor(rng.uniform(0.5, 2, 3))
    assert mt.gradcheck(lambda x, w, b: batch_norm(x, mean.clone(), var.clone(), w, b,
                                                   training), [x, w, b])


def test_running_statistics_are_buffers_in_the_state_dict():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias",
                                        "1.running_mean", "1.running_var",
                                        "1.num_batches_tracked"]
    assert [n for n, _ in model.named_buffers()] == ["1.running_mean", "1.running_var",
                                                     "1.num_batches_tracked"]
    assert len(list(model.parameters())) == 4  # buffers are not trained
    model(mt.randn(4, 1, 5, 5))
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    fresh = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    fresh.load_state_dict(state)
    for name, value in fresh.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), state[name], err_msg=name)
    assert fresh[1].num_batches_tracked.dtype == mt.int64


def test_a_checkpoint_round_trip_keeps_the_running_statistics(tmp_path):
    bn = nn.BatchNorm1d(3)
    bn(mt.randn(8, 3) * 3 + 2)
    mt.save(bn.state_dict(), tmp_path / "bn.npz")
    fresh = nn.BatchNorm1d(3)
    fresh.load_state_dict(mt.load(tmp_path / "bn.npz"))
    np.testing.assert_array_equal(fresh.running_var.numpy(), bn.running_var.numpy())
    assert fresh.num_batches_tracked.item() == 1


def _train_bn_model(batches, captured: bool) -> dict:
    mt.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    opt = nn.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = model(x).mean()
        loss.backward()
        opt.step()
        return loss

    run = mt.capture(step) if captured else step
    for x in batches:
        run(mt.tensor(x))
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def test_a_captured_training_step_updates_the_statistics_on_every_replay():
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((8, 3, 4, 4)).astype(np.float32) * (i + 1) for i in range(6)]
    results = [_train_bn_model(batches, captured) for captured in (False, True)]
    assert results[1]["1.num_batches_tracked"] == 6
    for name in results[0]:
        np.testing.assert_allclose(results[1][name], results[0][name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"expected input with 3 channels .* got shape "
                                         r"\(4, 2, 5, 5\) with 2"):
        nn.BatchNorm2d(3)(mt.randn(4, 2, 5, 5))
    with pytest.raises(ValueError, match=r"expected input of shape \(N, C, H, W\)"):
        nn.BatchNorm2d(3)(mt.randn(4, 3))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(mt.randn(1, 3))
    nn.BatchNorm1d(3).eval()(mt.randn(1, 3))  # one sample is fine in eval


def test_buffers_move_with_the_module():
    bn = nn.BatchNorm1d(2)
    assert bn.to("cpu") is bn
    assert bn.running_mean.device == mt.tensor(0.0).device
    bn.reset_running_stats()
    assert bn.num_batches_tracked.item() == 0

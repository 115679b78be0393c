"""End to end for convolutional networks: a LeNet learns MNIST from a subset; PyTorch's MNIST
example network (its examples repository's) trains step for step as PyTorch's does from
the same weights; a captured step equals an eager one; examples/mnist_cnn.py runs, writes
its checkpoint and resumes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import functional as F

from .._mnist import write_tiny_mnist
from .._scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist_cnn.py"


@pytest.fixture(scope="module")
def example():
    pytest.importorskip("tqdm")
    return load_script("examples/mnist_cnn.py", "mnist_cnn_example")


@pytest.fixture(scope="module")
def mnist(example):
    from minitorch_exp.nn.idx import load_mnist
    try:
        data = load_mnist()
    except FileNotFoundError:
        pytest.skip("MNIST files not found")
    return (example.prepare(data.train_images[:3000]), data.train_labels[:3000].astype(np.int64),
            example.prepare(data.test_images[:1000]), data.test_labels[:1000].astype(np.int64))


def accuracy(model, x, y) -> float:
    model.eval()
    with mt.no_grad():
        pred = model(mt.tensor(x)).argmax(1).numpy()
    model.train()
    return float((pred == y).mean())


def test_a_small_lenet_learns_mnist_from_a_subset(example, mnist):
    x, y, tx, ty = mnist
    mt.manual_seed(0)
    model = example.LeNet(width=(6, 12), hidden=64, dropout=0.1)
    opt = nn.optim.Adam(model.parameters(), lr=2e-3)
    assert accuracy(model, tx, ty) < 0.3  # untrained: about chance
    step = example.shared.make_train_step(model, opt)
    loader = nn.DataLoader(nn.TensorDataset(x, y), batch_size=64, shuffle=True, seed=0)
    losses = [step(xb, yb)[0].item() for xb, yb in loader]
    assert np.mean(losses[-10:]) < 0.4 * np.mean(losses[:5])
    assert accuracy(model, tx, ty) > 0.8  # after 47 steps


class ExamplesNet(nn.Module):
    """The network of PyTorch's examples repository (mnist/main.py), written as there."""

    def __init__(self, nn_):
        super().__init__()
        self.conv1 = nn_.Conv2d(1, 32, 3, 1)
        self.conv2 = nn_.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn_.Dropout(0.25)
        self.dropout2 = nn_.Dropout(0.5)
        self.fc1 = nn_.Linear(9216, 128)
        self.fc2 = nn_.Linear(128, 10)

    def forward(self, x, F_, flatten):
        x = F_.relu(self.conv1(x))
        x = F_.relu(self.conv2(x))
        x = F_.max_pool2d(x, 2)
        x = flatten(self.dropout1(x), 1)
        x = self.dropout2(F_.relu(self.fc1(x)))
        return F_.log_softmax(self.fc2(x), dim=1)


def test_pytorch_examples_mnist_net_trains_as_pytorch_does(example, mnist):
    torch = pytest.importorskip("torch")
    x, y = mnist[0][:48], mnist[1][:48]
    mt.manual_seed(0)
    ours, theirs = ExamplesNet(nn), ExamplesNet(torch.nn)  # the same code, either library
    layers = ("conv1", "conv2", "fc1", "fc2")
    with torch.no_grad():
        for name in layers:
            for p, tp in zip(getattr(ours, name).parameters(), getattr(theirs, name).parameters()):
                tp.copy_(torch.from_numpy(p.numpy().copy()))
    ours.eval()  # dropout off in both, so that the runs compare step for step
    theirs.dropout1.eval()
    theirs.dropout2.eval()
    opt = nn.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD([p for n in layers for p in getattr(theirs, n).parameters()],
                           lr=0.05, momentum=0.9)
    for start in range(0, len(x), 16):
        xb, yb = x[start:start + 16], y[start:start + 16]
        out = ours(mt.tensor(xb), F, mt.flatten)
        tout = theirs(torch.from_numpy(xb), torch.nn.functional, torch.flatten)
        loss = F.nll_loss(out, mt.tensor(yb), reduction="sum")
        tloss = torch.nn.functional.nll_loss(tout, torch.from_numpy(yb), reduction="sum")
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-4)
        for o, l in ((opt, loss), (topt, tloss)):
            o.zero_grad()
            l.backward()
            o.step()
    for name in layers:
        np.testing.assert_allclose(getattr(ours, name).weight.numpy(),
                                   getattr(theirs, name).weight.detach().numpy(),
                                   rtol=1e-3, atol=1e-5, err_msg=name)


def test_captured_steps_equal_eager_steps(example):
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((16, 1, 28, 28)).astype(np.float32),
                rng.integers(0, 10, 16)) for _ in range(5)]
    params = []
    for captured in (False, True):
        mt.manual_seed(0)
        model = example.LeNet(width=(4, 8), hidden=32, dropout=0.5)
        opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        step = example.shared.make_train_step(model, opt, captured=captured)
        mt.manual_seed(1)  # the same dropout masks
        losses = [step(mt.tensor(xb), mt.tensor(yb))[0].item() for xb, yb in batches]
        params.append((losses, [p.numpy().copy() for p in model.parameters()]))
    (l1, p1), (l2, p2) = params
    np.testing.assert_allclose(l1, l2, rtol=1e-6)
    for a, b in zip(p1, p2):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


# ---- the script -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_mnist(tmp_path_factory) -> Path:
    """256 training and 64 test images of noise, in the MNIST layout."""
    return write_tiny_mnist(tmp_path_factory.mktemp("tiny_mnist"), 256, 64)


@pytest.mark.slow
def test_the_script_trains_checkpoints_and_resumes(tiny_mnist, tmp_path):
    pytest.importorskip("tqdm")
    pytest.importorskip("matplotlib")
    env = {"MPLBACKEND": "Agg", "TQDM_DISABLE": "1", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT)}  # where the package is not installed (the GPU image)
    args = [sys.executable, str(EXAMPLE), "--data-dir", str(tiny_mnist), "--out",
            str(tmp_path / "run"), "--batch-size", "32", "--width", "4", "8", "--hidden", "16"]
    first = subprocess.run([*args, "--epochs", "1"], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.splitlines()[-1].startswith("test accuracy: ")
    assert "epoch 1: train loss" in first.stdout
    checkpoint = tmp_path / "run" / "checkpoint.npz"
    assert mt.load(checkpoint)["epoch"] == 1
    assert (tmp_path / "run" / "curves.png").is_file()
    second = subprocess.run([*args, "--epochs", "2", "--resume", str(checkpoint)],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout and "epoch 2: train loss" in second.stdout
    assert "epoch 1: train loss" not in second.stdout
    assert mt.load(checkpoint)["epoch"] == 2


def test_help_shows_every_default(example, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        example.parse_args(["--help"])
    text = capsys.readouterr().out.split("\noptions:\n", 1)[1]
    for name in vars(example.parse_args([])):
        block = text.split(f"\n  --{name.replace('_', '-')}", 1)[1].split("\n  -", 1)[0]
        assert "(default: " in block, name
    assert example.resume_command(example.parse_args(["--epochs", "7"]), Path("c.npz")) \
        .endswith("--epochs 7 --resume c.npz")

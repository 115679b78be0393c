"""End to end: a short MNIST training run learns, the same with and without fusion,
and matches a PyTorch run of the same model, data order and optimizer."""

from __future__ import annotations

import time

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn

from ..devices import DEVICES, tolerance

MEAN, STD = 0.1307, 0.3081


@pytest.fixture(scope="module")
def mnist():
    from minitorch_exp.nn.idx import load_mnist
    try:
        data = load_mnist()
    except FileNotFoundError:
        pytest.skip("MNIST files not found")

    def prep(images):
        return ((images.reshape(len(images), -1).astype(np.float32) / 255.0) - MEAN) / STD

    return (prep(data.train_images[:5000]), data.train_labels[:5000].astype(np.int64),
            prep(data.test_images[:2000]), data.test_labels[:2000].astype(np.int64))


def mlp(hidden=128):
    return nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def train(model, opt, x, y, epochs, batch_size=64, seed=0, device="cpu"):
    loader = nn.DataLoader(nn.TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                           seed=seed, device=device)
    losses = []
    for _ in range(epochs):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def accuracy(model, x, y, device="cpu"):
    model.eval()
    with mt.no_grad():
        pred = model(mt.tensor(x, device=device)).argmax(1).numpy()
    model.train()
    return float((pred == y).mean())


def test_mnist_subset_learns(mnist):
    x, y, tx, ty = mnist
    mt.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
    opt = nn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    assert accuracy(model, tx, ty) < 0.3  # untrained: about chance
    start = time.perf_counter()
    losses = train(model, opt, x, y, epochs=2)
    elapsed = time.perf_counter() - start
    acc = accuracy(model, tx, ty)
    assert acc > 0.85, f"test accuracy {acc:.3f}"
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    assert all(np.isfinite(losses))
    assert elapsed < 60, f"2 epochs on 5,000 images took {elapsed:.1f} s"


@pytest.mark.parametrize("device", DEVICES)
def test_adam_learns_too(mnist, device):
    x, y, tx, ty = mnist
    mt.manual_seed(1)
    model = mlp(64).to(device)
    train(model, nn.optim.Adam(model.parameters(), lr=2e-3), x[:2000], y[:2000], epochs=2,
          device=device)
    assert accuracy(model, tx, ty, device) > 0.80


def test_fusion_on_and_off_train_the_same(mnist):
    x, y, _, _ = mnist
    results = []
    for enabled in (True, False):
        with mt.fusion(enabled):
            mt.manual_seed(0)
            model = mlp(32)
            opt = nn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
            losses = train(model, opt, x[:512], y[:512], epochs=1)
            results.append((losses, [p.numpy().copy() for p in model.parameters()]))
    (l1, p1), (l2, p2) = results
    np.testing.assert_allclose(l1, l2, rtol=1e-5)
    for a, b in zip(p1, p2):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_matches_pytorch_training(mnist, device):
    torch = pytest.importorskip("torch")
    x, y, _, _ = mnist
    x, y = x[:640], y[:640]
    mt.manual_seed(0)
    model = mlp(32)
    tmodel = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(),
                                 torch.nn.Linear(32, 10))
    with torch.no_grad():
        for (_, p), tp in zip(model.named_parameters(), tmodel.parameters()):
            tp.copy_(torch.from_numpy(p.numpy().copy()))
    model.to(device)
    opt = nn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    losses = train(model, opt, x, y, epochs=1, device=device)
    loader = nn.DataLoader(nn.TensorDataset(x, y), batch_size=64, shuffle=True, seed=0)
    tlosses = []
    for xb, yb in loader:  # the same batches, in the same order
        loss = torch.nn.functional.cross_entropy(tmodel(torch.from_numpy(xb.numpy())),
                                                 torch.from_numpy(yb.numpy()))
        topt.zero_grad()
        loss.backward()
        topt.step()
        tlosses.append(loss.item())
    rtol, atol = tolerance(device, 1e-4, 1e-5)
    np.testing.assert_allclose(losses, tlosses, rtol=rtol, atol=atol)
    rtol, atol = tolerance(device, 1e-3, 1e-5)
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        assert p.device == mt.tensor.as_device(device)
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=rtol, atol=atol)


@pytest.mark.usefixtures("fuse_all")  # kernels of a small model, fused
@pytest.mark.parametrize("device", DEVICES)
def test_training_step_kernel_count_is_bounded(device):
    """One MLP step (forward, cross-entropy, backward, SGD-momentum) in a few dozen kernels."""
    mt.manual_seed(0)
    model = mlp(64).to(device)
    opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xb = mt.randn(32, 784, device=device)
    yb = np.arange(32) % 10

    def step():
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    step()  # momentum buffers exist from here on
    with mt.count_kernels(device) as k:
        step()
    assert k["blas"] == 5  # 2 forward matmuls, 3 backward (no grad for the input)
    assert k.total <= 40, k.counts

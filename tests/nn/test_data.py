"""Datasets and DataLoader: coverage, batch sizes, shuffling, seeding, Nodes out."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn

N = 23


def dataset(n=N):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return nn.TensorDataset(x, y)


def epoch_labels(loader):
    return [y.numpy().copy() for _, y in loader]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [1, 5, 23, 50])
def test_every_sample_exactly_once_per_epoch(shuffle, batch_size):
    loader = nn.DataLoader(dataset(), batch_size=batch_size, shuffle=shuffle, seed=0)
    for _ in range(2):
        batches = list(loader)
        labels = np.concatenate([y.numpy() for _, y in batches])
        assert sorted(labels.tolist()) == list(range(N))
        for x, y in batches:  # rows stay paired
            np.testing.assert_array_equal(x.numpy()[:, 0], 3 * y.numpy())
        sizes = [len(y) for _, y in batches]
        assert sizes == [batch_size] * (N // batch_size) + ([N % batch_size] if N % batch_size
                                                            else [])
        assert len(loader) == len(batches)


def test_drop_last():
    loader = nn.DataLoader(dataset(), batch_size=5, drop_last=True)
    sizes = [len(y) for _, y in loader]
    assert sizes == [5, 5, 5, 5] and len(loader) == 4
    assert len(nn.DataLoader(dataset(), batch_size=50, drop_last=True)) == 0
    assert list(nn.DataLoader(dataset(), batch_size=50, drop_last=True)) == []


def test_no_shuffle_keeps_order():
    labels = np.concatenate(epoch_labels(nn.DataLoader(dataset(), batch_size=4)))
    np.testing.assert_array_equal(labels, np.arange(N))


def test_shuffle_differs_between_epochs_and_is_deterministic_for_a_seed():
    a = nn.DataLoader(dataset(), batch_size=4, shuffle=True, seed=11)
    b = nn.DataLoader(dataset(), batch_size=4, shuffle=True, seed=11)
    c = nn.DataLoader(dataset(), batch_size=4, shuffle=True, seed=12)
    a1, a2 = np.concatenate(epoch_labels(a)), np.concatenate(epoch_labels(a))
    b1, b2 = np.concatenate(epoch_labels(b)), np.concatenate(epoch_labels(b))
    c1 = np.concatenate(epoch_labels(c))
    assert not np.array_equal(a1, a2)
    assert not np.array_equal(a1, np.arange(N))
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(a2, b2)
    assert not np.array_equal(a1, c1)


def test_resume_at_an_epoch_sees_the_same_batches():
    a = nn.DataLoader(dataset(), batch_size=4, shuffle=True, seed=3)
    epoch_labels(a)
    want = epoch_labels(a)
    b = nn.DataLoader(dataset(), batch_size=4, shuffle=True, seed=3)
    b.epoch = 1
    for x, y in zip(want, epoch_labels(b)):
        np.testing.assert_array_equal(x, y)


def test_yields_nodes_with_dtypes_kept():
    x, y = next(iter(nn.DataLoader(dataset(), batch_size=4)))
    assert isinstance(x, mt.Node) and isinstance(y, mt.Node)
    assert x.dtype == np.float32 and y.dtype == np.int64
    assert x.shape == (4, 3) and y.shape == (4,)
    assert not x.requires_grad and x.is_leaf


def test_batches_do_not_alias_the_dataset():
    ds = dataset()
    x, _ = next(iter(nn.DataLoader(ds, batch_size=4)))
    x[...] = -1.0
    assert (ds.arrays[0] >= 0).all()


def test_tensor_dataset():
    ds = dataset()
    assert len(ds) == N
    x, y = ds[2]  # an item is a tuple of tensors, as PyTorch's
    assert isinstance(x, mt.Node) and isinstance(y, mt.Node) and y.ndim == 0
    np.testing.assert_array_equal(x.numpy(), [6, 7, 8])
    assert y.item() == 2
    x.numpy()[...] = -1  # a copy: the dataset keeps its values
    np.testing.assert_array_equal(ds[2][0].numpy(), [6, 7, 8])
    nodes = nn.TensorDataset(mt.ones(4, 2), mt.zeros(4))
    assert len(nodes) == 4 and isinstance(nodes[0][0], mt.Node)
    with pytest.raises(ValueError, match="different lengths"):
        nn.TensorDataset(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="at least one"):
        nn.TensorDataset()


class Squares(nn.Dataset):
    """A generic Dataset: computes samples on demand."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.array([i, i * i], np.float32), i % 3


def test_generic_dataset_subclass():
    loader = nn.DataLoader(Squares(), batch_size=4, shuffle=True, seed=1)
    batches = list(loader)
    assert [len(y) for _, y in batches] == [4, 4, 2]
    xs = np.concatenate([x.numpy() for x, _ in batches])
    ys = np.concatenate([y.numpy() for _, y in batches])
    assert sorted(xs[:, 0].tolist()) == list(range(10))
    np.testing.assert_array_equal(xs[:, 1], xs[:, 0] ** 2)
    np.testing.assert_array_equal(ys, xs[:, 0].astype(int) % 3)
    assert isinstance(batches[0][0], mt.Node)


class SingleArray(nn.Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return np.full(2, i, np.float32)


def test_dataset_returning_a_single_array():
    batches = list(nn.DataLoader(SingleArray(), batch_size=2))
    assert len(batches) == 3
    x = batches[0]  # a single Node per batch, as torch yields
    assert isinstance(x, mt.Node)
    np.testing.assert_array_equal(x.numpy(), [[0, 0], [1, 1]])
    assert batches[2].shape == (1, 2)


def test_base_dataset_and_bad_batch_size():
    with pytest.raises(NotImplementedError):
        len(nn.Dataset())
    with pytest.raises(ValueError, match="batch_size"):
        nn.DataLoader(dataset(), batch_size=0)


def test_trains_from_a_loader():
    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 2)).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int64)
    model = nn.Linear(2, 2)
    opt = nn.optim.SGD(model.parameters(), lr=0.5)
    loader = nn.DataLoader(nn.TensorDataset(x, y), batch_size=16, shuffle=True, seed=0)
    for _ in range(20):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    acc = (model(mt.tensor(x)).argmax(1).numpy() == y).mean()
    assert acc > 0.95

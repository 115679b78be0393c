"""Datasets and a DataLoader that batches by fancy indexing (no per-sample Python loop)."""

from __future__ import annotations

import math

import numpy as np

from ..node.node import Node
from ..tensor.tensor import from_array


class Dataset:
    """Anything with ``__len__`` and ``__getitem__`` returning a tuple of arrays."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index):
        raise NotImplementedError


class TensorDataset(Dataset):
    """Samples are rows of equally long arrays (or tensors)."""

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        self.arrays = [np.asarray(a.numpy(writable=False) if isinstance(a, Node) else a)
                       for a in arrays]
        n = len(self.arrays[0])
        if any(len(a) != n for a in self.arrays):
            raise ValueError(f"TensorDataset: arrays have different lengths "
                             f"{[len(a) for a in self.arrays]}")

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)


class DataLoader:
    """Yields batches as tuples of Nodes (one Node when samples are single arrays).

    ``shuffle`` draws a new order each epoch from ``seed`` and the epoch
    number, so the order is reproducible and a resumed run (``loader.epoch =
    k``) sees exactly the batches it would have seen.
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int | None = None, device="cpu"):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset, self.batch_size = dataset, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last
        self.seed = np.random.SeedSequence().entropy if seed is None else seed
        self.epoch = 0
        self.device = device

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def __iter__(self):
        order = self.order(self.epoch)
        self.epoch += 1
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            batch = self._fetch(idx)
            if isinstance(batch, tuple):
                yield tuple(self._node(part) for part in batch)
            else:  # samples were single arrays, not tuples: one Node per batch, as in torch
                yield self._node(batch)

    def _node(self, part) -> Node:
        return Node(from_array(np.ascontiguousarray(part)).to(self.device))

    def _fetch(self, idx: np.ndarray):
        if isinstance(self.dataset, TensorDataset):
            return self.dataset[idx]
        samples = [self.dataset[int(i)] for i in idx]
        if not isinstance(samples[0], (tuple, list)):
            return np.stack(samples)
        return tuple(np.stack(col) for col in zip(*samples))

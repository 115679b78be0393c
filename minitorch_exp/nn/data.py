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

    ``sampler`` (instead of ``shuffle``) gives the indices of each epoch: an
    iterable of indices with a length, such as a ``DistributedSampler`` (each
    process its shard). One with ``set_epoch`` is told the loader's ``epoch``
    before each pass, so resuming with ``loader.epoch = k`` works the same.
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int | None = None, device="cpu",
                 sampler=None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle "
                             "(the sampler decides the order: shuffle it there)")
        self.dataset, self.batch_size = dataset, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last
        self.sampler = sampler
        self.seed = np.random.SeedSequence().entropy if seed is None else seed
        self.epoch = 0
        self.device = device

    def __len__(self) -> int:
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        if self.sampler is not None:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            if isinstance(self.sampler, DistributedSampler):
                return self.sampler.indices()
            return np.fromiter(iter(self.sampler), dtype=np.int64)
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


class DistributedSampler:
    """The indices of one process's shard of a dataset, as ``torch.utils.data``'s.

    Each epoch, the order of all ``len(dataset)`` indices is drawn from ``seed``
    and the epoch (``set_epoch``; a ``DataLoader`` calls it) exactly as a
    ``DataLoader(shuffle=True, seed=seed)`` draws it, then rank ``r`` of
    ``num_replicas`` takes every ``num_replicas``-th index from position ``r``.
    So the shards are disjoint, together they are the whole epoch, and with a
    per-rank batch of ``B / num_replicas`` the ranks' batches ``k`` together are
    exactly batch ``k`` of a single process with batch ``B``.

    The shards have equal length: when the dataset does not divide evenly, the
    order is padded with its own first indices (a few samples seen twice), or
    with ``drop_last`` its tail is dropped. ``num_replicas`` and ``rank`` default
    to the job's (``minitorch_exp.distributed``; 1 and 0 when it is not
    initialized).
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            from .. import distributed as dist
            live = dist.is_initialized()
            num_replicas = (dist.get_world_size() if live else 1) if num_replicas is None \
                else num_replicas
            rank = (dist.get_rank() if live else 0) if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: invalid rank {rank} for {num_replicas} "
                             f"replicas (expected 0 <= rank < num_replicas)")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last:
            self.num_samples = n // num_replicas
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration gives."""
        self.epoch = epoch

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's indices for ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(n)
        else:
            order = np.arange(n)
        if self.total_size > n:  # pad with the start, repeated as often as needed
            order = np.resize(order, self.total_size)
        else:
            order = order[:self.total_size]
        return order[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples

"""Datasets and a DataLoader that batches by fancy indexing (no per-sample Python loop).

PyTorch's ``torch.utils.data`` names (``minitorch_exp.utils.data``): a dataset's items
are what its ``__getitem__`` returns; the DataLoader's ``default_collate`` stacks them
into tensors (Nodes), as PyTorch's does. A ``TensorDataset``, or a ``Subset`` of one,
skips the per-sample loop: its batch is gathered from its arrays in one indexing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..node.node import Node
from ..tensor.creation import default_generator
from ..tensor.tensor import from_array
from .samplers import BatchSampler


class Dataset:
    """Anything with ``__len__`` and ``__getitem__`` returning one sample (tensors, arrays,
    numbers, or tuples and dicts of them)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index):
        raise NotImplementedError


def _as_node(array) -> Node:
    """A copy of ``array`` (a row, a number) as a Node outside the graph."""
    return Node(from_array(np.array(array)))


class TensorDataset(Dataset):
    """Samples are rows of equally long arrays (or tensors); an item is a tuple of
    tensors, one row of each, as PyTorch's."""

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
        return tuple(_as_node(row) for row in self.rows(index))

    def rows(self, index) -> tuple:
        """The rows at ``index`` (an int or an array of them), one array per tensor."""
        return tuple(a[index] for a in self.arrays)


class Subset(Dataset):
    """The items of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index):
        if isinstance(index, (list, np.ndarray)):
            return [self.dataset[int(i)] for i in self.indices[index]]
        return self.dataset[int(self.indices[index])]


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """``dataset`` split at random into Subsets of the given ``lengths``, or fractions of
    its length summing to 1 (the remainder dealt one by one from the first, as PyTorch's).
    ``generator``: a ``numpy.random.Generator``, else the one ``mt.manual_seed`` seeds."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(0 <= f <= 1 for f in lengths) and math.isclose(sum(lengths), 1) \
            and sum(lengths) != n:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError(f"random_split: the lengths {lengths} sum to {sum(lengths)}, the "
                         f"dataset has {n} items")
    order = (generator or default_generator()).permutation(n)
    bounds = np.cumsum([0, *lengths])
    return [Subset(dataset, order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _rows(dataset, idx: np.ndarray):
    """The items at ``idx`` as one array per field, gathered at once: for a TensorDataset
    or a Subset of one; None for any other dataset."""
    if isinstance(dataset, TensorDataset):
        return dataset.rows(idx)
    if isinstance(dataset, Subset):
        return _rows(dataset.dataset, dataset.indices[idx])
    return None


def default_collate(batch: list):
    """Samples stacked into one batch, as PyTorch's ``default_collate``: tensors and NumPy
    arrays into a tensor with a new first dimension, Python ints into an int64 tensor and
    floats into a float64 one; tuples, lists and dicts field by field; strings as a list."""
    first = batch[0]
    if isinstance(first, Node):
        return Node(from_array(np.stack([np.asarray(b.numpy()) for b in batch])))
    if isinstance(first, (np.ndarray, np.generic, bool, int, float)):
        dtype = np.float64 if type(first) is float else None
        return Node(from_array(np.array(batch, dtype=dtype)))
    if isinstance(first, str):
        return list(batch)
    if isinstance(first, Mapping):
        return {key: default_collate([b[key] for b in batch]) for key in first}
    if isinstance(first, Sequence):
        if any(len(b) != len(first) for b in batch):
            raise ValueError("default_collate: every sample of a batch must have the same "
                             "number of fields")
        fields = [default_collate(list(col)) for col in zip(*batch)]
        return tuple(fields) if isinstance(first, tuple) else fields
    raise TypeError(f"default_collate: samples must be tensors, NumPy arrays, numbers, or "
                    f"tuples, lists or dicts of them; found {type(first).__name__}")


def _to_device(batch, device):
    if isinstance(batch, Node):
        return batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


class DataLoader:
    """Yields batches: for samples that are tuples, a tuple of Nodes (one Node when samples
    are single tensors or arrays), made by ``collate_fn`` (``default_collate``).

    ``shuffle`` draws a new order each epoch from ``seed`` and the epoch
    number, so the order is reproducible and a resumed run (``loader.epoch =
    k``) sees exactly the batches it would have seen.

    ``sampler`` (instead of ``shuffle``) gives the indices of each epoch: an
    iterable of indices, such as a ``RandomSampler`` or a ``DistributedSampler``
    (each process its shard); ``batch_sampler`` gives each batch's indices
    instead. Either is read as the batches are made, never ahead (nn/samplers.py).
    One with ``set_epoch`` is told the loader's ``epoch`` before each pass, so
    resuming with ``loader.epoch = k`` works the same.
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int | None = None, device="cpu",
                 sampler=None, collate_fn=None, num_workers: int = 0,
                 pin_memory: bool = False, batch_sampler=None, **worker_options):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle "
                             "(the sampler decides the order: shuffle it there)")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None
                                          or drop_last):
            raise ValueError("DataLoader: batch_sampler option is mutually exclusive with "
                             "batch_size, shuffle, sampler, and drop_last")
        _check_worker_options(worker_options)
        self.dataset, self.batch_size = dataset, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.seed = np.random.SeedSequence().entropy if seed is None else seed
        self.epoch = 0
        self.device = device
        self.collate_fn = collate_fn
        # num_workers and pin_memory are accepted for PyTorch's scripts: batches here are
        # gathered in this process (a TensorDataset's by one indexing)

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
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

    def _index_batches(self, epoch: int):
        """Each batch's indices, drawn from the sampler as they are asked for."""
        sampler = self.batch_sampler if self.batch_sampler is not None else self.sampler
        if sampler is None or isinstance(sampler, DistributedSampler):
            order = self.order(epoch)
            return (order[b * self.batch_size:(b + 1) * self.batch_size]
                    for b in range(len(self)))
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        if self.batch_sampler is not None:
            return iter(sampler)
        return iter(BatchSampler(sampler, self.batch_size, self.drop_last))

    def __iter__(self):
        batches = self._index_batches(self.epoch)
        self.epoch += 1
        for idx in batches:
            idx = np.asarray(idx, dtype=np.int64)
            rows = _rows(self.dataset, idx) if self.collate_fn is None else None
            if rows is not None:
                yield tuple(self._node(part) for part in rows)
                continue
            collate = self.collate_fn or default_collate
            yield _to_device(collate([self.dataset[int(i)] for i in idx]), self.device)

    def _node(self, part) -> Node:
        return Node(from_array(np.ascontiguousarray(part)).to(self.device))


#: PyTorch's DataLoader options for worker processes: accepted, as ``num_workers`` is
#: (batches are made in this process), when they do not ask for something else.
_WORKER_OPTIONS = {"timeout": 0, "worker_init_fn": None, "multiprocessing_context": None,
                   "generator": None, "prefetch_factor": None, "persistent_workers": False,
                   "pin_memory_device": "", "in_order": True}


def _check_worker_options(options: dict) -> None:
    unknown = sorted(set(options) - set(_WORKER_OPTIONS))
    if unknown:
        raise TypeError(f"DataLoader got unexpected keyword arguments {unknown}")
    if options.get("generator") is not None:
        raise NotImplementedError("DataLoader(generator=...): pass seed= for shuffle, or a "
                                  "RandomSampler(dataset, generator=...) as sampler=")


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

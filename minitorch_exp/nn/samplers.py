"""Samplers, as ``torch.utils.data``'s: which dataset indices an epoch visits, in what
order, drawn lazily -- a ``RandomSampler`` of 10**10 draws starts at once and holds a
chunk of indices at a time, never the whole order.

``generator``: an ``mt.Generator`` (PyTorch's ``torch.Generator``; it is a
``numpy.random.Generator``, and a NumPy one is taken too); None draws from the one
``mt.manual_seed`` seeds, when the iteration starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice

from ..tensor.creation import default_generator

#: Indices a RandomSampler with replacement draws at once.
CHUNK = 1024


class Sampler:
    """Base class: ``__iter__`` gives indices (or, for a batch sampler, lists of them)."""

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """Random indices of ``data_source``: a permutation of them (``num_samples`` beyond
    its length: permutation after permutation), or with ``replacement``, ``num_samples``
    independent draws (default: its length)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None):
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"num_samples should be a positive integer, got {num_samples!r}")
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator

    @property
    def num_samples(self) -> int:
        n = self._num_samples
        return len(self.data_source) if n is None else n

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        rng = self.generator or default_generator()
        n, left = len(self.data_source), self.num_samples
        while left > 0:
            chunk = rng.integers(0, n, min(CHUNK, left)) if self.replacement \
                else rng.permutation(n)[:left]
            left -= len(chunk)
            yield from chunk.tolist()


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last one shorter, or dropped
    with ``drop_last``), taken from it as they are needed."""

    def __init__(self, sampler: Iterable, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer, got {batch_size!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        indices = iter(self.sampler)
        while batch := list(islice(indices, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

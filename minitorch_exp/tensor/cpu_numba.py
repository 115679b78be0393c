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

How a Plan becomes that loop:

1. Layouts. dst and every leaf (broadcast to dst's shape) are put in dst's
   memory order and adjacent dims merged (``codegen.iteration_layout``): a
   contiguous tensor of any shape is one loop; a broadcast bias is two.
2. Operands are passed as their flat storage arrays plus an offset and
   strides, so views of any kind need no copy. Sizes, strides and scalars
   are arguments, never constants, so a new shape or a new learning rate
   reuses the compiled kernel.
3. The innermost stride of each operand is part of the kernel's key: ``1``
   (indexed ``p + i`` so LLVM vectorizes), ``0`` (loaded once, outside the
   loop), ``s`` (any other stride), or ``d`` for a leaf that *is* dst at the
   same layout (``w`` above): it is read from ``out`` at the index being
   written, which is safe per element and lets LLVM vectorize without alias
   checks. Positions are cast to unsigned so numba emits no negative-index
   wraparound, which otherwise stops vectorization.
4. Each instruction is one local (``codegen.render_body``); the saver
   combines the last one with dst.

Kernels are Python modules written to a per-user cache directory (named by
the hash of their source) and compiled with ``numba.njit(cache=True)``, so a
second run of a script compiles nothing (``compile_stats()`` counts).
``kernel_cache`` keeps them: a directory anyone else can write is not used
(kernels are then compiled in memory), and each file is checked against the
hash in its name before it is run. Each
module holds a serial and a ``prange`` variant; the parallel one is compiled
only when a large enough array first needs it. Cold, a kernel compiles in
~0.18 s (serial) / ~0.55 s (parallel); warm, loading one takes ~5 ms, after
~0.2 s once per process for numba itself.

Reductions (sum, mean, max, min) are one kernel over the fused input: kept
dims outside, reduced dims inside accumulating into a local (float32 sums in
float64). A column reduction (the reduced dims stride further than the kept
ones, e.g. a bias gradient ``g.sum(0)``) turns the loops round so memory is
read in order: reduced outside, kept inside, each row of input added into a
row of accumulators (a 128x256 float32 column sum: 3.3 us, NumPy 5.5 us).
argmax goes to the NumPy evaluator, and so do max/min of large inputs:
their NaN-propagating compare does not vectorize (20x slower than NumPy's
SIMD maximum.reduce at 1e7).

Which evaluator, measured on the 2-core reference machine
(``benchmarks/bench_update.py --ops --threshold --threading``):

* Ops LLVM cannot vectorize here (exp, log, tanh, pow: one libm call per
  element, 4-36x slower than NumPy's SIMD ufuncs) make a Plan on large arrays
  run on the NumPy evaluator when the ``OP_COST_NS`` model says so. Arithmetic,
  comparisons, where and sqrt vectorize and stay here (3-60x faster).
* Numba's threads come from TBB where it loads (the ``tbb`` wheel is a
  dependency on Linux x86_64; ``backends.py`` loads its library by path,
  because pip puts it where the loader does not look), else from workqueue;
  never from GNU OpenMP unless ``NUMBA_THREADING_LAYER`` names it. The choice
  is made when the package is imported, before numba starts its threads.
  Measured with 2 threads, a 2^20-element seed kernel and a 256x256 matmul
  (``--threading``): TBB hands half a loop to its other thread in a few us
  (the kernel: 84 us; workqueue 345 us, its sleeping threads take ~100 us to
  wake on this VM) and its idle thread leaves the core to BLAS (kernel then
  matmul: 390 us; workqueue 536 us). OpenMP wakes its threads as fast, but
  they spin while idle and take the cores from the next BLAS call: kernel then
  matmul 8 ms, and the MNIST MLP step (784-512-256-10, batch 128) 14 ms
  instead of 4.5 ms. ``GOMP_SPINCOUNT=1000`` removes that (416 us), but it is
  process-wide and read once, when libgomp loads: PyTorch's threads in the
  same process get it too (torch.compile's Adam step 5-15% slower), and if
  anything loaded libgomp first it does not apply at all.
* ``prange`` from ``parallel_min()`` elements, by layer (``--threshold``, 2
  threads, kernel calls alone): TBB and OpenMP 3 x 2^15 -- between the
  crossover of Adam's three statements run as three kernels (2^16: 0.90x of
  serial time) and the seed's (2^17: 0.87x; 1.6x at 2^16); from 2^19 on the
  split takes 0.5-0.65x. Elements rather than element-operations, so that
  statements over the same arrays all split or all stay on one core: when
  Adam's cheap ``m`` statement ran on one core and its ``v`` and ``w``
  statements split (1e5 elements, by element-operations), the arrays' cached
  halves moved between the cores every step and the three took 88-104 us,
  against 81-89 us all on one core and 67-82 us all split. workqueue 2^24:
  below it, splitting lost or tied (1.1-11x of serial time up to 2^20,
  0.8-1.13x up to 2^23).
  ``MINITORCH_PARALLEL_MIN`` or ``set_parallel_min`` overrides. workqueue cannot
  be entered from two threads at once, but these kernels hold the GIL, so it
  never is.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numba
import numpy as np

from . import caches, dtypes, kernel_cache
from . import codegen as C
from . import layout as L
from .backend_contract import EvaluatorLaunch, Lowered
from .counters import _COUNTS, count
from .cpu_numpy import NumpyBackend, overlaps
from .kernel_cache import cache_dir  # noqa: F401 - cpu_numba.cache_dir still works
from .ops import OPS
from .tokens import memo

MAX_DIMS = 4
# Elements from which the prange variant runs, by numba's threading layer (module
# docstring; ``bench_update.py --threshold``). ``MINITORCH_PARALLEL_MIN`` or
# ``set_parallel_min`` overrides; None: this layer's, once numba's threads start.
PARALLEL_MIN_BY_LAYER = {"tbb": 3 << 15, "omp": 3 << 15, "workqueue": 1 << 24}
_env_parallel_min = os.environ.get("MINITORCH_PARALLEL_MIN")
PARALLEL_MIN: int | None = int(_env_parallel_min) if _env_parallel_min else None


def parallel_min() -> int:
    """The elements from which a kernel splits over numba's threads."""
    global PARALLEL_MIN
    if PARALLEL_MIN is None:
        numba.get_num_threads()  # starts numba's threads, which fixes the layer
        PARALLEL_MIN = PARALLEL_MIN_BY_LAYER.get(numba.threading_layer(), 1 << 24)
    return PARALLEL_MIN


def set_parallel_min(elements: int | None) -> None:
    """Split kernels over at least ``elements`` elements (None: the layer's measured
    default). Launches worked out under the old value are forgotten."""
    global PARALLEL_MIN
    PARALLEL_MIN = elements
    caches.invalidate("numba parallel threshold")  # launches hold may_parallel

# LLVM vectorizes arithmetic, comparisons and sqrt, but exp, log and tanh
# become one libm call per element (no vector math library here), while
# NumPy's ufuncs run SIMD loops for them. Measured ns per element (float32,
# one core; ``benchmarks/bench_update.py --ops``) for (numba kernel, NumPy
# block pass) decide per Plan which evaluator runs arrays of NUMPY_FROM or more.
OP_COST_NS = {"exp": (3.9, 0.75), "log": (4.2, 0.75), "tanh": (17.0, 0.5),
              "sigmoid": (8.8, 5.4), "pow": (8.8, 1.0), "where": (0.1, 6.7)}
OTHER_OP_COST_NS = (0.05, 0.3)
USER_OP_COST_NS = (4.0, 0.75)  # a numpy_fn is typically a ufunc or two
NUMPY_FROM = 1 << 14

_STATS = {"generated": 0}
_DISPATCHERS: list = []
_LOCK = threading.Lock()


# ---- elementwise kernel source -----------------------------------------------

def kernel_source(plan, ndim: int, saver: str = "=", kinds: tuple[str, ...] | None = None,
                  dst_dtype=None) -> str:
    """The Python module compiled for ``plan`` over ``ndim`` merged dims.

    ``kinds`` gives each operand's innermost stride kind, dst first (see the
    module docstring); by default every operand is unit-stride. ``dst_dtype``
    defaults to the Plan's result dtype.
    """
    kinds = kinds or ("1",) * (1 + plan.n_leaves)
    return group_source([plan], ndim, [saver], kinds, [np.dtype(dst_dtype or plan.dtype)])


def group_source(plans, ndim: int, savers, kinds: tuple[str, ...], dst_dtypes) -> str:
    """The module for several statements run one after another *per element*.

    Statement ``k`` writes ``plans[k]`` into dst ``k`` with ``savers[k]``.
    ``kinds`` are each dst's innermost stride kind, then each statement's
    leaves'. ``d<j>`` (``d`` when there is one statement) marks a leaf -- or a
    later dst -- that is dst ``j`` at the same element: it is read from there,
    or from the local holding what an earlier statement stored there, so each
    statement sees the ones before it and the loop still vectorizes. One
    statement gives exactly the kernel of ``kernel_source``.
    """
    functions = [_elementwise_function(name, plans, ndim, savers, kinds, dst_dtypes, parallel)
                 for name, parallel in (("serial", False), ("parallel", True))]
    return _module_text(plans, functions)


def _elementwise_function(name, plans, ndim, savers, kinds, dst_dtypes, parallel) -> list[str]:
    one = len(plans) == 1  # a single statement keeps the short names: out, p, in0, x0
    outs = ["out"] if one else [f"out{j}" for j in range(len(plans))]
    ins = [[f"in{i}" if one else f"in{k}_{i}" for i in range(plan.n_leaves)]
           for k, plan in enumerate(plans)]
    prefixes = [""] if one else [f"a{k}_" for k in range(len(plans))]
    kind_of = dict(zip(outs + [arr for arrs in ins for arr in arrs], kinds))
    arrays = [arr for arr, kind in kind_of.items() if kind[0] != "d"]
    params = [f"n{d}" for d in range(ndim)]
    for arr in arrays:
        params += [arr, f"{arr}_o"] + _stride_params(arr, ndim, kind_of[arr])
    params += [name for plan, pre in zip(plans, prefixes) for name in C.scalar_names(plan, pre)]
    lines = [f"def {name}({', '.join(params)}):"]
    base = {arr: f"{arr}_o" for arr in arrays}
    for d in range(ndim - 1):  # outer loops: advance each operand's base position
        lines.append(_loop(1 + d, f"i{d}", f"n{d}", parallel and d == 0))
        for arr in arrays:
            lines.append(_pad(2 + d) + f"{arr}_p{d} = {base[arr]} + i{d} * {arr}_s{d}")
            base[arr] = f"{arr}_p{d}"
    inner = ndim - 1
    lines += [_pad(ndim) + f"{pre}x{i} = {arr}[np.uint64({base[arr]})]"
              for arrs, pre in zip(ins, prefixes) for i, arr in enumerate(arrs)
              if kind_of[arr] == "0"]
    lines.append(_loop(ndim, f"i{inner}", f"n{inner}", parallel and inner == 0))
    at = {arr: _position(arr, base[arr], kind, inner)
          for arr, kind in kind_of.items() if kind[0] != "d"}
    body = _element_body(plans, savers, dst_dtypes, outs, ins, prefixes, kind_of, at)
    return lines + [_pad(ndim + 1) + line for line in body]


def _element_body(plans, savers, dst_dtypes, outs, ins, prefixes, kind_of, at) -> list[str]:
    """What one element does: each statement loads its leaves and computes; then
    every statement's result is stored.

    ``at`` is each array's position expression. A ``d<j>`` operand is the element
    dst ``j`` is at: read from there, or from the local an earlier statement stored.
    """
    one = len(plans) == 1
    spots = ["p"] if one else [f"p{j}" for j in range(len(plans))]
    home = [_same_dst(kind_of[out], j) for j, out in enumerate(outs)]
    body = [f"{spots[j]} = np.uint64({at[out]})" for j, out in enumerate(outs) if home[j] == j]
    stored: dict[int, str] = {}  # dst j -> the local last stored there
    stores = []
    for k, plan in enumerate(plans):
        for i, arr in enumerate(ins[k]):
            kind = kind_of[arr]
            if kind[0] == "d":
                j = _same_dst(kind, None)
                body.append(f"{prefixes[k]}x{i} = {stored.get(j, f'{outs[j]}[{spots[j]}]')}")
            elif kind != "0":  # "0" was loaded once, outside the loop
                body.append(f"{prefixes[k]}x{i} = {arr}[np.uint64({at[arr]})]")
        j = home[k]
        target = f"{outs[j]}[{spots[j]}]"
        rendered, value = _body_and_value(plan, savers[k], dst_dtypes[k], prefixes[k],
                                          stored.get(j, target))
        body += rendered
        if one:
            stores.append(f"{target} = {value}")
        else:  # keep what is stored in a local: later statements read it from there
            stored[j] = f"{prefixes[k]}r"
            body.append(f"{stored[j]} = {value}")
            stores.append(f"{target} = {stored[j]}")
    # Every store comes after every load: a load after a store to an array the
    # compiler cannot prove distinct has to wait for it (measured: Adam's three
    # statements 1.2x slower per element with each store right after its statement).
    return body + stores


def _same_dst(kind: str, default):
    """The dst a ``d<j>`` kind names (``d`` alone: dst 0); ``default`` for other kinds."""
    return int(kind[1:] or 0) if kind[0] == "d" else default


def _stride_params(arr: str, ndim: int, kind: str) -> list[str]:
    """Stride arguments of one operand; a unit or zero innermost stride is implied."""
    dims = range(ndim) if kind == "s" else range(ndim - 1)
    return [f"{arr}_s{d}" for d in dims]


def _position(arr: str, base: str, kind: str, inner: int) -> str:
    if kind == "1":
        return f"{base} + i{inner}"
    return f"{base} + i{inner} * {arr}_s{inner}"


def _body_and_value(plan, saver, dst_dtype, prefix: str, current: str) -> tuple[list[str], str]:
    """The Plan's lines, and what the saver stores where dst holds ``current``."""
    body, result, result_dtype = C.render_body(plan, C.PYTHON, prefix)
    value = C.saver_value(C.PYTHON, plan, result, result_dtype, dst_dtype)
    return body, _stored(saver, value, result_dtype, dst_dtype, current)


def _store(saver: str, value: str, value_dtype, dst_dtype) -> str:
    """``out[p] = ...``: the saver's result, converted to dst's dtype when it differs."""
    return f"out[p] = {_stored(saver, value, value_dtype, dst_dtype, 'out[p]')}"


def _stored(saver: str, value: str, value_dtype, dst_dtype, current: str) -> str:
    if saver == "=" and value_dtype == dst_dtype:
        return value
    return C.PYTHON.convert(C.saved_expr(saver, current, value), dst_dtype)


def _loop(depth: int, var: str, size: str, parallel: bool) -> str:
    return _pad(depth) + f"for {var} in {'prange' if parallel else 'range'}({size}):"


def _pad(depth: int) -> str:
    return "    " * depth


def _module_text(plans, functions: list[list[str]], fastmath: bool = False) -> str:
    user_ops = sorted({line for plan in plans for line in _user_op_fingerprints(plan)})
    # A kernel that calls a user's function is not cached on disk: numba would record
    # that function by its module, which another process may not be able to import
    # (a script's __main__, code run with exec); it is compiled once per process.
    cache = "False" if user_ops else "True"
    options = f'cache={cache}, error_model="numpy"' + \
        (', fastmath={"reassoc"}' if fastmath else "")
    header = ["# Generated by minitorch_exp.tensor.cpu_numba -- do not edit."]
    for k, plan in enumerate(plans):
        header.append("# Plan:" if len(plans) == 1 else f"# Plan of statement {k}:")
        header += ["#" + line for line in plan.describe().splitlines()]
    header += [f"# {line}" for line in user_ops]
    header += ["import math", "", "import numpy as np", "from numba import njit, prange",
               "from numpy import log as _log, sqrt as _sqrt", ""]
    parts = []
    for fn in functions:
        parallel = fn[0].startswith("def parallel")
        deco = f"@njit({options}{', parallel=True' if parallel else ''})"
        parts.append("\n".join(["", deco, *fn]))
    return "\n".join(header) + "\n".join(parts) + "\n"


# ---- reduction kernel source -------------------------------------------------

def reduce_source(plan, op: str, n_kept: int, n_reduced: int, saver: str = "=",
                  kinds: tuple[str, ...] | None = None, dst_dtype=None,
                  by_columns: bool = False) -> str:
    """The Python module compiled for ``op`` (sum, mean, max, min) over a fused input.

    Kept dims are the outer loops (one output each, ``prange`` over the first);
    reduced dims are the inner loops, accumulating into a local. With no kept
    dim, the parallel variant splits the outermost reduced loop into chunks
    whose partial results are combined at the end. ``by_columns`` (the reduced
    dims stride further than the kept ones, ``codegen.reduces_by_columns``)
    turns the loops round: reduced outside, kept inside, accumulating into a
    row per chunk of the outermost reduced loop, so memory is read in order.
    ``kinds`` are the leaves' stride kinds (``1`` or ``s``) in the innermost loop.

    Sums compile with ``fastmath={"reassoc"}``: without it LLVM must add in
    order, one element per add latency; with it the float64 accumulation is
    vectorized (faster than NumPy's pairwise float32 sum). The fused body may
    then be reassociated too, which changes results only within rounding.
    """
    kinds = kinds or ("1",) * plan.n_leaves
    result_dtype = C.reduce_result_dtype(op, plan.dtype)
    dst_dtype = np.dtype(dst_dtype or result_dtype)
    spec = _ReduceSpec(plan, op, n_kept, n_reduced, saver, kinds, result_dtype, dst_dtype,
                       by_columns)
    functions = [spec.function(name, parallel)
                 for name, parallel in (("serial", False), ("parallel", True))]
    return _module_text([plan], functions, fastmath=op in ("sum", "mean"))


def _identity(op: str, dtype: np.dtype) -> str:
    if op in ("sum", "mean"):
        return f"{C.PYTHON.type_name(dtype)}(0)"
    if dtype == dtypes.bool_:
        return "False" if op == "max" else "True"
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        return f"{C.PYTHON.type_name(dtype)}({info.min if op == 'max' else info.max})"
    return f"{C.PYTHON.type_name(dtype)}({'-' if op == 'max' else ''}np.inf)"


class _ReduceSpec:
    """Everything one reduction kernel's source depends on."""

    def __init__(self, plan, op, n_kept, n_reduced, saver, kinds, result_dtype, dst_dtype,
                 by_columns):
        self.plan, self.op, self.saver = plan, op, saver
        self.n_kept, self.n_reduced, self.kinds = n_kept, n_reduced, kinds
        self.by_columns = by_columns
        self.result_dtype, self.dst_dtype = result_dtype, dst_dtype
        self.acc_dtype = C.accumulator_dtype(op, plan.dtype)
        self.leaves = [f"in{i}" for i in range(plan.n_leaves)]

    def params(self) -> list[str]:
        k, r = self.n_kept, self.n_reduced
        params = [f"k{d}" for d in range(k)] + [f"r{d}" for d in range(r)]
        params += ["out", "out_o"] + [f"out_s{d}" for d in range(k)]
        for arr, kind in zip(self.leaves, self.kinds):  # a unit innermost stride is implied
            unit = int(kind == "1")
            params += [arr, f"{arr}_o"]
            params += [f"{arr}_k{d}" for d in range(k - unit if self.by_columns else k)]
            params += [f"{arr}_r{d}" for d in range(r if self.by_columns else r - unit)]
        return params + C.scalar_names(self.plan) + ["count", "chunks"]

    def function(self, name: str, parallel: bool) -> list[str]:
        lines = [f"def {name}({', '.join(self.params())}):"]
        if self.by_columns:
            return lines + self._by_columns(parallel)
        base = {arr: f"{arr}_o" for arr in ["out", *self.leaves]}
        lines += self._kept_loops(1, base, self.n_kept, parallel)
        depth = 1 + self.n_kept
        if self.n_kept:
            lines += self._accumulate(depth, base, chunked=False)
            lines += [_pad(depth) + line for line in self._store(base["out"])]
        else:
            lines += self._chunked(depth, base, parallel)
        return lines

    def _chunked(self, depth, base, parallel) -> list[str]:
        """Full reduction: chunks of the outermost reduced loop, then their combination."""
        acc = C.PYTHON.type_name(self.acc_dtype)
        lines = [_pad(depth) + line for line in (
            f"partial = np.empty(chunks, {acc})",
            "step = (r0 + chunks - 1) // chunks")]
        lines.append(_loop(depth, "c", "chunks", parallel))
        lines += self._accumulate(depth + 1, base, chunked=True)
        lines.append(_pad(depth + 1) + "partial[c] = acc")
        lines.append(_pad(depth) + f"acc = {_identity(self.op, self.acc_dtype)}")
        lines.append(_loop(depth, "c", "chunks", False))
        lines += [_pad(depth + 1) + line for line in self._combine("partial[c]")]
        return lines + [_pad(depth) + line for line in self._store(base["out"])]

    def _by_columns(self, parallel) -> list[str]:
        """Chunks of the outermost reduced loop, each folding its rows of input into its
        own row of accumulators (kept loops innermost); then the rows' combination."""
        acc = C.PYTHON.type_name(self.acc_dtype)
        kept = " * ".join(f"k{d}" for d in range(self.n_kept))
        lines = [_pad(1) + f"partial = np.empty((chunks, {kept}), {acc})",
                 _pad(1) + "step = (r0 + chunks - 1) // chunks",
                 _loop(1, "c", "chunks", parallel),
                 _pad(2) + "row = partial[c]",
                 _pad(2) + f"row[:] = {_identity(self.op, self.acc_dtype)}"]
        base = {arr: f"{arr}_o" for arr in self.leaves}
        depth = 2
        for d in range(self.n_reduced):
            bounds = "range(c * step, min(r0, (c + 1) * step))" if d == 0 else f"range(r{d})"
            lines.append(_pad(depth) + f"for j{d} in {bounds}:")
            depth += 1
            for arr in self.leaves:
                lines.append(_pad(depth) + f"{arr}_q{d} = {base[arr]} + j{d} * {arr}_r{d}")
                base[arr] = f"{arr}_q{d}"
        inner = self.n_kept - 1
        lines += self._kept_loops(depth, base, inner)
        depth += self.n_kept
        body = []
        for i, (arr, kind) in enumerate(zip(self.leaves, self.kinds)):
            step = f"i{inner}" if kind == "1" else f"i{inner} * {arr}_k{inner}"
            body.append(f"x{i} = {arr}[np.uint64({base[arr]} + {step})]")
        rendered, result, _ = C.render_body(self.plan, C.PYTHON)
        body += rendered + self._combine(result, "row[a]")
        lines += [_pad(depth) + line for line in [self._flat_index(), *body]]
        out = {"out": "out_o"}
        lines += self._kept_loops(1, out, self.n_kept)
        lines += [_pad(1 + self.n_kept) + line for line in (
            self._flat_index(), f"acc = {_identity(self.op, self.acc_dtype)}",
            "for c in range(chunks):",
            *["    " + line for line in self._combine("partial[c, a]")],
            *self._store(out["out"]))]
        return lines

    def _kept_loops(self, depth, base: dict, n_positioned: int, parallel=False) -> list[str]:
        """The kept loops (``prange`` over the first when ``parallel``), moving each array
        of ``base`` to its position in the first ``n_positioned`` of them."""
        lines = []
        for d in range(self.n_kept):
            lines.append(_loop(depth + d, f"i{d}", f"k{d}", parallel and d == 0))
            if d < n_positioned:
                for arr in base:
                    stride = f"{arr}_s{d}" if arr == "out" else f"{arr}_k{d}"
                    lines.append(_pad(depth + d + 1) +
                                 f"{arr}_p{d} = {base[arr]} + i{d} * {stride}")
                    base[arr] = f"{arr}_p{d}"
        return lines

    def _flat_index(self) -> str:
        """``a``: the kept loops' position as one index into a row of accumulators."""
        index = "i0"
        for d in range(1, self.n_kept):
            index = f"{index if d == 1 else f'({index})'} * k{d} + i{d}"
        return f"a = np.uint64({index})"

    def _accumulate(self, depth, base, chunked: bool) -> list[str]:
        lines = [_pad(depth) + f"acc = {_identity(self.op, self.acc_dtype)}"]
        base = dict(base)
        inner = self.n_reduced - 1
        for d in range(self.n_reduced):
            bounds = "range(c * step, min(r0, (c + 1) * step))" if chunked and d == 0 \
                else f"range(r{d})"
            lines.append(_pad(depth) + f"for j{d} in {bounds}:")
            depth += 1
            if d == inner:
                break
            for arr in self.leaves:
                lines.append(_pad(depth) + f"{arr}_q{d} = {base[arr]} + j{d} * {arr}_r{d}")
                base[arr] = f"{arr}_q{d}"
        body = []
        for i, (arr, kind) in enumerate(zip(self.leaves, self.kinds)):
            step = f"j{inner}" if kind == "1" else f"j{inner} * {arr}_r{inner}"
            body.append(f"x{i} = {arr}[np.uint64({base[arr]} + {step})]")
        rendered, result, _ = C.render_body(self.plan, C.PYTHON)
        body += rendered + self._combine(result)
        return lines + [_pad(depth) + line for line in body]

    def _combine(self, value: str, acc: str = "acc") -> list[str]:
        """Fold ``value`` into ``acc``; max and min propagate NaN as NumPy does."""
        v = f"v = {C.PYTHON.convert(value, self.acc_dtype)}"
        if self.op in ("sum", "mean"):
            return [v, f"{acc} = {acc} + v"]
        op = OPS["maximum" if self.op == "max" else "minimum"]
        return [v, f"{acc} = " + C.PYTHON.apply(op, ["v", acc], self.acc_dtype)]

    def _store(self, out_base: str) -> list[str]:
        value = C.PYTHON.convert("acc / count" if self.op == "mean" else "acc",
                                 self.result_dtype)
        return [f"p = np.uint64({out_base})",
                _store(self.saver, value, self.result_dtype, self.dst_dtype)]


# ---- compiled modules on disk ------------------------------------------------

def load_module(source: str, bindings: dict):
    """The kernel module of ``source`` (``kernel_cache.load_module``: from the checked
    cache directory, or compiled in memory), counted for ``compile_stats``."""
    module = kernel_cache.load_module(source, bindings)
    _STATS["generated"] += 1
    _DISPATCHERS.extend([module.serial, module.parallel])
    return module


def compile_stats() -> dict[str, int]:
    """Kernels generated, compiled from scratch, and loaded from numba's disk cache."""
    compiled = sum(sum(d.stats.cache_misses.values()) for d in _DISPATCHERS)
    loaded = sum(sum(d.stats.cache_hits.values()) for d in _DISPATCHERS)
    return {"generated": _STATS["generated"], "compiled": compiled, "loaded": loaded}


# ---- user ops ----------------------------------------------------------------

class UserOpCompileError(TypeError):
    """A user op's ``numpy_fn`` could not be compiled for scalars by numba."""


_USER_FUNCTIONS: dict[tuple, object] = {}


def _fingerprint(fn) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    return hashlib.sha256(code.co_code + repr((code.co_consts, code.co_names)).encode()
                          ).hexdigest()[:16]


def _user_op_fingerprints(plan) -> list[str]:
    """One line per user op, so a changed numpy_fn gets a new kernel file."""
    names = sorted({ins.op for ins in plan.instrs if ins.op in OPS and OPS[ins.op].py is None})
    return [f"user op {name}: {_fingerprint(OPS[name].numpy)}" for name in names]


def _scalar_function(op):
    """``op.numpy`` compiled by numba for scalars, checked for each compute dtype used.

    Keyed by the function object: two closures with the same code differ by their cells.
    """
    key = (op.name, op.numpy)
    fn = _USER_FUNCTIONS.get(key)
    if fn is None:
        py = op.numpy
        if isinstance(py, np.ufunc):
            ufunc = py
            py = lambda *args: ufunc(*args)  # noqa: E731 - numba compiles ufunc calls
        fn = _USER_FUNCTIONS[key] = numba.njit(error_model="numpy")(py)
    return fn


def _user_bindings(plan) -> dict:
    bindings = {}
    for ins in plan.instrs:
        op = OPS.get(ins.op)
        if op is None or op.py is not None:
            continue
        fn = _scalar_function(op)
        try:  # a trial call types and compiles it; ``out=None`` is simply omitted
            fn(*[ins.compute.type(1)] * op.arity)
        except Exception as err:
            raise UserOpCompileError(
                f"user op {op.name!r}: numba could not compile its numpy_fn for "
                f"{ins.compute.name} scalars. For the numba CPU backend a user op's numpy_fn "
                "must also work on scalars in nopython mode (plain arithmetic and np ufuncs, "
                "no out= handling or array-only calls); or use set_cpu_backend('numpy'). "
                f"numba said: {str(err).splitlines()[0]}") from err
        bindings[C.user_op_symbol(op.name)] = fn
    return bindings


# ---- the backend -------------------------------------------------------------

class NumbaBackend:
    """Evaluates Plans on the CPU with one numba-compiled loop each."""

    name = "numba"

    def __init__(self):
        self.fallback = NumpyBackend()

    def elementwise(self, plan, dst, leaves, scalars, saver: str):
        """Run the Plan's kernel; return ``(function, args)`` that repeat exactly this call,
        or None when a repeat would differ (a private copy, the NumPy fallback)."""
        return self.launch(plan, dst, leaves, saver).run([dst, *leaves], scalars)

    def launch(self, plan, dst, leaves, saver: str):
        """The ``Launch`` of this plan, saver and layouts (``backends.launch_for``)."""
        return _elementwise_launch(plan, dst, leaves, saver) or \
            EvaluatorLaunch(self.fallback, plan, saver)

    def group_launch(self, dsts, plans, leaves, savers) -> Launch | None:
        """The ``Launch`` of statements writing ``dsts`` (all statements' ``leaves``) in
        one loop, or None when they cannot share one (``engine.assign_all`` keeps it)."""
        n = dsts[0].numel()
        if n >= NUMPY_FROM and any(numpy_is_faster(plan) for plan in plans):
            return None
        loops = _plan_group_loops(dsts, leaves)
        if loops is None:
            return None
        key = (tuple(plans), len(loops.shape), tuple(savers), loops.kinds,
               tuple(d.dtype.char for d in dsts))
        kernel = _GROUP_KERNELS.get(key)
        if kernel is None:
            try:
                kernel = _GROUP_KERNELS[key] = _group_kernel(plans, key, savers, dsts)
            except UserOpCompileError:
                return None  # each statement alone then says why, once
        operands = len(dsts) + len(leaves)
        return _launch(kernel, loops.shape, loops.tails, (False,) * operands, n)

    def dot(self, dst, a, b, saver: str):
        return self.fallback.dot(dst, a, b, saver)

    def reduce(self, dst, e, saver: str, lowered: Lowered):
        """Run the reduction's kernel; return a repeatable ``(function, args)`` as
        ``elementwise`` does, or None."""
        plan, leaves, scalars = lowered
        large = e.x.numel() >= NUMPY_FROM
        loops = None if _numpy_reduces_better(e.op, large, plan) else \
            _reduce_loops(dst, e, leaves)
        kernel = None if loops is None else _compiled_or_none(plan, lambda: _reduce_kernel(
            plan, e.op, len(loops.kept), len(loops.reduced), saver, loops.kinds, dst.dtype,
            loops.by_columns))
        if kernel is None:
            return self.fallback.reduce(dst, e, saver, lowered)
        count("cpu", "reduce")
        if dst.numel() == 0:
            return None
        args = [*loops.kept, *loops.reduced, dst.storage.data, *loops.out_tail]
        for t, copy, tail in zip(leaves, loops.copies, loops.tails):
            args += [_private_copy(t) if copy else t.storage.data, *tail]
        parallel = _go_parallel(e.x.numel())
        chunks = _chunks(loops, parallel)
        args += [*scalars, float(C.reduce_count(e.x.shape, e.axes)), chunks]  # 0: mean is nan
        fn = kernel.parallel if parallel else kernel.serial
        fn(*args)
        return None if True in loops.copies else (fn, args)


def _chunks(loops, parallel: bool) -> int:
    """How many pieces a reduction's outermost reduced loop is cut into: one per thread
    for a column reduction (each piece has a row of accumulators), four per thread
    for a full one (the prange balances them), else one (the kept loop is the prange)."""
    if parallel and loops.by_columns:
        return numba.get_num_threads()
    if parallel and not loops.kept:
        return numba.get_num_threads() * 4
    return 1


def _compiled_or_none(plan, build):
    """``build()``, or None (with one warning) when a user op cannot be compiled.

    The Plan then runs on the NumPy evaluator, still fused; ``set_cpu_backend('numba')``
    users see why in the warning, which says what the op needs to compile.
    """
    if plan.compiled.get("numba-refused"):
        return None
    try:
        return build()
    except UserOpCompileError as err:
        plan.compiled["numba-refused"] = True
        warnings.warn(f"{err} -- running this expression with the NumPy evaluator instead",
                      RuntimeWarning, stacklevel=_first_frame_outside_package())
        return None


def _first_frame_outside_package() -> int:
    """The ``stacklevel`` that points a warning at the user's line, not at ours."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def numpy_is_faster(plan) -> bool:
    """True when NumPy's SIMD ufuncs beat a scalar-libm kernel on this Plan (see OP_COST_NS)."""
    found = plan.compiled.get("numba-prefers-numpy")
    if found is None:
        numba_ns = numpy_ns = 0.0
        for ins in plan.instrs:
            op = OPS.get(ins.op)
            user = op is not None and op.py is None
            cost = USER_OP_COST_NS if user else OP_COST_NS.get(ins.op, OTHER_OP_COST_NS)
            numba_ns += cost[0]
            numpy_ns += cost[1]
        found = plan.compiled["numba-prefers-numpy"] = numpy_ns < numba_ns
    return found


def _numpy_reduces_better(op: str, large: bool, plan) -> bool:
    """argmax always; max/min (no vectorized NaN-aware compare) and costly Plans when large."""
    return op == "argmax" or (large and (op in ("max", "min") or numpy_is_faster(plan)))


def _go_parallel(elements: int) -> bool:
    return elements >= parallel_min() and numba.get_num_threads() > 1


class Launch:
    """One kernel call worked out for a combination of plan, saver and layouts.

    ``template`` is the argument list with None where an operand's array goes;
    the scalars' values are appended at the call. A training step repeats its
    statements with new tensors of the same layouts, so each statement finds
    its launch with one dict lookup and only fills in the arrays.

    ``run(operands, scalars)`` (dsts first, then leaves) calls the kernel and
    returns ``(function, args)`` that repeat the call, or None if an operand
    was read through a private copy (repeating the args would read it stale).
    """

    __slots__ = ("kernel", "may_parallel", "template", "holes", "run")

    def __init__(self, kernel, may_parallel: bool, template: list, holes: tuple):
        self.kernel = kernel                # the module with ``serial`` and ``parallel``
        self.may_parallel = may_parallel    # enough elements for prange (if threads > 1 then)
        self.template = template
        self.holes = holes                  # (argument index, operand index, private copy?)
        copies = any(copy for _, _, copy in holes)
        self.run = self._run_with_copies if copies else _runner(self)

    def kernel_function(self):
        kernel = self.kernel
        return kernel.parallel if self.may_parallel and numba.get_num_threads() > 1 \
            else kernel.serial

    def _run_with_copies(self, operands, scalars) -> None:
        count("cpu", "fused")
        args = self.template.copy()
        for at, k, copy in self.holes:
            t = operands[k]
            args[at] = _private_copy(t) if copy else t.storage.data
        self.kernel_function()(*args, *scalars)


def _runner(launch: Launch):
    """``launch.run`` as straight-line code: each array read from its operand, the
    template's numbers from the closure. At 1e3 elements a loop over the holes
    would cost about as much as the kernel call itself.

    The code depends only on where the holes are, so it is compiled once per
    such pattern and bound to each launch's numbers.
    """
    arrays = {at: k for at, k, _ in launch.holes}
    pattern = (len(launch.template), tuple(arrays.items()), launch.may_parallel)
    bind = memo(_RUNNER_FACTORIES, pattern, lambda: _runner_factory(*pattern))
    numbers = [x for at, x in enumerate(launch.template) if at not in arrays]
    return bind(_COUNTS, ("cpu", "fused"), launch.kernel.serial, launch.kernel_function,
                numbers)


_RUNNER_FACTORIES: dict[tuple, object] = {}


def _runner_factory(length: int, arrays: tuple, may_parallel: bool):
    arrays = dict(arrays)
    numbers = [f"c{at}" for at in range(length) if at not in arrays]
    args = "".join(f"operands[{arrays[at]}].storage.data, " if at in arrays else f"c{at}, "
                   for at in range(length))
    source = (f"def bind(counts, KEY, serial, kernel_function, numbers):\n"
              f"    ({''.join(n + ', ' for n in numbers)}) = numbers\n"
              f"    def run(operands, scalars):\n"
              f"        counts[KEY] = counts.get(KEY, 0) + 1\n"
              f"        args = ({args}*scalars)\n"
              f"        fn = {'kernel_function()' if may_parallel else 'serial'}\n"
              f"        fn(*args)\n"
              f"        return fn, args\n"
              f"    return run\n")
    namespace: dict = {}
    exec(compile(source, "<minitorch_exp launch>", "exec"), namespace)
    return namespace["bind"]


def _no_elements(*args) -> None:
    """The kernel of a launch over zero elements."""


_NO_ELEMENTS = SimpleNamespace(serial=_no_elements, parallel=_no_elements)


def _launch(kernel, shape, tails, copies, elements: int) -> Launch:
    """A Launch over loops ``shape`` (``elements`` in all) of operands with kernel
    arguments ``tails`` (None: no array, see ``_tails``), reading the ``copies`` ones
    through private copies."""
    template, holes = list(shape), []
    for k, (tail, copy) in enumerate(zip(tails, copies)):
        if tail is not None:
            holes.append((len(template), k, copy))
            template += [None, *tail]
    if 0 in shape:
        kernel = _NO_ELEMENTS
    return Launch(kernel, elements >= parallel_min(), template, tuple(holes))


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
    loops = _plan_loops(dst, leaves)
    n = dst.numel()
    if loops is None or (n >= NUMPY_FROM and numpy_is_faster(plan)):
        return None
    key = ("numba", len(loops.shape), saver, loops.kinds, dst.dtype.char)
    kernel = _compiled_or_none(plan, lambda: _elementwise_kernel(
        plan, key, saver, loops.kinds, dst.dtype))
    if kernel is None:
        return None
    return _launch(kernel, loops.shape, loops.tails, (False, *loops.copies), n)


class LoopLayout(NamedTuple):
    """How one elementwise kernel call walks memory (see ``_plan_loops``)."""

    shape: L.Shape                      # merged loop sizes, outermost first
    tails: list                         # per operand: (offset, *strides) or None for "d"
    kinds: tuple[str, ...]              # innermost stride kind per operand, dst first
    copies: tuple[bool, ...]            # per leaf: read through a private copy


def _plan_loops(dst, leaves) -> LoopLayout | None:
    layouts, copies, shares = [dst.layout], [], []
    for t in leaves:
        lay = L.broadcast_layout(t.layout, dst.shape)
        copy = overlaps(dst, t.storage, lay)
        if copy:
            lay = L.broadcast_layout(L.contiguous(t.shape), dst.shape)
        layouts.append(lay)
        copies.append(copy)
        shares.append(t.storage is dst.storage and not copy)
    shape, strides, offsets = C.iteration_layout(dst.shape, layouts)
    if len(shape) > MAX_DIMS:
        return None
    kinds = C.operand_kinds(strides, offsets, shares)
    return LoopLayout(shape, _tails(shape, strides, offsets, kinds), kinds, tuple(copies))


def _tails(shape, strides, offsets, kinds) -> list:
    """Each operand's kernel arguments after its array: the offset and the strides its
    kind does not imply (see ``_stride_params``); None for a ``d`` operand (no array)."""
    return [None if kind[0] == "d" else (offsets[k], *strides[k][:len(shape) - (kind != "s")])
            for k, kind in enumerate(kinds)]


class GroupLoops(NamedTuple):
    """How one kernel of several statements walks memory (see ``_plan_group_loops``)."""

    shape: L.Shape                      # merged loop sizes, outermost first
    tails: list                         # per dst, then per leaf: (offset, *strides) or None
    kinds: tuple[str, ...]              # the same order; ``d<j>``: the element dst j is at


def _plan_group_loops(dsts, leaves) -> GroupLoops | None:
    """None when the statements cannot share one loop: an operand that meets a dst's
    storage anywhere but at the element being written (an element written earlier
    in the loop would be read too late, or one written later too soon)."""
    shape = dsts[0].shape
    layouts, same_as = [], []
    for k, d in enumerate(dsts):
        layouts.append(d.layout)
        same_as.append(_same_element(d.storage, d.layout, dsts[:k]))
        if same_as[-1] is None and any(overlaps(o, d.storage, d.layout) for o in dsts[:k]):
            return None
    for t in leaves:
        lay = L.broadcast_layout(t.layout, shape)
        if any(overlaps(d, t.storage, lay) for d in dsts):
            return None
        layouts.append(lay)
        same_as.append(_same_element(t.storage, lay, dsts))
    shape, strides, offsets = C.iteration_layout(shape, layouts)
    if len(shape) > MAX_DIMS:
        return None
    one = len(dsts) == 1
    kinds = tuple(C.inner_kind(st) if j is None else "d" if one else f"d{j}"
                  for st, j in zip(strides, same_as))
    return GroupLoops(shape, _tails(shape, strides, offsets, kinds), kinds)


def _same_element(storage, layout, dsts) -> int | None:
    """The first of ``dsts`` that is ``layout`` of ``storage``: the same elements."""
    return next((j for j, d in enumerate(dsts) if d.storage is storage and d.layout == layout),
                None)


_GROUP_KERNELS: dict[tuple, object] = {}


def _group_kernel(plans, key, savers, dsts):
    with _LOCK:
        bindings = {}
        for plan in plans:
            bindings.update(_user_bindings(plan))
        source = group_source(plans, key[1], savers, key[3], [d.dtype for d in dsts])
        return load_module(source, bindings)


def _private_copy(t):
    """A contiguous copy of ``t``'s elements: breaks aliasing with dst."""
    count("cpu", "copy")
    return t.array.copy(order="C").reshape(-1)


def _elementwise_kernel(plan, key, saver, kinds, dst_dtype):
    """The Plan's loop, compiled once per key: ``("numba", ndim, saver, kinds, dst dtype)``."""
    return _plan_kernel(plan, key, lambda: kernel_source(plan, key[1], saver, kinds, dst_dtype))


def _plan_kernel(plan, key, source):
    """The module kept on ``plan`` under ``key``, loaded from ``source()`` the first time."""
    kernel = plan.compiled.get(key)
    if kernel is None:
        with _LOCK:
            bindings = _user_bindings(plan)  # first: it says when a user op cannot compile
            kernel = plan.compiled[key] = load_module(source(), bindings)
    return kernel


class ReduceLoops(NamedTuple):
    """How one reduction kernel call walks memory: kept loops outside, reduced inside."""

    kept: L.Shape                       # merged kept sizes (one output per index)
    reduced: L.Shape                    # merged reduced sizes
    out_tail: tuple                     # dst: (offset, *kept strides)
    tails: list                         # per leaf: (offset, *kept, *reduced strides)
    kinds: tuple[str, ...]              # per leaf: innermost loop's stride kind
    copies: tuple[bool, ...]            # per leaf: read through a private copy
    by_columns: bool                    # reduced loops outside (codegen.reduces_by_columns)


_REDUCE_LOOPS: dict[tuple, ReduceLoops | None] = {}


def _reduce_loops(dst, e, leaves) -> ReduceLoops | None:
    """The loops for ``dst (saver)= e``; None beyond MAX_DIMS.

    Like a Launch it depends only on layouts, so it is memoized on them.
    """
    key = (dst.layout, e.x.shape, e.axes, e.kept_shape,
           tuple((t.layout, t.storage is dst.storage) for t in leaves))
    return memo(_REDUCE_LOOPS, key, lambda: _plan_reduce_loops(dst, e, leaves))


def _plan_reduce_loops(dst, e, leaves) -> ReduceLoops | None:
    x_shape = e.x.shape
    out = L.broadcast_layout(dst._try_view_reshape(e.kept_shape).layout, x_shape)
    layouts, copies = [out], []
    for t in leaves:
        lay = L.broadcast_layout(t.layout, x_shape)
        copies.append(overlaps(dst, t.storage, lay))
        layouts.append(L.broadcast_layout(L.contiguous(t.shape), x_shape) if copies[-1] else lay)
    kept, reduced, kstrides, rstrides = C.reduce_layout(x_shape, e.axes, layouts)
    if len(kept) > MAX_DIMS or len(reduced) > MAX_DIMS:
        return None
    by_columns = C.reduces_by_columns(kstrides, rstrides)
    kinds = C.reduce_kinds(kstrides, rstrides, by_columns)
    # A unit stride in the innermost loop is implied, not passed (_ReduceSpec.params).
    unit = [kind == "1" for kind in kinds]
    tails = [(lay.offset, *ks[:len(kept) - u], *rs) if by_columns else
             (lay.offset, *ks, *rs[:len(reduced) - u])
             for lay, ks, rs, u in zip(layouts[1:], kstrides[1:], rstrides, unit)]
    return ReduceLoops(kept, reduced, (out.offset, *kstrides[0]), tails, kinds, tuple(copies),
                       by_columns)


def _reduce_kernel(plan, op, n_kept, n_reduced, saver, kinds, dst_dtype, by_columns):
    key = ("numba-reduce", op, n_kept, n_reduced, saver, kinds, dst_dtype.char, by_columns)
    return _plan_kernel(plan, key, lambda: reduce_source(
        plan, op, n_kept, n_reduced, saver, kinds, dst_dtype, by_columns))

"""Kernels: how a tree splits into the passes the engine will run, their code, their bytes.

``split(e)`` walks an expression as ``engine.resolve_boundaries`` will, but
computes nothing: every dot, every reduction whose result feeds more
elementwise work, and every view that cannot be pushed to the leaves becomes
a kernel of its own, and its consumer reads it from a temporary (a data-less
placeholder here). Everything else -- maps, casts, scalars -- fuses into the
kernel that needs it. ``explain.py`` turns the result into text; this module
also writes each kernel's code (the NumPy schedule, or the numba / CUDA
source) and counts the bytes it moves, against eager NumPy's op-by-op passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import layout as L
from .expr import RVALUE, Cast, Dot, Exp, Map, Reduce, Scalar, ViewExp, describe
from .ops import OPS
from .plan import make_plan
from .tensor import Tensor

# ---- splitting (mirrors engine.resolve_boundaries) -----------------------------------


@dataclass(eq=False)
class Kernel:
    """One pass the engine will run: ``body`` is what it computes, inputs as leaves."""

    number: int
    kind: str                  # fused | reduce | blas
    node: Exp                  # the original node whose value this kernel produces
    body: Exp                  # ``node`` with inputs from other kernels replaced by temporaries
    members: list              # original nodes computed inside this kernel
    cut: str = ""              # why it is a kernel of its own ("" for the last one)
    loop_shape: tuple = ()
    _plan: tuple | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"K{self.number}"

    def planned(self):
        """``(plan, leaves, scalars)`` for the elementwise part, or None for BLAS."""
        if self._plan is None and self.kind != "blas":
            x = self.body.x if self.kind == "reduce" else self.body
            if type(x) is not Scalar:
                self._plan = make_plan(x, len(self.loop_shape))
        return self._plan


class Splitter:
    """Walks a tree once, cutting it where the engine will, computing nothing.

    ``labels`` names what the split invents: ``K1`` for kernel 1's temporary,
    ``K1.reshape(24,)`` for a view of it.
    """

    def __init__(self):
        self.labels: dict[int, str] = {}
        self.kernels: list[Kernel] = []
        self.kernel_of: dict[int, Kernel] = {}
        self.temps: dict[int, Tensor] = {}
        self.reused: list[Exp] = []  # nodes already computed: read, not recomputed

    def kernel(self, e: Exp, cut: str = "", loop_shape=None) -> Kernel:
        members: list = []
        if type(e) is Dot:
            kind, body = "blas", Dot(self.operand(e.a), self.operand(e.b))
            members.append(e)
        elif type(e) is Reduce:
            kind, body = "reduce", _with_input(e, self.fuse(e.x, e, members))
            members.append(e)
        else:
            kind, body = "fused", self.fuse(e, None, members)
        loop = e.x.shape if kind == "reduce" else (loop_shape or e.shape)
        k = Kernel(len(self.kernels) + 1, kind, e, body, unique(members), cut, loop)
        self.kernels.append(k)
        for m in k.members:
            self.kernel_of[id(m)] = k
        return k

    def fuse(self, e: Exp, consumer, members: list) -> Exp:
        """The elementwise part of ``e``; complex children become temporaries."""
        if e.kind == RVALUE or type(e) is Scalar:
            return e
        if realized(e) is not None:
            self.reused.append(e)
            return realized(e)
        if type(e) is Map:
            members.append(e)
            args = tuple(self.fuse(a, e, members) for a in e.args)
            return e if all(x is y for x, y in zip(args, e.args)) else Map(e.op, args)
        if type(e) is Cast:
            members.append(e)
            x = self.fuse(e.x, e, members)
            return e if x is e.x else Cast(x, e.dtype)
        if type(e) is ViewExp:
            members.append(e)
            base = self.temporary(e.base, e.reason)
            view = e.fn(base)
            self.labels[id(view)] = f"{self.labels[id(base)]}.{e.what}"
            return view
        return self.temporary(e, cut_reason(e, consumer))

    def operand(self, x: Exp) -> Exp:
        """A matmul operand: BLAS reads memory, so anything lazy is computed first."""
        if x.kind == RVALUE or realized(x) is not None:
            return x if x.kind == RVALUE else realized(x)
        return self.temporary(x, f"BLAS reads its operands from memory, so this {describe(x)} "
                                 "operand is computed into a temporary first")

    def temporary(self, e: Exp, cut: str) -> Tensor:
        t = self.temps.get(id(e))
        if t is None:
            k = self.kernel(e, cut)
            t = self.temps[id(e)] = Tensor.meta(e.shape, e.dtype)
            t.device = e.device
            self.labels[id(t)] = k.name
        return t


def realized(e):
    """The tensor a node was already evaluated to, if any (tensors and scalars: None)."""
    return getattr(e, "realized", None)


def cut_reason(e: Exp, consumer) -> str:
    user = describe(consumer) if consumer is not None else "the next step"
    if type(e) is Dot:
        return f"matmul runs as its own BLAS call; `{user}` reads its result from a temporary"
    return (f"{describe(e)} must see all of its input before `{user}` can use any result, "
            "so it finishes into a temporary first")


def _with_input(e: Reduce, x: Exp) -> Reduce:
    if x is e.x:
        return e
    r = Reduce.__new__(Reduce)
    r.op, r.x, r.axes, r.keepdims, r.realized = e.op, x, e.axes, e.keepdims, None
    r.shape, r.dtype, r.device = e.shape, e.dtype, e.device
    return r


def unique(items: list) -> list:
    seen: dict[int, object] = {}
    for x in items:
        seen.setdefault(id(x), x)
    return list(seen.values())


def split(e: Exp, loop_shape=None) -> Splitter:
    """The kernels that evaluating ``e`` (into a tensor of ``loop_shape``) will run, in order."""
    s = Splitter()
    s.kernel(e, loop_shape=loop_shape)
    return s


# ---- the code each kernel runs ---------------------------------------------------


def numpy_schedule(k: Kernel, saver: str = "=") -> list[str]:
    """The NumPy evaluator's program as pseudo-code: ufuncs into reused scratch buffers."""
    from .cpu_numpy import BLOCK, schedule_for
    plan = k.planned()[0]
    sched = schedule_for(plan)
    buffers = getattr(sched, "buffer_of", None) or [*range(len(plan.instrs) - 1), None]
    names = [f"in{i}[blk]" for i in range(plan.n_leaves)]
    names += [f"s{i}" for i in range(len(plan.scalar_types))]
    result = "vals" if k.kind == "reduce" else "out[blk]"
    lines = [f"  for blk in blocks(out, {BLOCK}):   # every operand cut the same way"]
    for i, (ins, buf) in enumerate(zip(plan.instrs, buffers)):
        target = f"buf{buf}" if buf is not None else result
        call = f"{_np_name(ins)}({', '.join(names[a] for a in ins.args)}"
        last = i == len(plan.instrs) - 1
        if last and saver != "=" and k.kind != "reduce":
            lines.append(f"      out[blk] {saver} {call})")
        else:
            lines.append(f"      {target} = {call}, out={target})")
        names.append(target)
    if not plan.instrs:
        lines.append(f"      {result} {saver if k.kind != 'reduce' else '='} {names[plan.out]}")
    if k.kind == "reduce":
        lines.append(f"      acc ⊕= {_reduce_call(k.body)}   # partial results combined")
    scratch = len({b for b in buffers if b is not None})
    lines.append(f"  scratch: {plural(scratch, 'buffer')} of {BLOCK} elements, "
                 "allocated once and reused by every call")
    return lines


def _np_name(ins) -> str:
    if ins.op == "cast":
        return f"cast_to_{ins.dtype.name}"
    fn = OPS[ins.op].numpy
    return f"np.{fn.__name__}" if isinstance(fn, np.ufunc) else ins.op


def _reduce_call(r: Reduce) -> str:
    ufunc = {"sum": "add", "mean": "add", "max": "maximum", "min": "minimum"}.get(r.op)
    if ufunc is None:
        return f"np.{r.op}(vals, axis={r.axes})"
    return f"np.{ufunc}.reduce(vals, axis={r.axes})" + (" / count" if r.op == "mean" else "")


def compiled_source(k: Kernel, dst, saver: str, target: str) -> list[str] | None:
    """The numba (``target='numba'``) or CUDA source for ``k``; None when unavailable.

    The loops are merged as the backend merges them for these layouts (``dst``
    None: a new contiguous result), so the text is the module it compiles.
    """
    try:
        if target == "cuda":
            from .cuda import cuda_reduce_source as reduce_source
            from .cuda import cuda_source as elementwise_source
        else:
            from .cpu_numba import kernel_source as elementwise_source
            from .cpu_numba import reduce_source
        text = _source(k, dst, saver, target, elementwise_source, reduce_source)
    except (ImportError, AttributeError, TypeError, NotImplementedError):
        return None
    return None if text is None else ["  " + line for line in text.rstrip().splitlines()]


def _source(k: Kernel, dst, saver, target, elementwise_source, reduce_source) -> str | None:
    from . import codegen as C
    plan, leaves, _ = k.planned()
    dst_dtype = dst.dtype if dst is not None else k.node.dtype
    if k.kind == "reduce":
        if k.body.op == "argmax":
            return None
        n_kept, n_reduced, kinds, by_columns = _reduce_loops(k, leaves, dst, C)
        if target == "cuda":
            return reduce_source(plan, k.body.op, n_kept, n_reduced, saver, dst_dtype)
        return reduce_source(plan, k.body.op, n_kept, n_reduced, saver, kinds, dst_dtype,
                             by_columns)
    ndim, kinds = _loops(k, leaves, dst, C)
    if target == "cuda":
        return elementwise_source(plan, ndim, saver, dst_dtype)
    return elementwise_source(plan, ndim, saver, kinds, dst_dtype)


def _loops(k: Kernel, leaves, dst, C) -> tuple[int, tuple[str, ...]]:
    """Merged loop depth and each operand's innermost stride kind, as the backends see them."""
    shape = tuple(k.loop_shape)
    layouts = [dst.layout if dst is not None else L.contiguous(shape)]
    layouts += [L.broadcast_layout(t.layout, shape) for t in leaves]
    cshape, strides, offsets = C.iteration_layout(shape, layouts)
    shares = [dst is not None and t.storage is dst.storage for t in leaves]
    return len(cshape), C.operand_kinds(strides, offsets, shares)


def _reduce_loops(k: Kernel, leaves, dst, C):
    r = k.body
    kept = dst._try_view_reshape(r.kept_shape).layout if dst is not None else \
        L.contiguous(r.kept_shape)
    layouts = [L.broadcast_layout(kept, r.x.shape)]
    layouts += [L.broadcast_layout(t.layout, r.x.shape) for t in leaves]
    kshape, rshape, kstrides, rstrides = C.reduce_layout(r.x.shape, r.axes, layouts)
    by_columns = C.reduces_by_columns(kstrides, rstrides)
    return len(kshape), len(rshape), C.reduce_kinds(kstrides, rstrides, by_columns), by_columns


# ---- bytes moved, against eager NumPy ---------------------------------------------


@dataclass
class Traffic:
    passes: int = 0
    arrays: int = 0
    read: int = 0
    written: int = 0

    @property
    def moved(self) -> int:
        return self.read + self.written


def nbytes(e) -> int:
    return math.prod(e.shape) * e.dtype.itemsize


def leaf_bytes(t: Tensor) -> int:
    """Bytes a pass must read from a tensor: broadcast (stride-0) dims are read once."""
    if t.storage is None:
        return nbytes(t)
    return math.prod(n for n, s in zip(t.shape, t.strides) if s != 0) * t.dtype.itemsize


def eager_traffic(e: Exp) -> Traffic:
    """NumPy op by op: every op reads its operands and writes a freshly allocated result."""
    cost, seen, stack = Traffic(), set(), [e]
    while stack:
        x = stack.pop()
        if id(x) in seen or x.kind == RVALUE or type(x) is Scalar or realized(x) is not None:
            continue
        seen.add(id(x))
        if type(x) is ViewExp and not x.what.startswith("reshape"):
            stack.append(x.base)  # a NumPy view: no pass of its own
            continue
        cost.passes += 1
        cost.arrays += 1
        cost.written += nbytes(x)
        for c in x.children():
            cost.read += _operand_bytes(c)
            stack.append(c)
    return cost


def _operand_bytes(c) -> int:
    if type(c) is Scalar:
        return 0
    if c.kind == RVALUE:
        return leaf_bytes(c)
    return nbytes(realized(c) if realized(c) is not None else c)


def fused_traffic(kernels: list[Kernel], out=None, saver: str = "=") -> Traffic:
    """Ours: each kernel reads each distinct leaf once and writes its result once."""
    cost = Traffic(passes=len(kernels), arrays=len(kernels) - (1 if out is not None else 0))
    for k in kernels:
        cost.read += sum(leaf_bytes(t) for t in body_leaves(k.body))
        cost.written += nbytes(out if (out is not None and k is kernels[-1]) else k.node)
    if out is not None and saver != "=":
        cost.read += nbytes(out)
    return cost


def body_leaves(e: Exp) -> list[Tensor]:
    found: dict[int, Tensor] = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if x.kind == RVALUE:
            found.setdefault(id(x), x)
        elif type(x) is not Scalar:
            stack.extend(x.children())
    return list(found.values())


def human_bytes(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            break
    return f"{n:.1f} {unit}"


def plural(n: int, word: str) -> str:
    """``1 pass``, ``3 passes``, ``2 temporaries``, ``4 nodes``."""
    if n == 1:
        return f"1 {word}"
    if word.endswith("y"):
        return f"{n} {word[:-1]}ies"
    return f"{n} {word}{'es' if word.endswith('s') else 's'}"

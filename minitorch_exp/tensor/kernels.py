"""Kernels described: the code each kernel of a split runs, and the bytes it moves.

``lower.split(e)`` cuts a tree into the kernels the engine will run (the same
walk the engine takes). For each ``lower.Kernel`` this module writes its code
-- the NumPy schedule, or the numba / CUDA source -- and counts the bytes it
moves against eager NumPy's op-by-op passes; ``explain.py`` turns both into text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import layout as L
from .expr import RVALUE, Exp, Reduce, Scalar, ViewExp
from .lower import Kernel
from .ops import OPS
from .tensor import Tensor


def realized(e):
    """The tensor a node was already evaluated to, if any (tensors and scalars: None)."""
    return getattr(e, "realized", None)


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
    for i in getattr(sched, "widen", ()):
        lines.append(f"      f{i} = in{i}[blk].astype(np.float32)   # float16 computes in float32")
        names[i] = f"f{i}"
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
    """The NumPy call the block evaluator makes for ``r`` (``cpu_numpy.NumpyBackend.reduce``)."""
    row = r.reduction
    if row.combine is None:
        return f"np.{row.numpy.__name__}(vals, axis={r.axes})"
    fold = OPS[row.combine].numpy.__name__
    return f"np.{fold}.reduce(vals, axis={r.axes})" + (" / count" if row.divide else "")


def compiled_source(k: Kernel, dst, saver: str, target: str) -> list[str] | None:
    """The numba (``target='numba'``) or CUDA source for ``k``; None when unavailable,
    or when numba would not compile it (``cpu_numba.compiles``: a float16 Plan).

    The loops are merged as the backend merges them for these layouts (``dst``
    None: a new contiguous result), so the text is the module it compiles.
    """
    try:
        if target == "cuda":
            from .cuda import cuda_reduce_source as reduce_source
            from .cuda import cuda_source as elementwise_source
        else:
            from .cpu_numba import compiles, reduce_source
            from .cpu_numba import kernel_source as elementwise_source
            if not compiles(k.planned()[0], dst.dtype if dst is not None else k.node.dtype):
                return None
        text = _source(k, dst, saver, target, elementwise_source, reduce_source)
    except (ImportError, AttributeError, TypeError, NotImplementedError):
        return None
    return None if text is None else ["  " + line for line in text.rstrip().splitlines()]


def _source(k: Kernel, dst, saver, target, elementwise_source, reduce_source) -> str | None:
    from . import codegen as C
    plan, leaves, _ = k.planned()
    dst_dtype = dst.dtype if dst is not None else k.node.dtype
    if k.kind == "reduce":
        reduction = k.body.reduction
        if reduction.combine is None:  # no kernel of its own (argmax): NumPy's or CuPy's
            return None
        n_kept, n_reduced, kinds, by_columns = _reduce_loops(k, leaves, dst, C)
        if target == "cuda":
            return reduce_source(plan, reduction, n_kept, n_reduced, saver, dst_dtype)
        return reduce_source(plan, reduction, n_kept, n_reduced, saver, kinds, dst_dtype,
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
    """Ours: each kernel reads each distinct leaf once and writes its result once; a
    product accumulated into ``out`` also writes and reads its temporary."""
    cost = Traffic(passes=len(kernels), arrays=len(kernels) - (1 if out is not None else 0))
    for k in kernels:
        cost.read += sum(leaf_bytes(t) for t in body_leaves(k.body))
        cost.written += nbytes(out if (out is not None and k is kernels[-1]) else k.node)
    if out is not None and saver != "=":
        cost.read += nbytes(out)
    if out is not None and product_temporary(kernels, saver, out):
        cost.passes += 1
        cost.arrays += 1
        cost.written += nbytes(out)
        cost.read += nbytes(out)
    return cost


def product_temporary(kernels: list[Kernel], saver: str, out) -> bool:
    """Whether the last kernel is a product applied to ``out`` with ``saver`` from a
    product-sized temporary: where the backend's ``dot`` cannot apply it as BLAS
    computes it (``accumulates_in_place``: ``+=`` and ``-=`` by ``beta = 1``). An
    operand still an expression is judged as the new contiguous tensor it becomes."""
    k = kernels[-1]
    if saver == "=" or k.kind != "blas" or out is None:
        return False
    from .backends import device_backend
    from .creation import new_empty
    a, b = (x if x.kind == RVALUE else new_empty(x.shape, x.dtype, x.device)
            for x in (k.body.a, k.body.b))
    return not device_backend(out.device).accumulates_in_place(out, a, b, saver)


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

"""From a Plan to per-element source code, shared by the numba and CUDA generators.

A Plan is a straight-line program over slots: leaves, then scalars, then one
slot per instruction. A compiled kernel runs that program once per element,
so its body is the program written out with one local variable per slot.
For ``w[...] = -eta * (g + lam * w)`` (leaves g, w; scalars -eta, lam) the
Plan ``t0 = mul(s1, in1); t1 = add(in0, t0); t2 = mul(s0, t1)`` renders, per
element, as Python for numba::

    t0 = np.float32((np.float32(s1) * x1))
    t1 = np.float32((x0 + t0))
    t2 = np.float32((np.float32(s0) * t1))

and as CUDA C::

    const float t0 = (((float)s1) * x1);
    const float t1 = (x0 + t0);
    const float t2 = (((float)s0) * t1);

Each instruction converts its operands to its *compute* dtype (NumPy's
promotion, decided when the Plan was made), fills in the op's template for the
dialect (``OpDef.py`` or ``OpDef.cuda``), and converts the result to the
instruction's dtype. Only the dialect -- type names, conversions, how a local
is declared, which template -- differs between Python and CUDA C; this module
holds everything else, including how the loops walk memory
(``iteration_layout``) so both generators order and merge dims the same way.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes
from . import layout as L
from .ops import OPS, SAVER_ROWS, OpDef

# Per-element kernels see Python scalars as these dtypes (float -> double, ...).
SCALAR_DTYPES = {float: dtypes.float64, int: dtypes.int64, bool: dtypes.bool_}


class Dialect:
    """How one target language spells types, conversions, locals and ops."""

    name = ""

    def type_name(self, dtype: np.dtype) -> str:
        raise NotImplementedError

    def convert(self, expr: str, dtype: np.dtype) -> str:
        raise NotImplementedError

    def declare(self, name: str, dtype: np.dtype, expr: str) -> str:
        raise NotImplementedError

    def template(self, op: OpDef) -> str:
        raise NotImplementedError

    def held(self, dtype: np.dtype) -> np.dtype:
        """The dtype a local of ``dtype`` is held in: its own."""
        return dtype

    def apply(self, op: OpDef, args: list[str], compute: np.dtype) -> str:
        return self.template(op).format(*args, T=self.type_name(compute))


class PythonDialect(Dialect):
    """Python as numba compiles it: NumPy scalar types make the widths explicit.

    Python arithmetic may widen (``int32 + int32`` is int64 in numba), so every
    result is converted back to its instruction's dtype; the conversion costs
    nothing once compiled. User ops have no ``py`` template: they call their
    compiled ``numpy`` function, bound in the kernel module as ``_op_<name>``.
    """

    name = "python"

    def type_name(self, dtype):
        return "np.bool_" if dtype == dtypes.bool_ else f"np.{dtype.name}"

    def convert(self, expr, dtype):
        if dtype == dtypes.bool_:
            return f"({expr} != 0)"
        return f"{self.type_name(dtype)}({expr})"

    def declare(self, name, dtype, expr):
        return f"{name} = {self.convert(expr, dtype)}"

    def template(self, op):
        if op.py is not None:
            return op.py
        return f"{user_op_symbol(op.name)}(" + ", ".join(f"{{{i}}}" for i in range(op.arity)) + ")"


class CudaDialect(Dialect):
    """CUDA C++: a typed ``const`` local per slot; C's conversions on initialization.

    A float16 array is ``__half`` (``<cuda_fp16.h>``), but no local is: a float16
    value is held as ``float`` (loaded with ``__half2float``), computed in float, and
    rounded by ``__float2half`` where it is stored or cast to float16 -- as the NumPy
    evaluator computes it. No implicit ``__half`` conversion is relied on.
    """

    name = "cuda"
    TYPES = {dtypes.float16: "__half", dtypes.float32: "float", dtypes.float64: "double",
             dtypes.int32: "int", dtypes.int64: "long long", dtypes.bool_: "bool"}

    def type_name(self, dtype):
        return self.TYPES[np.dtype(dtype)]

    def convert(self, expr, dtype):
        if dtype == dtypes.float16:  # a value to store: rounded once
            return f"__float2half((float)({expr}))"
        return f"(({self.type_name(dtype)}){expr})"

    def declare(self, name, dtype, expr):
        if dtype == dtypes.float16:  # a cast to float16: rounds, and is held as float
            return f"const float {name} = __half2float({self.convert(expr, dtype)});"
        return f"const {self.type_name(dtype)} {name} = {expr};"

    def held(self, dtype):
        return dtypes.arithmetic_dtype(dtype)

    def read(self, expr: str, dtype: np.dtype) -> str:
        """An array element of ``dtype`` as the value it is held as (``held``)."""
        return f"__half2float({expr})" if dtype == dtypes.float16 else expr

    def load(self, name: str, dtype: np.dtype, expr: str) -> str:
        """Declare ``name`` holding the array element ``expr`` of ``dtype``."""
        return f"const {self.type_name(self.held(dtype))} {name} = {self.read(expr, dtype)};"

    def template(self, op):
        return op.cuda


PYTHON = PythonDialect()
CUDA = CudaDialect()


def user_op_symbol(name: str) -> str:
    """The name a user op's compiled scalar function has inside a generated module."""
    return f"_op_{name}"


def leaf_names(plan, prefix: str = "") -> list[str]:
    return [f"{prefix}x{i}" for i in range(plan.n_leaves)]


def scalar_names(plan, prefix: str = "") -> list[str]:
    return [f"{prefix}s{i}" for i in range(len(plan.scalar_types))]


def input_dtypes(plan) -> list[np.dtype]:
    """Dtype of each input slot as the kernel holds it: leaves as stored, scalars widened."""
    return list(plan.leaf_dtypes) + [SCALAR_DTYPES[t] for t in plan.scalar_types]


def render_body(plan, dialect: Dialect, prefix: str = "") -> tuple[list[str], str, np.dtype]:
    """The Plan's instructions as one declaration each.

    Leaves must already be loaded into ``x0, x1, ...`` and scalars be in
    ``s0, s1, ...`` (each name after ``prefix``, which keeps the statements of
    one kernel apart). Returns ``(lines, result_name, result_dtype)``.
    """
    names = leaf_names(plan, prefix) + scalar_names(plan, prefix)
    kinds = [dialect.held(dt) for dt in input_dtypes(plan)]
    lines = []
    for k, ins in enumerate(plan.instrs):
        args = [_operand(dialect, names[a], kinds[a], ins, i) for i, a in enumerate(ins.args)]
        # A cast's compute dtype is its source dtype: declaring converts it.
        expr = args[0] if ins.op == "cast" else dialect.apply(OPS[ins.op], args, ins.compute)
        names.append(f"{prefix}t{k}")
        kinds.append(dialect.held(ins.dtype))
        lines.append(dialect.declare(names[-1], ins.dtype, expr))
    return lines, names[plan.out], kinds[plan.out]


def _operand(dialect: Dialect, name: str, dtype: np.dtype, ins, position: int) -> str:
    # where's condition is tested for truth as it is; converting it to the
    # compute dtype could turn a tiny nonzero float into 0.
    if dtype == ins.compute or (ins.op == "where" and position == 0):
        return name
    return dialect.convert(name, ins.compute)


def saver_value(dialect: Dialect, plan, result: str, result_dtype: np.dtype,
                dst_dtype: np.dtype) -> str:
    """The value a saver combines with ``dst``.

    A Plan that is only a Python scalar (``dst += 0.5``) keeps NumPy's weak-scalar
    rule: the scalar is converted to the type ``dst`` promotes it to first.
    """
    if plan.instrs or plan.out < plan.n_leaves:
        return result
    weak = dtypes.result_type(dst_dtype, plan.scalar_types[plan.out - plan.n_leaves]())
    return result if weak == result_dtype else dialect.convert(result, weak)


def saved_expr(dialect: Dialect, saver: str, current: str, value: str) -> str:
    """The new value of a dst element: ``value``, or the saver's row (``+=``: add)
    over ``current`` and ``value`` in the dialect's template."""
    if saver == "=":
        return value
    return dialect.template(OPS[SAVER_ROWS[saver]]).format(current, value)


# ---- how the loops walk memory -----------------------------------------------

def iteration_layout(shape: L.Shape, layouts: list[L.Layout]
                     ) -> tuple[L.Shape, list[L.Strides], list[int]]:
    """Shape, strides and offsets to loop over, given ``dst``'s layout first.

    Elementwise work may visit elements in any order, so the loops follow dst's
    memory: dims where dst steps backwards are flipped, dims are sorted so dst's
    strides decrease, and dims every operand walks as one are merged. A
    transposed or reversed dst then becomes a plain forward loop. All layouts
    must already be broadcast to ``shape``.
    """
    offsets = [lay.offset for lay in layouts]
    strides = [list(lay.strides) for lay in layouts]
    for d, n in enumerate(shape):
        if strides[0][d] < 0:
            for k in range(len(layouts)):
                offsets[k] += (n - 1) * strides[k][d]
                strides[k][d] = -strides[k][d]
    order = sorted(range(len(shape)), key=lambda d: -strides[0][d])
    cshape, cstrides = L.coalesce(tuple(shape[d] for d in order),
                                  *[tuple(st[d] for d in order) for st in strides])
    if not cshape:  # a single element: one loop of one
        cshape, cstrides = (1,), [(1,) for _ in layouts]
    return cshape, cstrides, offsets


def inner_kind(strides: L.Strides) -> str:
    """How an operand moves in the innermost loop: ``1`` (unit), ``0`` (fixed) or ``s``."""
    inner = strides[-1]
    return "1" if inner == 1 else "0" if inner == 0 else "s"


def operand_kinds(strides: list, offsets: list, shares_dst: list[bool]) -> tuple[str, ...]:
    """Innermost stride kind of dst (first) and of each leaf in one elementwise loop.

    A leaf that shares dst's storage at exactly dst's position is ``d``: the
    kernel reads it from ``out[p]``, which keeps in-place updates vectorized.
    """
    kinds = [inner_kind(strides[0])]
    for k, shared in enumerate(shares_dst, start=1):
        same = shared and strides[k] == strides[0] and offsets[k] == offsets[0]
        kinds.append("d" if same else inner_kind(strides[k]))
    return tuple(kinds)


def reduce_kinds(kept_strides: list, reduced_strides: list, by_columns: bool
                 ) -> tuple[str, ...]:
    """Each leaf's stride kind in the innermost loop, ``1`` (unit) or ``s``: the last
    reduced dim, or the last kept one when the loops go ``by_columns``.
    ``kept_strides`` starts with the output's, as ``reduce_layout`` returns them."""
    inner = kept_strides[1:] if by_columns else reduced_strides
    return tuple("1" if st[-1] == 1 else "s" for st in inner)


def reduces_by_columns(kept_strides: list, reduced_strides: list) -> bool:
    """True when a leaf's reduced dims stride further than its kept ones (a column sum).

    Reducing one output at a time would then walk memory out of order and
    revisit each cache line once per output. The loops go the other way round:
    reduced outside, kept inside, each row of input folded into a row of
    accumulators.
    """
    for kept, reduced in zip(kept_strides[1:], reduced_strides):
        k = min((abs(s) for s in kept if s), default=math.inf)
        r = min((abs(s) for s in reduced if s), default=math.inf)
        if r != math.inf and k < r:
            return True
    return False


def reduce_layout(x_shape: L.Shape, axes: tuple[int, ...], layouts: list[L.Layout]
                  ) -> tuple[L.Shape, L.Shape, list[L.Strides], list[L.Strides]]:
    """Split a reduction's loops into kept dims and reduced dims, each merged.

    ``layouts[0]`` is the output viewed with the input's shape (stride 0 on
    reduced axes); the others are the leaves broadcast to ``x_shape``. Returns
    ``(kept_shape, reduced_shape, kept_strides, reduced_strides)``; the output's
    reduced strides are all 0 and left out of ``reduced_strides``. Nothing left to
    reduce (reduced dims of size 1, or none) is one reduced step of one.
    """
    kept = [d for d in range(len(x_shape)) if d not in axes]
    kshape, kstrides = L.coalesce(tuple(x_shape[d] for d in kept),
                                  *[tuple(lay.strides[d] for d in kept) for lay in layouts])
    rshape, rstrides = L.coalesce(tuple(x_shape[d] for d in axes),
                                  *[tuple(lay.strides[d] for d in axes) for lay in layouts[1:]])
    if not rshape:
        rshape, rstrides = (1,), [(0,) for _ in layouts[1:]]
    return kshape, rshape, kstrides, rstrides


def reduce_count(x_shape: L.Shape, axes: tuple[int, ...]) -> int:
    return math.prod(x_shape[d] for d in axes)

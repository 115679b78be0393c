"""Source text of the numba kernels: one Python module per kernel, compiled elsewhere.

Every kernel is a module holding two functions, ``serial`` and ``parallel``
(the same loops, the outermost a ``prange``), decorated with ``numba.njit``.
The text depends only on the kernel's structure -- Plans, number of merged
dims, savers, each operand's innermost stride kind, dtypes -- never on sizes,
strides, offsets or scalar values, which are arguments; so one module serves
every call of that structure, and its hash names its file in the kernel
cache (``kernel_cache.py``). Nothing here imports numba: making the text
needs no compiler (``explain`` shows it).

The innermost stride of each operand is part of the structure (see
``docs/cpu_kernels.md``): ``1`` (indexed ``p + i``, so LLVM vectorizes),
``0`` (loaded once, outside the loop), ``s`` (any other stride), or ``d``
(``d<j>`` in a group) for a leaf that *is* a dst at the same layout: it is
read from that dst at the element being written, which is safe per element
and needs no alias checks. Positions are cast to unsigned so numba emits no
negative-index wraparound.

* ``kernel_source``: one elementwise statement (``dst (saver)= plan``);
* ``group_source``: several statements run one after another per element;
* ``reduce_source``: a reduction (sum, mean, max, min) over a fused input.

A user op appears as a call to a bound symbol (``codegen.user_op_symbol``);
its function's fingerprint is in the header, so a changed ``numpy_fn`` gets a
new file, and such a module is not cached on disk (``_module_text``).
"""

from __future__ import annotations

import hashlib

import numpy as np

from . import codegen as C
from . import dtypes
from .ops import OPS, ReduceDef

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
    # compiler cannot prove distinct has to wait for it (docs/cpu_kernels.md, groups).
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
    return C.PYTHON.convert(C.saved_expr(C.PYTHON, saver, current, value), dst_dtype)


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
    # The first line names cpu_numba, where this text was made before: a module's
    # hash names its cached file, so changing a byte would recompile every kernel.
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

def reduce_source(plan, reduction: ReduceDef, n_kept: int, n_reduced: int, saver: str = "=",
                  kinds: tuple[str, ...] | None = None, dst_dtype=None,
                  by_columns: bool = False) -> str:
    """The Python module compiled for ``reduction`` (a row of ``ops.REDUCTIONS`` with a
    ``combine``: sum, mean, max, min) over a fused input.

    Kept dims are the outer loops (one output each, ``prange`` over the first);
    reduced dims are the inner loops, accumulating into a local. With no kept
    dim, the parallel variant splits the outermost reduced loop into chunks
    whose partial results are combined at the end. ``by_columns`` (the reduced
    dims stride further than the kept ones, ``codegen.reduces_by_columns``)
    turns the loops round: reduced outside, kept inside, accumulating into a
    row per chunk of the outermost reduced loop, so memory is read in order.
    ``kinds`` are the leaves' stride kinds (``1`` or ``s``) in the innermost loop.

    Everything that tells reductions apart comes from the row's fields: its
    accumulator's first value (``identity``), how a value folds in (``combine``),
    the result and accumulator dtypes, and whether the result is divided by the
    count (``divide``). Sums (``combine`` add) compile with ``fastmath={"reassoc"}``:
    without it LLVM must add in
    order, one element per add latency; with it the float64 accumulation is
    vectorized (faster than NumPy's pairwise float32 sum). The fused body may
    then be reassociated too, which changes results only within rounding.
    """
    kinds = kinds or ("1",) * plan.n_leaves
    result_dtype = reduction.result_dtype(plan.dtype)
    dst_dtype = np.dtype(dst_dtype or result_dtype)
    spec = _ReduceSpec(plan, reduction, n_kept, n_reduced, saver, kinds, result_dtype,
                       dst_dtype, by_columns)
    functions = [spec.function(name, parallel)
                 for name, parallel in (("serial", False), ("parallel", True))]
    return _module_text([plan], functions, fastmath=reduction.combine == "add")


def _identity(reduction: ReduceDef, dtype: np.dtype) -> str:
    """The accumulator's first value (``ReduceDef.identity_value``) as Python source."""
    value = reduction.identity_value(dtype)
    if dtype == dtypes.bool_:
        return str(bool(value))
    if dtype.kind == "f" and np.isinf(value):
        return f"{C.PYTHON.type_name(dtype)}({'-' if value < 0 else ''}np.inf)"
    number = int(value) if float(value).is_integer() else float(value)
    return f"{C.PYTHON.type_name(dtype)}({number!r})"


class _ReduceSpec:
    """Everything one reduction kernel's source depends on."""

    def __init__(self, plan, reduction, n_kept, n_reduced, saver, kinds, result_dtype,
                 dst_dtype, by_columns):
        self.plan, self.reduction, self.saver = plan, reduction, saver
        self.n_kept, self.n_reduced, self.kinds = n_kept, n_reduced, kinds
        self.by_columns = by_columns
        self.result_dtype, self.dst_dtype = result_dtype, dst_dtype
        self.acc_dtype = reduction.accumulator_dtype(plan.dtype)
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
        lines.append(_pad(depth) + f"acc = {_identity(self.reduction, self.acc_dtype)}")
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
                 _pad(2) + f"row[:] = {_identity(self.reduction, self.acc_dtype)}"]
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
            self._flat_index(), f"acc = {_identity(self.reduction, self.acc_dtype)}",
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
        lines = [_pad(depth) + f"acc = {_identity(self.reduction, self.acc_dtype)}"]
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
        """Fold ``value`` into ``acc`` with the row's ``combine`` op (maximum and minimum
        propagate NaN as NumPy does); an add is the plain ``acc + v`` that reassoc
        vectorizes."""
        v = f"v = {C.PYTHON.convert(value, self.acc_dtype)}"
        if self.reduction.combine == "add":
            return [v, f"{acc} = {acc} + v"]
        op = OPS[self.reduction.combine]
        return [v, f"{acc} = " + C.PYTHON.apply(op, ["v", acc], self.acc_dtype)]

    def _store(self, out_base: str) -> list[str]:
        value = C.PYTHON.convert("acc / count" if self.reduction.divide else "acc",
                                 self.result_dtype)
        return [f"p = np.uint64({out_base})",
                _store(self.saver, value, self.result_dtype, self.dst_dtype)]


# ---- user ops in the header -------------------------------------------------

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

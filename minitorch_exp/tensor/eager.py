"""The engine's evaluator for small work: an op computed at once with NumPy, no Plan.

Laziness pays when a fused pass saves more than keeping the op lazy costs:
building and checking its tree, interning tokens, finding a Plan and a launch,
tracking what the lazy value reads. On a few thousand elements that
bookkeeping costs more than the passes over memory it saves
(``benchmarks/bench_eager.py --sweep`` finds the crossover; docs/eager.md shows
it). So the engine's policy (``now``) is: a CPU op on fewer elements than the
thread's fusion threshold, while no capture records, is computed here at once
with its row of the registry (tensor/ops.py) -- forward, the row's NumPy form on
arrays; backward, the row's derivative on arrays (``derivative``) -- and
anything larger is kept lazy for the engine to fuse. A GPU op is always kept
lazy (every op there is a kernel launch, and fusing is what saves launches), and
so is anything recorded by a capture (a replay repeats kernels only).

Values the policy sends here that are expressions -- a bias added after a matrix
product, a gradient built by a Function's backward -- are computed by ``walk``:
each node of the tree by its NumPy form, a subtree whose work reaches the
threshold by the engine (``engine.realize`` is the one entry for both).

Where a row's NumPy form is slow (``OpDef.numpy_slow``: relu, where), the
evaluator of the CPU may offer a compiled loop over whole arrays
(``Backend.flat_loop``), and the column sums of a bias's gradient
(``Backend.column_sums``); both go through the written backend contract.
"""

from __future__ import annotations

import math
import operator
import threading
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from . import blas, dtypes, environment
from . import capture as recording
from .backends import device_backend
from .caches import memo_table
from .cpu_numpy import SAVER_UFUNCS
from .device import CPU
from .expr import ENGINE, Cast, Dot, Exp, Map, Reduce, Scalar, ViewExp, apply_op, as_exp
from .layout import CONTIGUOUS, Layout, broadcast_axes, broadcast_shapes, contiguous
from .ops import OPS, REDUCTIONS, SAVER_ROWS, OpDef, ReduceDef, user_result
from .plan import NotElementwise, make_plan
from .tensor import Tensor

# The compiled kernels run silently on a NaN or a division by zero; computed here with
# NumPy, the same ops stay silent (rules run on arrays in tensor/ops.py, ops here).
for _module in (r"minitorch_exp\.tensor\.eager", r"minitorch_exp\.tensor\.ops"):
    warnings.filterwarnings("ignore", r".* encountered in ", RuntimeWarning, _module)

#: Elements below which a CPU op is computed at once instead of kept lazy: measured by
#: ``benchmarks/bench_eager.py --sweep``, where a chain of lazy ops starts to beat the
#: same ops computed one by one (docs/eager.md has the table) -- where numba's kernels
#: start to split between threads too (``numba_launch.parallel_min``).
MEASURED_FUSION_THRESHOLD = 3 << 15
THRESHOLD_ENV = "MINITORCH_FUSION_THRESHOLD"


class _Policy(threading.local):
    """This thread's fusion threshold (node/grad_mode.py sets it); the class attribute
    is a new thread's default."""

    threshold = environment.whole_number(THRESHOLD_ENV, MEASURED_FUSION_THRESHOLD,
                                         what="elements; 0 fuses every op")


policy = _Policy()


def realize(e: Exp) -> Tensor:
    """The engine's ``realize`` (``expr.ENGINE``: engine.py imports this module): an
    expression a caller of this module passes is computed by the engine's policy."""
    return ENGINE.realize(e)

NUMBERS = (int, float, bool)  # Python numbers, weak in dtype promotion as in NumPy
_WEAK = {float: 1.0, int: 1, bool: True}  # what a Python number is to dtype promotion
#: (op name, each operand's dtype or Python type) -> the registry's result dtype
_DTYPES = memo_table("eager.dtypes", 4096)
_BROADCASTS = memo_table("eager.broadcasts", 4096)  # two operands' shapes -> the result's
_SUM = REDUCTIONS["sum"]
_FOLDS = memo_table("eager.folds", 256)  # (reduction, dtype) -> _how_to_fold's answer
#: Reductions of many short rows go across a transposed copy (``short_rows``); measured
#: by ``benchmarks/bench_eager.py --only folds``.
SHORT_ROW, MANY_ROWS = 16, 128


def threshold() -> int:
    """This thread's fusion threshold, in elements."""
    return policy.threshold


def now(shape: tuple, device=CPU) -> bool:
    """The policy: whether an op whose work has ``shape`` on ``device`` is computed at
    once (module docstring)."""
    return (math.prod(shape) < policy.threshold and device is CPU
            and recording.this_thread.rec is None)


def computes_now(e: Exp) -> bool:
    """``now`` for an op whose work is the size of ``e`` (written out: backward asks it of
    most gradients)."""
    return (math.prod(e.shape) < policy.threshold and e.device is CPU
            and recording.this_thread.rec is None)


def decision(e: Exp, op: str = "") -> str:
    """The policy's answer for an op (named ``op``) whose work is the size of ``e``, in
    words, naming the evaluator that runs it (``explain()`` shows it)."""
    n, limit = math.prod(e.shape), policy.threshold
    if e.device is not CPU:
        return (f"kept lazy to fuse: on {e.device} every op is a kernel launch (the fusion "
                "threshold applies on the CPU)")
    if recording.active() is not None:
        return "kept lazy to fuse: a capture is recording (a replay repeats kernels only)"
    if n < limit and by_compiled_loop(n, op, e.dtype):
        return (f"computed eagerly: {n} elements, below the fusion threshold of {limit}, "
                f"by one compiled loop (NumPy's form of {op} runs slowly; from "
                f"{COMPILED_FROM} elements)")
    if n < limit:
        return (f"computed eagerly: {n} elements, below the fusion threshold of {limit} "
                "(mt.set_fusion_threshold)")
    return f"kept lazy to fuse: {n} elements, at or above the fusion threshold of {limit}"


def by_compiled_loop(n: int, op: str, dtype: np.dtype) -> bool:
    """Whether the registry op ``op`` on ``n`` elements of ``dtype`` computed at once runs
    the CPU evaluator's compiled loop (``Backend.flat_loop``) rather than its NumPy
    form: never over float16, which numba does not compile (``cpu_numba.compiles``)."""
    return (op in OPS and OPS[op].numpy_slow and n >= COMPILED_FROM
            and device_backend(CPU).name == "numba" and dtype != dtypes.float16)


# ---- forward: an elementwise op of the registry ---------------------------------------

def apply(row: OpDef, values) -> Tensor | None:
    """``row`` over ``values`` (Tensors, expressions and Python numbers, broadcasting as
    NumPy's) computed now when the policy says so: CPU Tensors and Python numbers, a
    result below the threshold, no capture recording. None when laziness
    pays, an operand is an expression, or NumPy refuses (the lazy path then answers,
    with its descriptive errors). Written as one pass over the operands: every op of
    a small model comes here, and its bookkeeping costs as much as NumPy's call."""
    arrays, like, shape = [], None, None
    for v in values:
        t = type(v)
        if t is Tensor:
            if v.device is not CPU:
                return None
            if like is None:
                like, shape = v, v.shape
            elif v.shape != shape:
                shape = _broadcast(shape, v.shape)
                if shape is None:
                    return None
            arrays.append(v.array)
        elif t is float or t is int or t is bool:
            arrays.append(v)
        elif isinstance(v, np.generic) and v.dtype.kind in "biuf":
            arrays.append(v.item())  # a NumPy scalar is a Python number (as_exp)
        else:
            return None
    if like is None or recording.this_thread.rec is not None:
        return None
    if math.prod(shape) >= policy.threshold:
        return None
    if row.check is not None and like.dtype.kind != "f":  # checks refuse integer cases only
        row.check(*[v if type(v) is Tensor else Scalar(a) for v, a in zip(values, arrays)])
    if not shape and row.name in _SCALAR_ROWS:
        out = _scalar(_SCALAR_ROWS[row.name], arrays, like.dtype)
        if out is not None:
            return out
    try:
        result = _row_values(row, arrays) if row.numpy_slow else row.numpy(*arrays)
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not row.builtin:
        result = _user_values(row, result, arrays)
    elif type(result) is not np.ndarray:
        result = np.asarray(result)  # two 0-d operands give a NumPy scalar
    if result.dtype is not like.dtype:  # else the registry's too (test_eager_parity.py)
        dtype = _result_dtype(row, arrays)
        if result.dtype != dtype:
            result = result.astype(dtype)
    if not result.flags.c_contiguous:
        return wrap(result)
    layout = CONTIGUOUS.get(result.shape)  # wrap, spelled out for the everyday result
    if layout is None:
        layout = contiguous(result.shape)
    return Tensor.owning(result.ravel(), result, layout)


def _broadcast(a: tuple, b: tuple) -> tuple | None:
    """The shape ``a`` and ``b`` broadcast to; None if they do not."""
    shape = _BROADCASTS.get((a, b))
    if shape is None:
        try:
            shape = _BROADCASTS.keep((a, b), broadcast_shapes(a, b))
        except ValueError:
            return None
    return shape


#: The binary rows whose NumPy-scalar arithmetic is the ufunc's (one IEEE operation, the
#: same promotion, the same warnings): on 0-d operands it takes 0.1 us, where the ufunc
#: takes 1.0 and making its scalar result an array 0.5 more (``lr * a.grad`` for a scalar
#: parameter; tests/node/test_eager_parity.py::test_a_binary_op_on_0d_operands_...).
_SCALAR_ROWS = {name: getattr(operator, OPS[name].operator) for name in ("add", "sub", "mul",
                                                                        "div")}
_SCALAR_LAYOUT = contiguous(())


def _scalar(fn, operands: list, dtype: np.dtype) -> Tensor | None:
    """A binary row on 0-d arrays and Python numbers by Python's operator on NumPy
    scalars; None where NumPy refuses or the result is not of ``dtype``."""
    x, y = operands
    try:
        result = np.array(fn(x[()] if type(x) is np.ndarray else x,
                             y[()] if type(y) is np.ndarray else y))
    except (TypeError, ValueError, ArithmeticError):
        return None
    if result.dtype is not dtype:
        return None
    return Tensor.owning(result.ravel(), result, _SCALAR_LAYOUT)


def _result_dtype(row: OpDef, arrays) -> np.dtype:
    """The registry's dtype for ``row`` over these operands (as tensor/expr.py's maps)."""
    key = (row.name, *[type(a) if type(a) in NUMBERS else a.dtype for a in arrays])
    dtype = _DTYPES.get(key)
    if dtype is None:
        dtype = _DTYPES.keep(key, row.result_dtype([_WEAK.get(k, k) for k in key[1:]]))
    return dtype


def wrap(arr) -> Tensor:
    """A new CPU Tensor owning ``arr``, an array of a supported dtype NumPy just made (a
    NumPy scalar for a 0-d result); no copy when it is C- or F-contiguous."""
    if type(arr) is not np.ndarray:
        arr = np.asarray(arr)
    if arr.flags.c_contiguous:  # the everyday result, first: every gradient is wrapped
        shape = arr.shape
        layout = CONTIGUOUS.get(shape)
        if layout is None:
            layout = contiguous(shape)
        return Tensor.owning(arr.ravel(), arr, layout)
    if arr.flags.f_contiguous:  # ops on transposed tensors keep their operands' order
        layout = Layout(arr.shape, tuple([s // arr.itemsize for s in arr.strides]))
        return Tensor.owning(arr.ravel(order="K"), arr, layout)  # a view, in memory order
    return wrap(np.ascontiguousarray(arr))


def full(shape: tuple, dtype, value) -> Tensor:
    """A new Tensor of ``shape`` filled with ``value`` (``np.full``: 0.75 us on a few
    elements, ``empty`` and ``fill`` 0.3)."""
    out = np.empty(shape, dtype)
    out.fill(value)
    return wrap(out)


def copy(t: Tensor, dtype) -> Tensor:
    """A new C-ordered Tensor holding ``t``'s values as ``dtype``."""
    return wrap(np.array(t.array, dtype=dtype))


def linear(x: Tensor, weight: Tensor, bias=None) -> Exp:
    """``x @ weight.T + bias`` (``bias`` may be None) as the policy says: computed now,
    C-ordered as a product's result is in PyTorch (so ``.view`` works on it); else the
    product by BLAS with the bias add left lazy, to fuse with what follows."""
    if (bias is None or type(bias) is Tensor) and now(x.shape[:-1] + weight.shape[:1],
                                                      x.device):
        out = blas.matmul(x.array, weight.array.T)
        if bias is not None:
            b = bias.array
            if b.dtype != out.dtype and np.result_type(out, b) != out.dtype:
                out = out + b
            else:
                np.add(out, b, out=out)  # out is the product's own new array
        return wrap(out)
    out = realize(Dot(x, weight.transpose(0, 1)))
    return out if bias is None else out + bias


def matmul(a, b) -> Exp:
    """``a @ b`` of 2-D operands computed now where the policy says of the result, else a
    lazy product: one that is large is written by backward straight into its gradient
    buffer (no temporary the size of a weight). A rule's product (forms.py)."""
    if a.ndim == 2 == b.ndim and _small_product(a.shape[0], b.shape[1], a.device):
        return wrap(blas.matmul(as_array(a), as_array(b)))
    return Dot(a, b)


def matmul_t(a, b) -> Exp:
    """``a.T @ b`` for 2-D ``a`` (a weight's gradient from a batch of rows), as ``matmul``
    decides; computed now, the transpose is NumPy's view, with no Tensor made for it."""
    if a.ndim == 2 == b.ndim and _small_product(a.shape[1], b.shape[1], a.device):
        return wrap(blas.matmul(as_array(a).T, as_array(b)))
    return Dot(a.transpose(0, 1), b)


def _small_product(rows: int, cols: int, device) -> bool:
    """``now`` for a product's (rows, cols) result, written out: every linear's gradient
    asks it twice."""
    return rows * cols < policy.threshold and device is CPU and recording.this_thread.rec is None


def column(g):
    """``g`` (N,) as a column (N, 1), to scale each row of an (N, C) value: for a computed
    ``g`` a Tensor around NumPy's view (no layout walk), else a lazy reshape."""
    if type(g) is Tensor and g.device is CPU:
        return wrap(g.array.reshape(-1, 1))
    return g.reshape(g.shape[0], 1)


def softmax_cross_entropy(z, q) -> tuple[Exp, Exp]:
    """Each row's cross-entropy of logits ``z`` (N, C) against ``q``, with each row's
    softmax, which backward reads: ``(loss, softmax)``. Computed now where the policy
    says; else the row maxima ``m`` and sums ``s`` of ``exp(z - m)`` are each one
    reduction (``z`` may stay lazy: each fuses it), and the loss and the softmax
    ``exp(z - m) / s`` are kept lazy. A class ``q`` gives no weight counts for nothing
    in ``sum(q * c)``: a masked logit (-inf) elsewhere in the row leaves the loss finite,
    as PyTorch's gather of the target's logit does (``0 * -inf`` would be nan)."""
    if type(z) is Tensor and computes_now(z):
        za, qa = z.array, as_array(q)
        m = _fold(REDUCTIONS["max"], za, za.shape, (1,), True)
        c = za - m
        e = OPS["exp"].numpy(c)
        s = _fold(_SUM, e, za.shape, (1,), True)
        target = _fold(_SUM, c * qa, za.shape, (1,), False)
        if np.isnan(target).any():  # a -inf logit met a zero of q: count it as nothing
            target = _fold(_SUM, np.where(qa != 0, c * qa, 0), za.shape, (1,), False)
        loss = OPS["log"].numpy(s.reshape(len(s))) - target
        return wrap(loss), wrap(e / s)
    m = realize(z.max(1, keepdims=True))
    c = z - m
    s = realize(apply_op("exp", c).sum(1, keepdims=True))
    weighted = apply_op("where", apply_op("ne", q, 0.0), c * q, 0.0)
    return apply_op("log", s.reshape(s.shape[0])) - weighted.sum(1), apply_op("exp", z - m) / s


_SAVERS = {"=": np.copyto, **SAVER_UFUNCS}
#: Each in-place saver's row as a Python operator: ``x -= y`` is ``x - y`` written back
#: (node.py records it so under grad). On one element NumPy's scalar arithmetic gives the
#: ufunc's result (the same IEEE operation, promotion and warnings) in 0.1 us where a
#: ufunc writing into a 0-d array takes 0.85 -- the update of every scalar parameter
#: (tests/node/test_eager_parity.py::test_a_0d_in_place_update_at_once_equals_the_engine_s).
SAVER_OPERATORS = {saver: _SCALAR_ROWS[name] for saver, name in SAVER_ROWS.items()}


def assign(dst: Tensor, value, saver: str) -> bool:
    """``dst <saver> value`` (``x -= lr * x.grad`` under no_grad) computed now, for a float
    ``dst`` below the threshold and a float or number ``value`` of its shape (or 0-d), as
    the engine would; False, having done nothing, for anything else (the engine's)."""
    if type(dst) is not Tensor:
        return False
    if type(value) is Tensor:
        if value.shape != dst.shape and value.shape != () or value.dtype.kind != "f":
            return False
        value = value.array
    elif type(value) is Scalar:
        value = value.value
    elif type(value) not in NUMBERS:
        return False
    if (dst.dtype.kind != "f" or saver not in _SAVERS or 0 in dst.layout.strides
            or not computes_now(dst)):
        return False
    dst.storage.before_write()  # realizes lazy values that still read the old numbers
    write, arr = _SAVERS[saver], dst.array
    if write is np.copyto:
        np.copyto(arr, value)
    elif arr.ndim == 0:
        arr[()] = SAVER_OPERATORS[saver](arr[()], value[()] if type(value) is np.ndarray else value)
    else:
        write(arr, value, out=arr)
    return True


def reduce(r: ReduceDef, x, axes: tuple, keepdims: bool) -> Tensor | None:
    """The reduction ``r`` of ``x`` over ``axes`` computed now; None when laziness pays,
    ``x`` is an expression or ``_fold`` cannot (the expression path answers, and says
    why an empty axis cannot be reduced where the row has no identity)."""
    if type(x) is not Tensor or not computes_now(x):
        return None
    return reduce_tensor(r, x, axes, keepdims)


def reduce_tensor(r: ReduceDef, x: Tensor, axes: tuple, keepdims: bool) -> Tensor | None:
    """``reduce`` for a Tensor ``x`` known to be computed now."""
    if not _folds(r, axes) or (not r.empty_ok and 0 in x.shape):
        return None
    return wrap(_fold(r, x.array, x.shape, axes, keepdims))


# ---- backward: gradients are Tensors; the policy decides how each is computed ---------

def gradients(row: OpDef, g, out, args, needs: tuple) -> tuple:
    """The gradients of ``row``'s operands where ``needs`` says, as the policy says:
    computed now where the forward was (its result a Tensor, a built-in row, no
    capture recording), else the rule's expressions, lazy (``OpDef.gradients``)."""
    if (row.builtin and type(out) is Tensor and type(g) is Tensor
            and recording.this_thread.rec is None):
        return derivative(row, g, out, args, needs)
    return row.gradients(g, out, tuple(map(as_exp, args)), needs)


def derivative(row: OpDef, g: Tensor, out: Tensor, args, needs: tuple) -> tuple:
    """The gradients of ``row``'s operands where ``needs`` says (``OpDef.gradients``),
    computed now: its rule run on NumPy arrays (``g``'s, the operands' and the
    result's) and Python numbers. Each is a new Tensor, or ``g`` itself where the rule
    passes it on (``add``). The binary case is written out: every op of backward asks."""
    garr = g.array
    if len(args) == 2:
        a, b = args
        operands = (a.array if type(a) is Tensor else a, b.array if type(b) is Tensor else b)
    else:
        operands = tuple([a.array if type(a) is Tensor else a for a in args])
    found = _compiled_gradients(row, garr, (*operands, out.array), needs) \
        if row.numpy_slow else None
    if found is None:
        found = row.gradients(garr, out.array, operands, needs)
    if len(found) == 2:
        x, y = found
        return (None if x is None else g if x is garr else wrap(x),
                None if y is None else g if y is garr else wrap(y))
    return tuple([r if r is None else g if r is garr else wrap(r) for r in found])


def fold(name: str, x: np.ndarray, axes: tuple, keepdims: bool = False) -> np.ndarray:
    """The reduction ``name`` (a row of ``REDUCTIONS``) of the array ``x`` over ``axes``,
    computed as the engine computes it (``_fold``)."""
    return _fold(REDUCTIONS[name], x, x.shape, axes, keepdims)


def sum_to(g, shape: tuple):
    """``g`` (a Tensor or an expression) summed over the axes broadcasting added to
    ``shape`` (an expand's gradient): at once where the policy says, accumulated wide
    as the engine's ``sum_to``; else kept lazy."""
    if g.shape == shape:
        return g
    if not computes_now(g):
        return g.sum_to(shape)
    return wrap(sum_to_array(as_array(g), shape))


def sum_to_array(g: np.ndarray, shape: tuple) -> np.ndarray:
    """``sum_to`` on an array, computed now."""
    if not shape:  # a 0-d operand (a scalar parameter): every axis, the everyday case
        return _fold(_SUM, g, g.shape, None, False)
    if g.ndim == 2 and shape == g.shape[1:]:  # a bias: every row summed, the other one
        return _fold(_SUM, g, g.shape, (0,), False)
    return _fold(_SUM, g, g.shape, broadcast_axes(shape, g.shape), True).reshape(shape)


def spread(g, shape: tuple, axes: tuple):
    """A reduction's gradient ``g`` (its result's shape, reduced ``axes`` kept as 1 or
    dropped) spread back over ``shape``: at once where the policy says, into a new
    array -- written, not a stride-0 view, as NumPy's ufuncs run on a view at about half
    their contiguous speed (``g * 2`` on 2000 elements: 1.4 us against 0.8) and making
    the view cost more than the writes (1.9 us against 0.6 for a full sum's backward on
    2000 elements, the everyday case); else a lazy broadcast."""
    kept = tuple([1 if i in axes else n for i, n in enumerate(shape)])
    if not now(shape, g.device):
        return g.reshape(kept).broadcast_to(shape)
    g = as_array(g)
    out = np.empty(shape, g.dtype)
    if g.ndim == 0:
        out.fill(g)
    else:
        np.copyto(out, g.reshape(kept))
    return wrap(out)


def add(a, b):
    """``a + b`` for two gradients of one Node: at once where the policy says, else a
    lazy sum."""
    if not computes_now(b):
        return a + b
    return wrap(np.add(as_array(a), as_array(b)))


def as_array(x) -> np.ndarray:
    """``x`` (an array, a NumPy scalar, a Tensor or a small expression) as an ndarray."""
    if type(x) is np.ndarray:
        return x
    if type(x) is Tensor:
        return x.array
    return np.asarray(realize(x).array if isinstance(x, Exp) else x)


# ---- ops NumPy runs slowly: one compiled loop ------------------------------------------

#: Elements from which a row NumPy runs slowly (``OpDef.numpy_slow``: relu, where...) is
#: computed below the threshold by a compiled loop, forward and, where its rule has such
#: an op, backward: relu forward and backward took 0.93-1.14x NumPy's time at 4096
#: elements, 0.84-0.86x at 8192, 0.53-0.55x at 65536 (``bench_eager.py --only rows``).
COMPILED_FROM = 1 << 13
#: (row, what is computed, operand dtypes) -> its ``_Compiled`` calls; False: none apply
_COMPILED = memo_table("eager.compiled", 256, stale_on_invalidate=True)


class _Compiled(NamedTuple):
    """One value computed by a compiled loop over whole C-contiguous arrays of one shape
    (``Backend.flat_loop``): the arrays of a call each leaf of its Plan reads, in
    order (``picks``), and the Plan's scalars, which are the rule's constants."""

    loop: Callable
    picks: tuple[int, ...]
    scalars: list

    def __call__(self, arrays) -> np.ndarray:
        args = []
        for k in self.picks:
            args += (arrays[k].reshape(-1), 0)
        return self.loop(arrays[0].shape, args + self.scalars)


def _flat_arrays(arrays: tuple) -> bool:
    """Whether ``arrays`` are all C-contiguous arrays of one shape, of at least
    ``COMPILED_FROM`` elements (no Python numbers: their values would be the Plan's
    scalars, which ``_Compiled`` keeps)."""
    first = arrays[0]
    if type(first) is not np.ndarray or first.size < COMPILED_FROM:
        return False
    return all(type(a) is np.ndarray and a.shape == first.shape and a.flags.c_contiguous
               for a in arrays)


def _compiled_calls(key: tuple, build: Callable, arrays: tuple) -> tuple | None:
    """The ``_Compiled`` calls (None for a value not wanted) of the values ``build``
    makes as expressions over ``arrays`` wrapped as tensors, worked out on the first
    call with ``key``; None where one does not apply. Invariant: a rule of a row in
    ``OpDef.numpy_slow`` builds the same tree for every call with the same ``key``."""
    calls = _COMPILED.get(key)
    if calls is None:
        calls = _COMPILED.keep(key, _work_out(build, arrays))
    return calls or None


def _work_out(build: Callable, arrays: tuple) -> tuple | bool:
    backend = device_backend(CPU)
    tensors = [wrap(a) for a in arrays]
    calls = []
    for e in build(tensors):
        if e is not None:
            e = _compile(e, tensors, backend)
            if e is None:
                return False
        calls.append(e)
    return tuple(calls)


def _compile(e, tensors: list, backend) -> _Compiled | None:
    """The compiled loop of ``e``, an expression over ``tensors``; None where there is
    none: a value passed on as it is, a matrix product or a reduction in the tree, no
    loop offered by the CPU's evaluator (``Backend.flat_loop``), or a leaf the rule
    made itself (a broadcast view)."""
    if type(e) is Tensor:
        return None
    try:
        plan, leaves, scalars = make_plan(e, 1)
    except NotElementwise:
        return None
    picks = [k for leaf in leaves for k, t in enumerate(tensors) if t is leaf]
    loop = backend.flat_loop(plan, e.dtype) if len(picks) == len(leaves) else None
    if loop is None:
        return None
    return _Compiled(loop, tuple(picks), list(scalars))


def _row_values(row: OpDef, operands):
    """``row.numpy(*operands)`` for a row NumPy runs slowly: by its compiled loop on
    arrays of ``COMPILED_FROM`` elements."""
    if _flat_arrays(operands):
        calls = _compiled_calls((row.name, "forward", *[a.dtype for a in operands]),
                                lambda ts: (Map(row, tuple(ts)),), operands)
        if calls is not None:
            return calls[0](operands)
    return row.numpy(*operands)


def _compiled_gradients(row: OpDef, g: np.ndarray, arrays: tuple, needs: tuple):
    """``derivative`` for a row NumPy runs slowly, its rule built over the arrays
    as expressions and each gradient computed by its compiled loop; None where that
    does not apply."""
    every = (g, *arrays)
    if not _flat_arrays(every):
        return None
    calls = _compiled_calls(
        (row.name, needs, *[a.dtype for a in every]),
        lambda ts: row.gradients(ts[0], ts[-1], tuple(ts[1:-1]), needs), every)
    return None if calls is None else tuple([c if c is None else c(every) for c in calls])


# ---- other values below the threshold: expressions evaluated by a walk --------------

def work(e: Exp) -> Exp:
    """What decides whether the root of ``e`` runs now: a reduction's input (fused into
    its pass when large), else the result (a matrix product gains nothing from the
    engine but a destination to write into, which a value computed now has not)."""
    return e.x if type(e) is Reduce else e


def walk(e, fuse: Callable) -> np.ndarray:
    """The values of ``e`` as an ndarray: each node by its NumPy form, a subtree whose
    work reaches the threshold by ``fuse`` (the engine's ``realize``)."""
    t = type(e)
    if t is Tensor:
        return e.array
    if t is Scalar:
        return e.value
    if e.realized is not None:
        return e.realized.array
    if not computes_now(work(e)):
        return fuse(e).array
    if t is Map:
        args = [walk(a, fuse) for a in e.args]
        out = e.op.numpy(*args)
        if not e.op.builtin:
            out = _user_values(e.op, out, args)
    elif t is Cast:
        out = np.asarray(walk(e.x, fuse)).astype(e.dtype)
    elif t is Reduce and _folds(e.reduction, e.axes):
        out = _fold(e.reduction, walk(e.x, fuse), e.x.shape, e.axes, True).reshape(e.shape)
    elif t is Dot:
        out = blas.matmul(np.asarray(walk(e.a, fuse)), np.asarray(walk(e.b, fuse)))
    elif t is ViewExp:
        base = e.base.realized if e.base.realized is not None else wrap(walk(e.base, fuse))
        out = e.fn(base).array.copy()  # a view of memory that may be another's
    else:  # argmax, or an expression kind this walk does not know: the engine's
        return fuse(e).array
    return out if getattr(out, "dtype", None) == e.dtype else np.asarray(out).astype(e.dtype)


def _user_values(row: OpDef, result, arrays) -> np.ndarray:
    """A user op's result, checked (``user_result``) and made its own: copied if it is
    a broadcast or (a view of) one of its operands."""
    result = user_result(row, result, np.broadcast_shapes(*map(np.shape, arrays)))
    if not result.flags.writeable or any(
            type(a) is np.ndarray and np.may_share_memory(result, a) for a in arrays):
        return np.array(result)
    return result


def _folds(r: ReduceDef, axes: tuple) -> bool:
    """Whether ``_fold`` computes ``r`` over ``axes``: the row names the op that folds it
    (argmax names none) and there is an axis to reduce."""
    return r.combine is not None and len(axes) > 0


def _fold(r: ReduceDef, x: np.ndarray, shape: tuple, axes: tuple | None, keepdims: bool):
    """The reduction ``r`` of ``x`` over ``axes`` (None: every one) as the engine
    computes it, with the ufunc of the row it folds with (``add``, ``maximum``...): sums
    accumulate wide (float64 for floats), a mean divides after."""
    if r is _SUM and axes == (0,):  # a bias's gradient, first: it is summed every step
        sums = _column_sums(x)
        if sums is not None:
            return sums[None] if keepdims else sums
    how = _FOLDS.get((r.name, x.dtype))
    if how is None:
        how = _FOLDS.keep((r.name, x.dtype), _how_to_fold(r, x.dtype))
    reduce, wide, result = how
    if x.ndim > 1 and short_rows(x.shape, axes, x.flags.c_contiguous):
        across = np.ascontiguousarray(x.reshape(-1, x.shape[-1]).T)
        out = reduce(across, axis=0, dtype=wide).reshape(x.shape[:-1] + (1,) * keepdims)
    else:
        out = reduce(x, axis=axes, dtype=wide, keepdims=keepdims)
    if r.divide:
        out = out / math.prod(shape if axes is None else [shape[a] for a in axes])  # 0/0: nan
    return np.asarray(out, dtype=result)  # a 0-d array for a full reduce


def short_rows(shape: tuple, axes: tuple | None, c_order: bool) -> bool:
    """Whether ``_fold`` reduces the last axis of a C-ordered array across a transposed
    copy: an axis of 2 to ``SHORT_ROW`` elements, in at least ``MANY_ROWS`` rows.
    NumPy runs one short inner loop per row (the row maxima of (128, 10) logits: 6.6
    us); across the copy, one vector loop per column (2.1 us, the copy included; sums
    in float64 4.0 -> 2.5 us). Maxima are exact either way; a sum adds the same terms
    in another order, into the same wide accumulator."""
    return (c_order and axes == (len(shape) - 1,) and 2 <= shape[-1] <= SHORT_ROW
            and math.prod(shape[:-1]) >= MANY_ROWS)


def _column_sums(x: np.ndarray) -> np.ndarray | None:
    """``x`` summed over its rows by the CPU evaluator's own loop
    (``Backend.column_sums``), for a C-ordered 2-D float array of two columns or
    more, as a bias's gradient is; None where it has none (NumPy's reduce)."""
    if x.ndim != 2 or x.dtype not in _COLUMN_SUM_DTYPES or x.shape[1] < 2 \
            or not x.flags.c_contiguous:
        return None
    plan = _LEAF_PLANS.get(x.dtype)
    if plan is None:  # ``result = in0`` over a 2-D leaf: the kernel's input
        plan = _LEAF_PLANS.keep(x.dtype, make_plan(wrap(x), 2)[0])
    return device_backend(CPU).column_sums(x, plan)


_COLUMN_SUM_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: dtype -> the Plan of one 2-D leaf, which keeps its column-sum kernel
_LEAF_PLANS = memo_table("eager.leaf_plans", 8, stale_on_invalidate=True)


def _how_to_fold(r: ReduceDef, dtype: np.dtype) -> tuple:
    """``_fold``'s ufunc.reduce, accumulator dtype (None: the input's) and result dtype
    for ``r`` over ``dtype``."""
    wide = None if r.accumulate == "same" else r.accumulator_dtype(dtype)
    return OPS[r.combine].numpy.reduce, wide, r.result_dtype(dtype)

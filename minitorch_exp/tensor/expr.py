"""Lazy expression trees: what to compute, not how or where.

Arithmetic on tensors builds a tree of ``Exp`` nodes and computes nothing.
Each node is checked when it is built (the seed's ExpInfo / TypeCheck /
ShapeCheck): shapes must broadcast, devices must agree, dtypes promote as in
NumPy. Evaluation happens only at assignment (``dst[...] = e``, ``dst += e``)
or ``e.eval()``, in ``engine.py``.

Kinds decide fusion (as mshadow's ``type::kRValue < kMapper < kComplex``):

* ``RVALUE``: a Tensor, read in place;
* ``MAPPER``: elementwise maps, casts and scalars -- these fuse into one pass;
* ``COMPLEX``: dot and reductions -- a boundary; nested inside a map they are
  evaluated first into a temporary.

Views of an elementwise expression (``(a + b).T``) are pushed down to its
leaves: a view of a map is the same map over views of its inputs. So views
never stop fusion, except a reshape whose inputs cannot be viewed that way.
"""

from __future__ import annotations

import math
import numbers
import types

import numpy as np

from . import dtypes
from .caches import memo_table, on_invalidate
from .layout import (
    broadcast_axes,
    broadcast_shapes,
    infer_shape,
    normalize_axes,
    normalize_axis,
    normalize_shape,
)
from .ops import OPS, REDUCTIONS, OpDef, ReduceDef, module_globals, named_function, use_expressions
from .tokens import TREE, TreeToken, leaf_tokens, opaque_token

RVALUE, MAPPER, COMPLEX = 0, 1, 3


class _Engine:
    """The engine's entry points, installed by tensor/engine.py when it is imported. The
    engine is built on this module and on tensor.py, so they reach it through here
    rather than import it (tensor/__init__.py imports the engine with the package)."""

    evaluate = assign = evaluate_copy = realize = None


ENGINE = _Engine()

#: Goes up whenever an existing tree may start to evaluate differently: a node is
#: realized (it is then read as its remembered tensor) or an op is unregistered.
#: A prepared assignment (engine.py) is reused only while it is unchanged.
EPOCH = 0


def new_epoch() -> None:
    global EPOCH
    EPOCH += 1


on_invalidate(new_epoch)  # a change of evaluator or op also ends prepared assignments


def use_explainer(explain) -> None:
    """explain.py hands over its ``explain`` when it is imported (with the package), so
    ``Exp.explain`` needs no import of it: the lowering core never imports explain."""
    global _explainer
    _explainer = explain


def set_realized(e, tensor) -> None:
    """Remember ``tensor`` as the value of the node ``e``."""
    e.realized = tensor
    new_epoch()


def _operator(op: OpDef, reflected: bool = False):
    """The method behind ``a <op> b`` (``reflected``: ``b <op> a``) for an Exp ``a``.

    A Python number or an expression on the other side -- every operand of a
    training loop's statements -- goes straight to a ``Map``; anything else
    through ``binary``, which converts arrays or answers NotImplemented.
    """
    name = op.name

    def method(self, other):
        if type(other) in _WEAK_STANDIN:
            scalar = _SCALARS.get((type(other), other))
            other = scalar if scalar is not None else _new_scalar(name, self, other)
        elif not isinstance(other, Exp):
            return binary(name, other, self) if reflected else binary(name, self, other)
        return Map(op, (other, self) if reflected else (self, other))

    method.__name__ = f"__{'r' if reflected else ''}{op.operator}__"
    method.__qualname__ = f"Exp.{method.__name__}"
    return method if op.check is None or reflected else _checked(method, op.check)


def _checked(method, check):
    """``method`` after the op's build-time check (pow: ``x ** -1`` for an integer x)."""
    def checked(self, other):
        check(self, other)
        return method(self, other)
    checked.__name__, checked.__qualname__ = method.__name__, method.__qualname__
    return checked


class Exp:
    """Base of every expression. Subclasses set ``shape``, ``dtype``, ``device``."""

    __slots__ = ("shape", "dtype", "device")
    kind = MAPPER
    prepared = None  # Map and Cast remember their last assignment here (engine.py)
    __array_priority__ = 100  # so ndarray + Exp defers to Exp.__radd__
    __hash__ = object.__hash__

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    # ---- arithmetic builds trees: each elementwise op of the registry is a method
    # (``x.exp()``, ``x.maximum(y)``) and, where it is one, an operator (``x + y``);
    # so is each reduction (``x.sum(axis)``). All are made from the rows of
    # tensor/ops.py by ``_install_exp_surface`` below, not written here.

    def __pos__(self):
        return self

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __bool__(self):
        if self.numel() != 1:
            raise ValueError(f"the truth value of an expression of shape {self.shape} is "
                             "ambiguous; use .any() or .all() after .numpy()")
        return bool(self.item())

    def astype(self, dtype) -> Exp:
        dtype = dtypes.as_dtype(dtype)
        return self if dtype == self.dtype else Cast(self, dtype)

    # ---- reductions: ``sum``, ``max``... are made from REDUCTIONS (see above) --
    def sum_to(self, shape) -> Exp:
        """Sum over the dims that broadcasting added, giving ``shape`` (gradient un-broadcast)."""
        shape = normalize_shape((shape,)) if not isinstance(shape, tuple) else shape
        if shape == self.shape:
            return self
        if broadcast_shapes(shape, self.shape) != self.shape:
            raise ValueError(f"sum_to: shape {self.shape} is not a broadcast of {shape}")
        return Reduce(_SUM, self, broadcast_axes(shape, self.shape), False, out_shape=shape)

    # ---- views: pushed to the leaves (see module docstring) -----------------
    def _view(self, fn, what: str) -> Exp:
        raise NotImplementedError

    def broadcast_to(self, *shape) -> Exp:
        shape = normalize_shape(shape)
        if shape == self.shape:
            return self
        if broadcast_shapes(self.shape, shape) != shape:
            raise ValueError(f"cannot broadcast shape {self.shape} to {shape}")
        return self._view(lambda e: e.broadcast_to(shape), f"broadcast_to{shape}")

    def expand(self, *shape) -> Exp:
        shape = normalize_shape(shape)
        lead = len(shape) - self.ndim
        full = tuple(self.shape[i - lead] if n == -1 and i >= lead else n
                     for i, n in enumerate(shape))
        return self.broadcast_to(full)

    def transpose(self, i: int = 0, j: int = 1) -> Exp:
        return self._view(lambda e: e.transpose(i, j), f"transpose({i}, {j})")

    def permute(self, *dims) -> Exp:
        dims = normalize_shape(dims)
        return self._view(lambda e: e.permute(*dims), f"permute{dims}")

    @property
    def T(self) -> Exp:
        return self.permute(*reversed(range(self.ndim)))

    def squeeze(self, axis=None) -> Exp:
        return self._view(lambda e: e.squeeze(axis), "squeeze")

    def unsqueeze(self, axis: int) -> Exp:
        return self._view(lambda e: e.unsqueeze(axis), f"unsqueeze({axis})")

    def reshape(self, *shape) -> Exp:
        shape = infer_shape(normalize_shape(shape), self.numel())
        if shape == self.shape:
            return self
        pushed = self._try_view_reshape(shape)
        if pushed is not None:
            return pushed
        return ViewExp(self, lambda t: t.reshape(shape), f"reshape{shape}",
                       "reshape: an input's strides cannot show the new shape without a copy")

    def view(self, *shape) -> Exp:
        return self.reshape(*shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Exp:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = (normalize_axis(d, self.ndim, self.shape) for d in (start_dim, end_dim))
        shape = self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:]
        return self.reshape(shape)

    def _try_view_reshape(self, shape) -> Exp | None:
        return None

    # ---- evaluation ---------------------------------------------------------
    def eval(self):
        """Materialize into a new Tensor (one fused pass where the tree allows)."""
        return ENGINE.evaluate(self)

    def numpy(self) -> np.ndarray:
        return self.eval().numpy()

    def item(self):
        return self.eval().item()

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        arr = self.eval().numpy()
        return arr if dtype is None else arr.astype(dtype)

    def explain(self) -> str:
        """A readable account of the tree, its fusion, the Plan and the generated code."""
        return _explainer(self)

    def __repr__(self) -> str:
        values = np.array2string(self.numpy(), separator=", ", prefix="         ")
        return (f"<lazy {describe(self)}>\n"
                f"  values: {values}, shape={self.shape}, dtype={self.dtype.name}, "
                f"device='{self.device}'")

    def __str__(self) -> str:
        return str(self.numpy())

    def children(self) -> tuple[Exp, ...]:
        """The operands, in order: with ``rebuild`` the one traversal contract of a node
        kind (``lower.py`` walks every tree through these two)."""
        return ()

    def rebuild(self, children: tuple) -> Exp:
        """A node like this one over ``children`` (a leaf has none: itself)."""
        return self


def describe(e: Exp) -> str:
    """One-line label of a node (for repr, explain and graph drawings)."""
    if isinstance(e, Map):
        return e.op.name
    if isinstance(e, Scalar):
        return repr(e.value)
    if isinstance(e, Cast):
        return f"astype({e.dtype.name})"
    if isinstance(e, Reduce):
        return f"{e.op}(axis={e.axes}{', keepdims' if e.keepdims else ''})"
    if isinstance(e, Dot):
        return "matmul"
    if isinstance(e, ViewExp):
        return e.what
    return f"tensor{e.shape}"


class Scalar(Exp):
    """A Python number. It is *weak*: it takes the dtype of the tensors it meets."""

    __slots__ = ("value",)
    shape = ()     # class attributes in place of Exp's slots: a scalar is built per
    device = None  # operator, so its constructor sets only what varies

    _DEFAULT_DTYPES = {float: dtypes.float64, int: dtypes.int64, bool: dtypes.bool_}

    def __init__(self, value):
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            value = float(value)  # as NumPy does when it meets a float array
        self.value = value
        self.dtype = self._DEFAULT_DTYPES.get(type(value)) or dtypes.result_type(value)

    @staticmethod
    def interned(value) -> Scalar:
        """``Scalar(value)``, shared by every operator that meets the same number (a
        scalar is immutable): a training loop's constants are made once. Zeros are
        not shared, since ``-0.0 == 0.0``."""
        scalar = Scalar(value)
        return _SCALARS.keep((type(value), value), scalar) if value else scalar

    def _view(self, fn, what):
        return self

    def broadcast_to(self, *shape):
        return self

    def _try_view_reshape(self, shape):
        return self


class Map(Exp):
    """An elementwise op over 1-3 operands, broadcast to a common shape.

    ``realized`` (here and on Cast and complex nodes) remembers the tensor this
    node was evaluated to, so a value shared by several trees is computed once.
    """

    __slots__ = ("op", "args", "realized", "prepared", "token", "leaves", "scalars", "epoch")

    def __init__(self, op: OpDef, args: tuple[Exp, ...]):
        self.op = op
        self.args = args
        self.realized = self.prepared = None
        # Build-time checks, memoized on the operands' tokens (tokens.py): a training
        # loop pays one dict lookup per op. Each operand also adds its leaves and
        # scalar values (``_map_operand``), so a statement needs no walk
        # (``plan.statement_key``). Most ops have two operands; for them the two
        # commonest cases of ``_map_operand`` are inlined: a call per operand was a
        # visible share of building a map (docs/eager.md, "Where the time of an op
        # goes").
        if len(args) == 2:
            x, y = args
            if type(x) is Scalar:
                kx, lx, sx = type(x.value), (), (x.value,)
            elif type(x) is Map and x.realized is None and x.epoch == EPOCH:
                kx, lx, sx = x.token, x.leaves, x.scalars
            else:
                kx, lx, sx = _map_operand(x)
            if type(y) is Scalar:
                ky, ly, sy = type(y.value), (), (y.value,)
            elif type(y) is Map and y.realized is None and y.epoch == EPOCH:
                ky, ly, sy = y.token, y.leaves, y.scalars
            else:
                ky, ly, sy = _map_operand(y)
            sig = (op.name, op.result, kx, ky)
            leaves = lx + ly if lx is not None and ly is not None else None
            scalars = sx + sy
        else:
            sig = (op.name, op.result)
            leaves, scalars = (), ()
            for a in args:
                k, below, values = _map_operand(a)
                sig += (k,)
                leaves = leaves + below if leaves is not None and below is not None else None
                scalars += values
        info = _MAP_INFO.get(sig)
        if info is None:
            shape, dtype = _check_shapes(op.name, args), _map_dtype(op, args)
            device = _check_devices(op.name, args)
            info = _MAP_INFO.keep(sig, (shape, dtype, device,
                                        _tree_token(sig, shape, dtype, device)))
        self.shape, self.dtype, self.device, self.token = info
        if leaves is not None and (len(leaves) > MAX_GATHERED_LEAVES
                                   or info[3].plan_tokens is None):
            leaves = None
        # Leaves and scalars serve only a statement key made without a walk; a map
        # that cannot have one keeps neither, so no map holds its whole ancestry.
        self.leaves = leaves
        self.scalars = scalars if leaves is not None else ()
        self.epoch = EPOCH

    def children(self):
        return self.args

    def rebuild(self, children):
        return Map(self.op, tuple(children))

    def _view(self, fn, what):
        return Map(self.op, tuple(
            a if type(a) is Scalar else fn(a.broadcast_to(self.shape)) for a in self.args))

    def broadcast_to(self, *shape):
        shape = normalize_shape(shape)
        if shape == self.shape:
            return self
        broadcast_shapes(self.shape, shape)  # raises when impossible
        return Map(self.op, tuple(a.broadcast_to(shape) for a in self.args))

    def _try_view_reshape(self, shape):
        args = []
        for a in self.args:
            if type(a) is not Scalar:
                a = a.broadcast_to(self.shape)._try_view_reshape(shape)
                if a is None:
                    return None
            args.append(a)
        return Map(self.op, tuple(args))


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _new_scalar(name: str, tensor: Exp, value) -> Scalar:
    """The Scalar for a number an operator meets for the first time (then interned)."""
    if _beyond_int64(value):
        _check_big_int(name, (tensor,), value)
        return Scalar(value)
    return Scalar.interned(value)


def _beyond_int64(value) -> bool:
    return type(value) is int and not _INT64_MIN <= value <= _INT64_MAX


def _check_big_int(name: str, tensors, value: int) -> None:
    """A Python int beyond int64 meets a float tensor as a float, and is refused where
    no operand is float (NumPy's rule; kernels take ints as int64)."""
    if tensors and all(t.dtype.kind != "f" for t in tensors):
        raise OverflowError(f"{name}: Python integer {value} is out of bounds for "
                            f"{tensors[0].dtype.name} (operand: {operand_str(tensors[0])})")


def _map_operand(a) -> tuple:
    """What an operand adds to its map's signature, leaves and scalars (``Map``);
    leaves None: they cannot be gathered (a node below realized since, a cast,
    something not elementwise)."""
    t = type(a)
    if t is Scalar:
        return type(a.value), (), (a.value,)
    if t is Map and a.realized is None:
        return a.token, (a.leaves if a.epoch == EPOCH else None), a.scalars
    if a.kind != RVALUE:
        if a.realized is None:
            return (a.shape, a.dtype, a.device), None, ()
        a = a.realized  # computed before: read the remembered tensor
    return (a._leaf_tokens or leaf_tokens(a))[TREE], (a,), ()


class Cast(Exp):
    """``astype``: convert each element; fuses like a map."""

    __slots__ = ("x", "realized", "prepared")

    def __init__(self, x: Exp, dtype):
        self.x = x
        self.realized = self.prepared = None
        self.shape = x.shape
        self.dtype = dtypes.as_dtype(dtype)
        self.device = x.device

    def children(self):
        return (self.x,)

    def rebuild(self, children):
        return Cast(children[0], self.dtype)

    def _view(self, fn, what):
        return Cast(fn(self.x), self.dtype)

    def broadcast_to(self, *shape):
        return Cast(self.x.broadcast_to(*shape), self.dtype)

    def _try_view_reshape(self, shape):
        x = self.x._try_view_reshape(shape)
        return None if x is None else Cast(x, self.dtype)


class Complex(Exp):
    """A fusion boundary: its value is computed by its own kernel (BLAS, a reduction)."""

    __slots__ = ("realized",)
    kind = COMPLEX
    realized: Exp | None

    def _view(self, fn, what):
        return ViewExp(self, fn, what, None)


class ViewExp(Complex):
    """A view of an expression that cannot be pushed to its leaves.

    The base is evaluated into a temporary Tensor, then viewed. ``reason`` says
    why the view was not pushed down (shown by ``explain``).
    """

    __slots__ = ("base", "fn", "what", "reason")

    def __init__(self, base: Exp, fn, what: str, reason: str | None):
        self.base, self.fn, self.what = base, fn, what
        self.realized = None
        self.reason = reason or f"{what} of a {describe(base)} result, which is computed first"
        from .tensor import Tensor
        self.shape = fn(Tensor.meta(base.shape, base.dtype)).shape
        self.dtype, self.device = base.dtype, base.device

    def children(self):
        return (self.base,)

    def rebuild(self, children):
        return ViewExp(children[0], self.fn, self.what, self.reason)


class Dot(Complex):
    """Matrix product with NumPy's ``matmul`` shape rules (1-D, 2-D and batched)."""

    __slots__ = ("a", "b")

    def __init__(self, a: Exp, b: Exp):
        self.a, self.b = a, b
        self.realized = None
        self.device = _check_devices("matmul", (a, b))
        self.shape = _matmul_shape(a, b)
        self.dtype = dtypes.result_type(a.dtype, b.dtype)

    def children(self):
        return (self.a, self.b)

    def rebuild(self, children):
        return Dot(*children)

    def transpose(self, i: int = 0, j: int = 1) -> Exp:
        if {i % self.ndim, j % self.ndim} == {self.ndim - 2, self.ndim - 1}:
            return self._swapped()
        return super().transpose(i, j)

    def permute(self, *dims) -> Exp:
        dims = tuple(d % self.ndim for d in normalize_shape(dims))
        if dims == tuple(range(self.ndim - 2)) + (self.ndim - 1, self.ndim - 2):
            return self._swapped()
        return super().permute(*dims)

    def _swapped(self) -> Exp:
        """``(a @ b)^T = b^T @ a^T``: the view moves into the product, so BLAS writes the
        transposed result directly instead of a temporary that is then copied."""
        if self.a.ndim < 2 or self.b.ndim < 2 or self.realized is not None:
            return ViewExp(self, lambda t: t.transpose(-1, -2), "transpose(-1, -2)", None)
        return Dot(self.b.transpose(-1, -2), self.a.transpose(-1, -2))


class Reduce(Complex):
    """A reduction of ``REDUCTIONS`` (``sum``, ``mean``, ``max``...) over axes of a (fused)
    input; ``op`` is its name, ``reduction`` its row."""

    __slots__ = ("op", "x", "axes", "keepdims")

    def __init__(self, op: ReduceDef | str, x: Exp, axis=None, keepdims: bool = False,
                 out_shape=None):
        r = REDUCTIONS[op] if type(op) is str else op
        self.op, self.x = r.name, x
        self.realized = None
        if r.one_axis and axis is not None and not isinstance(axis, int):
            raise ValueError(f"{r.name} takes one axis or None, got {axis!r}")
        self.axes = normalize_axes(axis, x.ndim, x.shape)
        self.keepdims = keepdims
        kept = tuple(1 if i in self.axes else n for i, n in enumerate(x.shape))
        if not r.empty_ok and any(x.shape[a] == 0 for a in self.axes):
            raise ValueError(f"{r.name}: cannot reduce over a size-0 axis of shape {x.shape} "
                             "(the operation has no identity)")
        if out_shape is None:
            out_shape = kept if keepdims else tuple(
                n for i, n in enumerate(x.shape) if i not in self.axes)
        self.shape = out_shape
        self.device = x.device
        self.dtype = r.result_dtype(x.dtype)

    @property
    def reduction(self) -> ReduceDef:
        return REDUCTIONS[self.op]

    def children(self):
        return (self.x,)

    def rebuild(self, children):
        """This reduction over a new input (same axes, shape and dtype; not realized)."""
        r = Reduce.__new__(Reduce)
        r.op, r.x, r.axes, r.keepdims, r.realized = self.op, children[0], self.axes, \
            self.keepdims, None
        r.shape, r.dtype, r.device = self.shape, self.dtype, self.device
        return r

    @property
    def kept_shape(self):
        return tuple(1 if i in self.axes else n for i, n in enumerate(self.x.shape))


_SUM = REDUCTIONS["sum"]  # sum_to


# ---- construction helpers with build-time checks ----------------------------

def operand_str(e) -> str:
    if type(e) is Scalar:
        return f"scalar {e.value!r}"
    return f"{e.shape} {e.dtype.name} on {e.device}"


_WEAK_STANDIN = {float: 1.0, int: 1, bool: True}
_SCALARS = memo_table("expr.scalars", 4096)  # (type, value) -> Scalar (Scalar.interned)
#: map signature -> (shape, dtype, device, token): a map's build-time checks
_MAP_INFO = memo_table("expr.map_info", 50_000)
_MAP_DTYPES = memo_table("expr.map_dtypes", 4096)  # (op, result rule, operand kinds) -> dtype

#: A map gathers at most this many leaves; a bigger tree is walked when assigned.
MAX_GATHERED_LEAVES = 32
#: A map's token spells out at most this many plan tokens (a longer tree's is opaque
#: and the tree is walked when assigned): tokens stay small along any chain.
MAX_PLAN_TOKENS = 64


def _tree_token(sig: tuple, shape, dtype, device) -> TreeToken:
    """The token of a map with signature ``sig`` (op name, result rule, operand tokens).

    A map over something not elementwise, or too big to spell out, gets the opaque
    token of its shape, dtype and device: one per such triple, so a long chain's
    maps share it and the memos keyed by it stay small.
    """
    plan_tokens: tuple | None = ()
    for tok in sig[2:]:
        if type(tok) is type:  # a scalar
            plan_tokens += (tok,)
        elif type(tok) is TreeToken and tok.plan_tokens is not None:
            plan_tokens += tok.plan_tokens
        else:  # not elementwise
            return opaque_token(shape, dtype, device)
    if len(plan_tokens) >= MAX_PLAN_TOKENS:
        return opaque_token(shape, dtype, device)
    return TreeToken((*plan_tokens, sig[0]))


def _map_dtype(op: OpDef, args) -> np.dtype:
    """The op's result dtype, memoized: it depends only on operand dtypes and scalar *types*."""
    kinds = tuple(type(a.value) if type(a) is Scalar else a.dtype for a in args)
    key = (op.name, op.result, kinds)
    dtype = _MAP_DTYPES.get(key)
    if dtype is None:
        dtype = _MAP_DTYPES.keep(key, op.result_dtype(
            [_WEAK_STANDIN.get(k, k) if isinstance(k, type) else k for k in kinds]))
    return dtype


def _check_shapes(name: str, args) -> tuple[int, ...]:
    shapes = [a.shape for a in args if type(a) is not Scalar]
    if len(shapes) == 1 or (len(shapes) == 2 and shapes[0] == shapes[1]):
        return shapes[0]
    try:
        return broadcast_shapes(*shapes)
    except ValueError:
        listed = " and ".join(str(s) for s in shapes)
        raise ValueError(f"{name}: shapes {listed} cannot broadcast "
                         f"(operands: {'; '.join(operand_str(a) for a in args)})") from None


def _check_devices(name: str, args):
    """The one device of ``args``; None where they are all numbers, so that an
    expression of numbers alone (``lo < hi``) joins a tensor on any device."""
    first = args[0].device
    if all(a.device is first for a in args[1:]) and first is not None:
        return first
    devices = {a.device for a in args if a.device is not None}
    if len(devices) > 1:
        raise ValueError(f"{name}: operands are on different devices "
                         f"({'; '.join(operand_str(a) for a in args)}); move them with .to()")
    return devices.pop() if devices else None


def _matmul_shape(a: Exp, b: Exp):
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must have at least 1 dim, got shapes {a.shape} "
                         f"and {b.shape}")
    k_a = a.shape[-1]
    k_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if k_a != k_b:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align "
                         f"({k_a} != {k_b}) (operands: {operand_str(a)}; {operand_str(b)})")
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dims of {a.shape} and {b.shape} cannot broadcast") \
            from None
    rows = (a.shape[-2],) if a.ndim > 1 else ()
    cols = (b.shape[-1],) if b.ndim > 1 else ()
    return batch + rows + cols


def as_exp(x) -> Exp:
    """Wrap Python numbers as weak scalars and NumPy arrays as tensors."""
    if isinstance(x, Exp):
        return x
    if type(x) in _WEAK_STANDIN:
        return Scalar(x)
    if isinstance(x, (bool, numbers.Number, np.generic)) and not isinstance(x, complex):
        return Scalar(x.item() if isinstance(x, np.generic) else x)
    if isinstance(x, np.ndarray):
        from .tensor import from_numpy
        return from_numpy(x)
    raise TypeError(f"cannot use a {type(x).__name__} in a tensor expression")


def apply_op(name: str, *operands) -> Exp:
    """Apply a registered elementwise op (built-in or user-defined) lazily."""
    op = OPS.get(name)
    if op is None:
        raise KeyError(f"no op named {name!r}; registered: {sorted(OPS)}")
    return _apply(op, operands)


def _apply(op: OpDef, operands: tuple) -> Exp:
    if len(operands) != op.arity:
        raise TypeError(f"{op.name} takes {op.arity} operands, got {len(operands)}")
    args = tuple([x if isinstance(x, Exp) else as_exp(x) for x in operands])
    if op.check is not None:
        op.check(*args)
    for x in operands:
        if type(x) is int and not _INT64_MIN <= x <= _INT64_MAX:  # before Scalar: a float
            _check_big_int(op.name, [a for a in args if type(a) is not Scalar], x)
    for a in args:
        if type(a) is not Scalar:
            return Map(op, args)
    from .tensor import tensor  # only scalars: the first becomes a 0-d tensor
    return Map(op, (tensor(args[0].value),) + args[1:])


def binary(name: str, a, b):
    """The operators' path: ``a op b`` with one side an Exp (NotImplemented for others)."""
    if not isinstance(a, Exp):
        a = _operand(a)
    if not isinstance(b, Exp):
        b = _operand(b)
    if a is None or b is None:
        return NotImplemented
    return Map(OPS[name], (a, b))


def _operand(x) -> Exp | None:
    try:
        return as_exp(x)
    except TypeError:
        return None


def matmul(a, b) -> Exp:
    return Dot(as_exp(a), as_exp(b))


# ---- Public functional forms, and Exp's methods: made from the registry -------------
# One loop per surface reads the rows of tensor/ops.py, so a built-in op or a reduction
# added there is ``T.<name>``, an Exp method and (where the row names one) an operator
# with no edit here. The functions are globals of this module: ``abs``, ``pow`` and
# ``sum`` below are the ops, not Python's builtins (this module does not call those).

def _function(op: OpDef, params: tuple[str, ...] = (), owner: str | None = None):
    """``T.<name>``: the op over tensors, expressions or numbers, as ``apply_op`` (with
    ``owner``: its method, ``self`` first)."""
    if op.arity == 1:
        def fn(x) -> Exp: return _apply(op, (x,))  # noqa: E704
    elif op.arity == 2:
        def fn(a, b) -> Exp: return _apply(op, (a, b))  # noqa: E704
    else:
        def fn(a, b, c) -> Exp: return _apply(op, (a, b, c))  # noqa: E704
    return named_function(fn, op.name, params or op.operands,
                          f"Elementwise ``{op.name}``, lazy: it fuses with what uses it.", owner)


def _reduce_function(r: ReduceDef):
    def fn(x, axis=None, keepdims: bool = False) -> Exp:
        return Reduce(r, as_exp(x), axis, keepdims)
    return named_function(fn, r.function, ("x",), f"``{r.name}`` over ``axis`` (None: all).")


def _unary_method(op: OpDef):
    """``x.<name>()``: the row bound here, so a call costs what ``Map(op, (x,))`` costs."""
    def method(self) -> Exp:
        return Map(op, (self,))
    return named_function(method, op.name, ("self",), f"Elementwise ``{op.name}``.", "Exp")


def _reduce_method(r: ReduceDef):
    def method(self, axis=None, keepdims: bool = False) -> Exp:
        return Reduce(r, self, axis, keepdims)
    return named_function(method, r.name, ("self",), f"``{r.name}`` over ``axis`` (None: all).",
                          "Exp")


def _where_method(self, condition, other) -> Exp:
    """PyTorch's ``x.where(condition, y)``: ``where(condition, x, y)``."""
    return _apply(_WHERE, (condition, self, other))


_WHERE = OPS["where"]
#: The methods a generated one cannot express (the operand order differs).
_EXPLICIT_METHODS = {"where": _where_method}

#: ``T.<name>`` for each built-in row and reduction (exported by tensor/__init__.py).
FUNCTIONS: dict = {op.name: _function(op) for op in OPS.values() if op.builtin}
FUNCTIONS.update((r.function, _reduce_function(r)) for r in REDUCTIONS.values())
globals().update(module_globals(FUNCTIONS))


def _install_exp_surface() -> None:
    """Each built-in row's method (``_unary_method``, else ``_function``) and operator,
    and each reduction's method, on Exp."""
    for op in OPS.values():
        if not op.builtin:
            continue
        unary = _unary_method(op) if op.arity == 1 else None
        method = unary or _EXPLICIT_METHODS.get(op.name) or _function(op, op.method_params, "Exp")
        setattr(Exp, op.name, method)
        if op.operator is not None:
            setattr(Exp, f"__{op.operator}__", unary or _operator(op))
        if op.reflected:
            setattr(Exp, f"__r{op.operator}__", _operator(op, reflected=True))
    for r in REDUCTIONS.values():
        setattr(Exp, r.name, _reduce_method(r))


_install_exp_surface()
#: What the registry's derivatives build gradients with (tensor/ops.py cannot import
#: this module, which is made from its rows).
use_expressions(types.SimpleNamespace(Exp=Exp, Scalar=Scalar, **FUNCTIONS))

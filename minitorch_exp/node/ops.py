"""Differentiable operations: each forward next to its backward.

The primitives are few -- elementwise maps (any registered op, with the
derivative stored beside it in ``tensor/ops.py``), expand, reshape, permute,
indexing, reductions (each a row of ``REDUCTIONS`` there, its backward too),
matmul, cat -- and the rest (softmax, log_softmax,
logsumexp, mean-squared error) are written with them, so they fuse and
differentiate for free. Two exceptions earn their own Function because every
training step runs them: softmax cross-entropy, whose gradient is one short
expression instead of the chain rule through six ops (``SoftmaxCrossEntropy``),
and ``linear``, one node instead of four (``Linear``).
"""

from __future__ import annotations

import functools
import math
import sys

import numpy as np

from ..tensor import capture, creation, dtypes, eager
from ..tensor.engine import (
    evaluate_copy,
    realize,  # at once with NumPy below the fusion threshold, else fused
)
from ..tensor.expr import Dot, Exp, Reduce, apply_op
from ..tensor.layout import (
    broadcast_axes,
    broadcast_shapes,
    infer_shape,
    normalize_axes,
    normalize_axis,
    normalize_shape,
)
from ..tensor.ops import OPS, REDUCTIONS, OpDef, ReduceDef, module_globals, named_function
from ..tensor.tensor import Tensor, _is_basic_index, from_array
from . import anomaly, forms, promotion
from .function import Context, Function, SliceGradient, not_a_tensor
from .grad_mode import _modes
from .keywords import pytorch_arguments
from .node import Node, index_key, install_methods, lazy_value


def _value(x):
    return x._value if isinstance(x, Node) else x


class _Op(Function):
    """A built-in Function whose non-tensor arguments (axes, shapes) are keywords only."""

    keyword_attributes = True


# ---- elementwise -------------------------------------------------------------------

class Elementwise(Function):
    """Any registered elementwise op: ``apply`` computes and records it, ``backward`` is
    the op's derivative expression.

    ``apply`` is ``Function.apply`` written out in one pass for the op every model runs
    most: a forward, a Context and a node made in separate calls cost more than NumPy's
    work on a small tensor. Operands broadcast inside the op, as NumPy's do; the engine
    computes it now or keeps it lazy (``eager.apply``'s policy), and backward sums each
    gradient back to its operand's shape.
    """

    @classmethod
    def apply(cls, *args, op: str) -> Node:
        values, needs, known, dtype = [], [], {}, None
        for a in args:  # unwrap, checking that PyTorch's promotion changes nothing
            t = type(a)
            if t is float or t is int:
                values.append(a)
                needs.append(False)
                continue
            if isinstance(a, Node):
                v = a._value
                if a._reads is not None:  # lazy: what its tree reads is known already
                    known[id(v)] = a._reads
                needs.append(a.requires_grad)
            elif isinstance(a, Exp):
                v = a
                needs.append(False)
            else:
                dtype = False  # a bool, a NumPy array or scalar: promotion decides
                break
            d = v.dtype
            if d is not dtype:
                if dtype is not None or d.kind != "f":
                    dtype = False  # mixed or not float: promotion decides
                    break
                dtype = d
            values.append(v)
        if dtype is False:
            args, values, needs, known = _promoted(op, args)
        out = eager.apply(OPS[op], values)  # None: kept lazy, to fuse
        if out is None:
            out = apply_op(op, *values)
        ctx = None
        if True in needs and _modes.grad and out.dtype.kind == "f":
            ctx = Context(cls, tuple(needs), {"op": op}, True, known)
            ctx.save_for_backward(*values, out)  # before a lazy ``out`` may be computed
            ctx.known_reads = None  # holds storages: not past this call
            ctx.inputs = args
        if type(out) is Tensor:
            node = Node(out)
        else:
            node = lazy_value(out, _modes.fusion, args, known)
        if ctx is not None:
            node.requires_grad = True
            node.grad_fn = ctx
        if anomaly.this_thread.depth:  # mt.detect_anomaly(): record where; check NaN/Inf
            anomaly.check_forward(ctx or Context(cls, tuple(needs), {"op": op}, False), args,
                                  node)
        return node

    @staticmethod
    def backward(ctx, g):
        saved = ctx.saved_tensors  # checks that none was modified in place since
        op = OPS[ctx.attrs["op"]]
        if op.derivative is None:
            raise RuntimeError(f"op {op.name!r} has no derivative; pass derivative= to "
                               "register_op to differentiate through it")
        grads = eager.gradients(op, g, saved[-1], saved[:-1], ctx.needs_input_grad)
        shape = saved[-1].shape
        for a in saved:
            if isinstance(a, Exp) and a.shape != shape:  # broadcast: sum back to its shape
                return tuple([r if r is None or not isinstance(a, Exp) else
                              eager.sum_to(r, a.shape) for r, a in zip(grads, saved)])
        return grads


def _promoted(op: str, args: tuple) -> tuple:
    """``args`` converted to the dtype PyTorch's promotion gives (node/promotion.py;
    NumPy arrays become constants), unwrapped as ``Elementwise.apply`` does."""
    args = promotion.cast_operands(OPS[op], _constants(args), astype)
    values, needs, known = [], [], {}
    for a in args:
        if isinstance(a, Node):
            values.append(a._value)
            needs.append(a.requires_grad)
            if a._reads is not None:
                known[id(a._value)] = a._reads
        else:
            values.append(a)
            needs.append(False)
    return args, values, needs, known


def elementwise(op: str, *args) -> Node:
    """Apply op ``op``, converting operands first to the dtype PyTorch's promotion gives
    and broadcasting them as NumPy's are."""
    return Elementwise.apply(*args, op=op)


def _constants(args) -> tuple:
    """NumPy operands as constant Nodes, copied: a lazy result must not see later writes
    into the array."""
    return tuple(Node(from_array(a.copy())) if isinstance(a, np.ndarray) else a for a in args)


# ---- views -------------------------------------------------------------------------

class Expand(_Op):
    """Broadcast to a larger shape (stride 0); backward sums over the broadcast axes."""

    lazy = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, shape):
        ctx.attrs["in_shape"] = x.shape
        return x.broadcast_to(shape)

    @staticmethod
    def backward(ctx, g):
        return (g.sum_to(ctx.attrs["in_shape"]),)


def expand(x: Node, *shape) -> Node:
    shape = normalize_shape(shape)
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
    return x if shape == x.shape else Expand.apply(x, shape=shape)


class Reshape(_Op):
    """reshape / view / squeeze / unsqueeze / flatten: backward reshapes back."""

    lazy = True

    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, shape):
        ctx.attrs["in_shape"] = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, g):
        return (g.reshape(ctx.attrs["in_shape"]),)


def sum_to(x: Node, shape) -> Node:
    """``x`` summed over the axes broadcasting added to ``shape`` (an expand's gradient;
    the Tensor level's spelling, so that a rule written with it serves both levels)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return reshape(FUNCTIONS["sum"](x, broadcast_axes(shape, x.shape), keepdims=True), shape)


def reshape(x: Node, *shape) -> Node:
    if not isinstance(x, Node):
        raise not_a_tensor("reshape", 0, x)
    shape = infer_shape(normalize_shape(shape), x.numel())
    return x if shape == x.shape else Reshape.apply(x, shape=shape)


def view(x: Node, *shape) -> Node:
    if x.is_lazy is False and isinstance(x._value, Tensor):
        x._value.view(*shape)  # raises the view error when strides do not allow it
    return reshape(x, *shape)


@pytorch_arguments
def squeeze(x: Node, axis=None) -> Node:
    axes = normalize_axes(axis, x.ndim, x.shape) if axis is not None else None
    shape = tuple(n for i, n in enumerate(x.shape)
                  if not (n == 1 and (axes is None or i in axes)))
    return reshape(x, shape)


@pytorch_arguments
def unsqueeze(x: Node, axis: int) -> Node:
    axis = normalize_axis(axis, x.ndim + 1, x.shape)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def flatten(x: Node, start_dim: int = 0, end_dim: int = -1) -> Node:
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = (normalize_axis(d, x.ndim, x.shape) for d in (start_dim, end_dim))
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


class Permute(_Op):
    lazy = True
    transposes_products = True

    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, dims):
        return x.permute(*dims)

    @staticmethod
    def backward(ctx, g):
        dims = ctx.attrs["dims"]
        inverse = tuple(int(i) for i in np.argsort(dims))
        return (g.permute(*inverse),)


def permute(x: Node, *dims) -> Node:
    dims = tuple(normalize_axis(d, x.ndim, x.shape) for d in normalize_shape(dims))
    return Permute.apply(x, dims=dims)


def transpose(x: Node, i: int = 0, j: int = 1) -> Node:
    dims = list(range(x.ndim))
    i, j = (normalize_axis(d, x.ndim, x.shape) for d in (i, j))
    dims[i], dims[j] = dims[j], dims[i]
    return permute(x, *dims)


class GetItem(_Op):
    """Basic indexing is a view; integer-array indexing a gather. Backward scatters-adds."""

    @staticmethod
    def forward(ctx, x, key):
        t = realize(x)
        ctx.attrs["in"] = (t.shape, t.dtype, t.device)
        return t[key]

    backward_on_nodes = True

    @staticmethod
    def backward(ctx, g):
        return (forms.of(g).place_at_index(g, ctx.attrs["key"], ctx.attrs["in"]),)


def getitem(x: Node, key) -> Node:
    return GetItem.apply(x, key=index_key(key))


def _place_tensor(g, key, where: tuple):
    """``g`` at ``key`` of zeros of ``where``'s (shape, dtype, device): a slice is added
    into its place by backward (``SliceGradient``), fused with ``g``'s rule."""
    if _is_basic_index(key):
        return SliceGradient(key, g, *where)
    return _placed(g, key, where[0])


def _placed(g, key, shape: tuple) -> Tensor:
    """Zeros of ``shape`` with ``g`` added at ``key`` (repeated indices add up)."""
    g = realize(g)
    grad = creation.zeros(shape, dtype=g.dtype, device=g.device)
    if _is_basic_index(key):
        grad[key] = g
        return grad
    capture.host_op(functools.partial(g.device.xp.add.at, grad.array, key, g.array),
                    grad.storage)
    grad.storage.version += 1
    return grad


class PlaceAtIndex(_Op):
    """``g`` added at ``key`` into zeros of ``shape``: ``GetItem``'s gradient as a node,
    so that it is differentiable again (its gradient is the same indexing)."""

    @staticmethod
    def forward(ctx, g, key, shape):
        return _placed(g, key, shape)

    backward_on_nodes = True

    @staticmethod
    def backward(ctx, gg):
        return (forms.of(gg).getitem(gg, ctx.attrs["key"]),)


def place_at_index(g: Node, key, shape: tuple) -> Node:
    return PlaceAtIndex.apply(g, key=key, shape=tuple(shape))


# ---- reductions ----------------------------------------------------------------

def _grad_to_input(g, ctx, at_once: bool = True):
    """Broadcast a reduction's gradient back over the axes it removed: as the policy
    says (``eager.spread``), or, not ``at_once``, as a lazy broadcast."""
    shape, axes = ctx.attrs["in_shape"], ctx.attrs["axes"]
    if at_once:
        return eager.spread(g, shape, axes)
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    return g.reshape(kept).broadcast_to(shape)


class Reduction(_Op):
    """A reduction of the registry: one subclass per row of ``REDUCTIONS`` (``Sum``,
    ``Mean``, ``Amax``, ``Amin``; ``_reduction_class``), whose ``reduction`` is the row."""

    reduction: ReduceDef

    @staticmethod
    def forward(ctx, x, axes, keepdims):
        r = ctx.fn.reduction
        ctx.attrs["in_shape"] = x.shape
        out = eager.reduce(r, x, axes, keepdims)  # None: kept lazy, its input fused into it
        if out is None:
            out = Reduce(r, x, axes, keepdims)
        if r.saves:
            out = realize(out)
            ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        r = ctx.fn.reduction
        x = out = None
        if r.saves:  # max and min: a rule of expressions, reading x and out
            x, out = ctx.saved_tensors
            out = _grad_to_input(out, ctx, at_once=False)
        shape, axes = ctx.attrs["in_shape"], ctx.attrs["axes"]
        count = math.prod(shape[a] for a in axes)
        return (r.derivative(_grad_to_input(g, ctx, not r.saves), x, out, axes, count),)


def _axes(x: Node, axis):
    if axis is None:
        return _EVERY_AXIS[len(x.shape)]
    if x.ndim == 0:  # PyTorch reduces a 0-d tensor over dim 0 or -1
        for a in axis if isinstance(axis, tuple) else (axis,):
            if a not in (0, -1):
                raise IndexError(f"axis {a!r} is out of range for a 0-d tensor: expected 0 or "
                                 "-1 (as PyTorch), or None")
        return ()
    return normalize_axes(axis, x.ndim, x.shape)


_EVERY_AXIS = [tuple(range(n)) for n in range(65)]  # normalize_axes(None, n); NumPy: <= 64 dims


@pytorch_arguments
def logsumexp(x: Node, axis=None, keepdims: bool = False) -> Node:
    """``log(sum(exp(x)))`` computed stably: the max is subtracted first."""
    m = x.amax(axis, keepdims=True).detach()
    # a row of all -inf gives -inf, not nan (as torch)
    m = elementwise("where", abs(m) == math.inf, 0.0, m)
    out = (x - m).exp().sum(axis, keepdims=True).log() + m
    return out if keepdims else squeeze(out, axis if axis is not None else None)


@pytorch_arguments
def softmax(x: Node, axis: int = -1) -> Node:
    e = (x - x.amax(axis, keepdims=True).detach()).exp()
    return e / e.sum(axis, keepdims=True)


@pytorch_arguments
def log_softmax(x: Node, axis: int = -1) -> Node:
    return x - logsumexp(x, axis, keepdims=True)


class SoftmaxCrossEntropy(Function):
    """Per-row cross-entropy of logits ``z`` (N, C) against target distributions ``q``.

    ``loss_i = log(sum_j exp(c_ij)) - sum_j q_ij c_ij`` with ``c = z - max_j z_ij``:
    exact and stable for any logits. Written as one Function rather than the six
    it is made of, because its gradient is a single expression,
    ``g_i (softmax(z)_ij - q_ij)`` (rows of ``q`` sum to 1), that fuses into one
    pass -- the chain rule through the six would build, walk and evaluate far more.
    """

    lazy = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, z, q):
        loss, ctx.softmax = eager.softmax_cross_entropy(z, q)
        ctx.save_for_backward(z, q)
        return loss

    @staticmethod
    def backward(ctx, g):
        z, q = ctx.saved_tensors
        f = forms.of(g)
        return f.mul(f.sub(f.softmax_of(z, ctx.softmax), q), f.column(g)), None


def softmax_cross_entropy(logits: Node, q) -> Node:
    """Cross-entropy of each row of ``logits`` against the matching row of ``q``."""
    return SoftmaxCrossEntropy.apply(logits, q)


# ---- matmul ----------------------------------------------------------------------

class MatMul(Function):
    """``a @ b`` with NumPy's rules for 1-D, 2-D and batched operands."""

    backward_on_nodes = True

    @staticmethod
    def forward(ctx, a, b):
        a, b = realize(a), realize(b)
        ctx.save_for_backward(a, b)
        return Dot(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
        b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
        g2 = g.reshape(_matmul_out_shape(a2.shape, b2.shape))
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = (g2 @ b2.transpose(-1, -2)).sum_to(a2.shape).reshape(a.shape)
        if ctx.needs_input_grad[1]:
            gb = (a2.transpose(-1, -2) @ g2).sum_to(b2.shape).reshape(b.shape)
        return ga, gb


class Linear(Function):
    """``x @ weight.T + bias`` (PyTorch's ``F.linear``) as one Function.

    The same kernels as the four ops it replaces (transpose, matmul, expand, add):
    one BLAS call forward, with the bias add left lazy to fuse with what follows;
    backward, BLAS for the input and weight gradients and one reduction for the
    bias. One node instead of four is what a training step saves.
    """

    lazy = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, weight, bias=None):
        x, weight = realize(x), realize(weight)
        ctx.save_for_backward(x, weight)
        return eager.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        f, needs = forms.of(g), ctx.needs_input_grad
        if needs.count(True) > 1:
            g = f.computed(g)  # read by each gradient below: computed once
        rows, x2 = (g, x) if g.ndim == 2 else (g.reshape(-1, g.shape[-1]),
                                               x.reshape(-1, x.shape[-1]))
        gx = f.matmul(g, weight) if needs[0] else None
        gw = f.matmul_t(rows, x2) if needs[1] else None
        if len(needs) == 2:
            return gx, gw
        return gx, gw, f.sum_to(rows, weight.shape[:1]) if needs[2] else None


def linear(x: Node, weight: Node, bias: Node | None = None) -> Node:
    """``x @ weight.T + bias`` for ``x`` of shape (..., in) and ``weight`` (out, in)."""
    if x.shape[-1:] != weight.shape[1:] or weight.ndim != 2:
        raise ValueError(f"linear: input of shape {x.shape} and weight of shape "
                         f"{weight.shape} do not match (expected weight (out, {x.shape[-1]}))")
    return Linear.apply(x, weight) if bias is None else Linear.apply(x, weight, bias)


def _matmul_out_shape(sa, sb):
    return broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])


@pytorch_arguments
def matmul(a: Node, b: Node) -> Node:
    return MatMul.apply(a, b)


# ---- joining -----------------------------------------------------------------------

class Cat(_Op):
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, *values, axis):
        shape = list(values[0].shape)
        shape[axis] = builtin_sum(v.shape[axis] for v in values)
        out = creation.empty(tuple(shape), dtype=_common_dtype(values), device=values[0].device)
        start = 0
        bounds = []
        for v in values:
            index = (slice(None),) * axis + (slice(start, start + v.shape[axis]),)
            out[index] = v
            bounds.append(index)
            start += v.shape[axis]
        ctx.attrs["bounds"] = bounds
        return out

    @staticmethod
    def backward(ctx, g):
        f = forms.of(g)
        return tuple(f.getitem(g, index) for index in ctx.attrs["bounds"])


builtin_sum = __builtins__["sum"] if isinstance(__builtins__, dict) else __builtins__.sum


def _common_dtype(values):
    return promotion.result_dtype(values)


@pytorch_arguments
def cat(nodes, axis: int = 0) -> Node:
    nodes = list(nodes)
    if not nodes:
        raise ValueError("cat needs at least one tensor")
    ndim = nodes[0].ndim
    axis = normalize_axis(axis, ndim, nodes[0].shape)
    for n in nodes:
        if n.ndim != ndim or any(a != b for i, (a, b) in enumerate(zip(n.shape, nodes[0].shape))
                                 if i != axis):
            raise ValueError(f"cat: shapes {[x.shape for x in nodes]} differ outside axis {axis}")
    return Cat.apply(*nodes, axis=axis)


@pytorch_arguments
def stack(nodes, axis: int = 0) -> Node:
    nodes = list(nodes)
    if not nodes:
        raise ValueError("stack needs at least one tensor")
    axis = normalize_axis(axis, nodes[0].ndim + 1, nodes[0].shape)
    return cat([unsqueeze(n, axis) for n in nodes], axis)


# ---- copies and devices --------------------------------------------------------

class Clone(Function):
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x):
        return evaluate_copy(realize(x))

    @staticmethod
    def backward(ctx, g):
        return (g,)


def clone(x: Node) -> Node:
    return Clone.apply(x)


class ToDevice(_Op):
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, device):
        ctx.attrs["from"] = x.device
        return realize(x).to(device)

    @staticmethod
    def backward(ctx, g):
        return (forms.of(g).to_device(g, ctx.attrs["from"]),)


def to_device(x: Node, device) -> Node:
    return ToDevice.apply(x, device=device)


class AsType(_Op):
    """Convert each element (fuses like a map); backward converts the gradient back."""

    lazy = True

    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.attrs["in_dtype"] = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, g):
        return (g.astype(ctx.attrs["in_dtype"]),)


def astype(x: Node, dtype) -> Node:
    dtype = dtypes.as_dtype(dtype)
    return x if dtype == x.dtype else AsType.apply(x, dtype=dtype)


# ---- the registry's functions: mt.exp, mt.maximum, mt.sum, mt.amax... ---------------

def clip(x, lo, hi) -> Node:
    """Clamp ``x`` to ``[lo, hi]``; bounds that require grad get it where they bind."""
    if any(isinstance(b, Node) and b.requires_grad for b in (lo, hi)):
        # the registry's clip derivative has no gradient for its bounds (as torch.clamp has)
        return elementwise("where", x < lo, lo, elementwise("where", x > hi, hi, x))
    return elementwise("clip", x, lo, hi)


def round_(x, *, decimals: int = 0) -> Node:
    """PyTorch's ``round``: halves to even; with ``decimals``, at that many places after
    the point (before it, when negative) -- scaled, rounded and scaled back, as PyTorch."""
    if decimals == 0:
        return elementwise("round", x)
    if decimals > 0:
        return elementwise("round", x * 10.0 ** decimals) / 10.0 ** decimals
    return elementwise("round", x / 10.0 ** -decimals) * 10.0 ** -decimals


def op(name: str, *args) -> Node:
    """Apply any registered op by name (user-defined ones too)."""
    return elementwise(name, *args)


def as_node(x) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, Tensor):
        return Node(x)
    if isinstance(x, np.ndarray):
        return Node(from_array(x))
    raise TypeError(f"expected a tensor, got {type(x).__name__}")


def _function(op: OpDef, params: tuple[str, ...] = (), owner: str | None = None):
    """``mt.<name>`` for a built-in row: ``elementwise`` under the row's operand names
    (with ``owner``: its method, ``self`` first)."""
    name = op.name
    if op.arity == 1:
        def fn(x) -> Node: return elementwise(name, x)  # noqa: E704
    elif op.arity == 2:
        def fn(a, b) -> Node: return elementwise(name, a, b)  # noqa: E704
    else:
        def fn(a, b, c) -> Node: return elementwise(name, a, b, c)  # noqa: E704
    what = "a bool result, no gradient" if op.result == "bool" else "differentiable"
    return named_function(fn, name, params or op.operands,
                          f"Elementwise ``{name}`` ({what}, fuses with neighbours).", owner)


def _as(x: Node, dtype) -> Node:
    return x if dtype is None else astype(x, dtype)


def _reduction_class(r: ReduceDef) -> type:
    name = r.function.capitalize()  # Sum, Amax: PyTorch's SumBackward0, AmaxBackward0
    return type(name, (Reduction,), {"reduction": r, "__module__": __name__,
                                     "__qualname__": name,
                                     "__doc__": f"``{r.name}``; backward: its row's derivative."})


def _reduce_function(r: ReduceDef):
    """``mt.<function>``: its row's Function (``REDUCTION_CLASSES``) where the row has a
    derivative; else values outside the graph (argmax)."""
    cls = REDUCTION_CLASSES.get(r.name)
    if cls is None:
        def fn(x: Node, axis=None, keepdims: bool = False, *, dtype=None) -> Node:
            return Node(realize(Reduce(r, _value(_as(x, dtype)), axis, keepdims)))
        doc = f"``{r.name}`` over ``axis`` (None: all; not differentiable)."
    else:
        def fn(x: Node, axis=None, keepdims: bool = False, *, dtype=None) -> Node:
            return cls.apply(_as(x, dtype), axes=_axes(x, axis), keepdims=keepdims)
        doc = f"``{r.name}`` over ``axis`` (None: all), differentiable."
    doc += " ``dtype``: the input converted to it first, as PyTorch's."
    return named_function(fn, r.function, ("x",), doc)


#: ``Sum``, ``Mean``, ``Amax``, ``Amin``: the Function of each differentiable reduction.
REDUCTION_CLASSES = {r.name: _reduction_class(r) for r in REDUCTIONS.values() if r.derivative}
globals().update((cls.__name__, cls) for cls in REDUCTION_CLASSES.values())
def _where_method(self, condition, other) -> Node:
    """PyTorch's ``x.where(condition, y)``: ``where(condition, x, y)``."""
    return elementwise("where", condition, self, other)


#: Explicit where a generated form cannot say it: clip's bounds' gradients, and a
#: method whose ``self`` is not the first operand.
_EXPLICIT = {"clip": clip, "round": named_function(round_, "round", ("x",), round_.__doc__)}
_EXPLICIT_METHODS = {"clip": clip, "where": _where_method, "round": _EXPLICIT["round"]}
_ELEMENTWISE = {op.name: _EXPLICIT.get(op.name) or _function(op)
                for op in OPS.values() if op.builtin}
#: ``mt.<name>`` for each built-in row and reduction (exported by api.py), taking
#: PyTorch's ``out=`` (and a reduction ``dim=``, ``keepdim=``) too: keywords.py.
FUNCTIONS: dict = {name: pytorch_arguments(fn) for name, fn in _ELEMENTWISE.items()}
FUNCTIONS.update((r.function, pytorch_arguments(_reduce_function(r)))
                 for r in REDUCTIONS.values())
globals().update(module_globals(FUNCTIONS))
#: Node's method for each built-in row (``x.maximum(other)``) and reduction, under both
#: its names (``x.max()``, ``x.amax()``; node/pytorch.py gives ``max`` and ``min`` PyTorch's
#: ``(values, indices)`` form).
METHODS: dict = {op.name: _EXPLICIT_METHODS.get(op.name) or (
    _ELEMENTWISE[op.name] if op.arity == 1 else _function(op, op.method_params, "Node"))
    for op in OPS.values() if op.builtin}
METHODS.update((name, FUNCTIONS[r.function]) for r in REDUCTIONS.values()
               for name in (r.name, r.function))
install_methods(sys.modules[__name__])


def _tensor_form(row: OpDef):
    """``row`` as a rule calls it on Tensors (``forms.TENSORS``): computed now where the
    policy says (``eager.apply``), else a lazy map that fuses."""
    def fn(*args):
        out = eager.apply(row, args)
        return apply_op(row.name, *args) if out is None else out
    fn.__name__ = fn.__qualname__ = row.name
    return fn


#: Every built-in row's function at both levels: what a rule finds through ``forms.of(g)``,
#: and, on Nodes (a backward that records: node/higher_order.py), through ``_e(g)``.
forms.add({op.name: _tensor_form(op) for op in OPS.values() if op.builtin}, _ELEMENTWISE)
Node.rule_forms = forms.NODES

forms.add(
    {"computed": realize, "matmul": eager.matmul, "matmul_t": eager.matmul_t,
     "column": eager.column, "sum_to": eager.sum_to,
     "softmax_of": lambda z, kept: kept,
     "getitem": lambda g, key: realize(g)[key], "place_at_index": _place_tensor,
     "to_device": lambda g, device: realize(g).to(device)},
    {"computed": lambda g: g, "matmul": matmul,
     "matmul_t": lambda a, b: matmul(transpose(a, 0, 1), b),
     "column": lambda g: unsqueeze(g, 1), "sum_to": sum_to,
     "softmax_of": lambda z, kept: softmax(z, 1), "getitem": getitem,
     "place_at_index": lambda g, key, where: place_at_index(g, key, where[0]),
     "to_device": to_device})

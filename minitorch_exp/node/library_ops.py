"""Library ops at the Node level: gathers, scatters, sorts, scans, norms, sampling.

Each differentiable one is a ``Function`` whose forward is one library call of
tensor/library.py (NumPy, or CuPy on a GPU, on the tensor's array) and whose
backward builds the gradient from Tensor-level operations -- often the
library op's adjoint: gather's gradient is a scatter-add, index_select's an
index_add, cumsum's a reversed cumsum. The rest are compositions: ``sort`` and
``topk`` are an ``argsort`` (no gradient: indices) and a ``gather`` (whose
gradient scatters back).

Every library call runs through ``capture.host_op``, so a captured step replays
it on the values of that run (``multinomial`` draws anew on each replay).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ..tensor import creation, dtypes
from ..tensor import library as L
from ..tensor.engine import realize
from ..tensor.expr import apply_op
from ..tensor.generator import Generator
from ..tensor.layout import normalize_axes, normalize_axis
from ..tensor.tensor import from_array
from . import ops, views
from .function import Function
from .masks import _in_place_form
from .node import Node, zeros_like

SortResult = namedtuple("sort", ["values", "indices"])
TopKResult = namedtuple("topk", ["values", "indices"])


class _LibraryOp(Function):
    """A Function of this module: non-tensor arguments are keywords only."""

    keyword_attributes = True


def _as_index(index, like: Node) -> Node:
    """``index`` as a Node; a list or array of indices made an int64 tensor on ``like``'s
    device."""
    if isinstance(index, Node):
        return index
    return Node(from_array(np.asarray(index, dtype=np.int64))).to(like.device)


def _zeros_like(t) -> object:
    return creation.zeros(t.shape, dtype=t.dtype, device=t.device)


def _embed(grad, shape, dtype, device):
    """``grad`` as the leading block of a zero tensor of ``shape`` (a src larger than
    its index gets no gradient past it)."""
    if grad.shape == tuple(shape):
        return grad
    out = creation.zeros(shape, dtype=dtype, device=device)
    out[tuple(slice(0, n) for n in grad.shape)] = grad
    return out


# ---- gather and scatter ---------------------------------------------------------------

class Gather(_LibraryOp):
    """``out = x[index along dim]``; backward scatter-adds the gradient back."""

    @staticmethod
    def forward(ctx, x, index, dim):
        x, index = realize(x), realize(index)
        ctx.save_for_backward(index)
        ctx.attrs["like"] = (x.shape, x.dtype, x.device)
        return L.gather(x, dim, index)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        shape, dtype, device = ctx.attrs["like"]
        zeros = creation.zeros(shape, dtype=dtype, device=device)
        return L.scatter(zeros, ctx.attrs["dim"], index, realize(g), reduce_add=True), None

    @staticmethod
    def graph_backward(ctx, g: Node, out: Node) -> tuple:
        """``backward`` on Nodes (``create_graph``): a ``scatter_add``, whose gradient
        is this gather again."""
        x, index = ctx.inputs
        return scatter_add(zeros_like(x), ctx.attrs["dim"], index, g), None


def gather(input: Node, dim: int, index: Node) -> Node:
    """``out[i][j] = input[index[i][j]][j]`` (dim 0), ``input[i][index[i][j]]`` (dim 1)..."""
    return Gather.apply(input, _as_index(index, input), dim=dim)


class Scatter(_LibraryOp):
    """A copy of ``x`` with ``src`` (or the number ``value``) written -- or added, with
    ``add`` -- at ``index`` along ``dim``. Backward: ``x`` gets the gradient except where
    it was overwritten, ``src`` the gradient gathered at ``index``."""

    @staticmethod
    def forward(ctx, x, index, src=None, *, dim, add, value=None):
        x, index = realize(x), realize(index)
        src = value if src is None else realize(src)
        ctx.save_for_backward(index)
        ctx.attrs["src_like"] = None if value is not None else (src.shape, src.dtype,
                                                                 src.device)
        return L.scatter(x, dim, index, src, reduce_add=add)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        dim, g = ctx.attrs["dim"], realize(g)
        gx = g if ctx.attrs["add"] else L.scatter(g, dim, index, 0)
        like = ctx.attrs["src_like"]
        if like is None:  # a number was written: no src
            return gx, None
        gs = _embed(L.gather(g, dim, index), *like) if ctx.needs_input_grad[2] else None
        return gx, None, gs

    @staticmethod
    def graph_backward(ctx, g: Node, out: Node) -> tuple:
        index, dim = ctx.inputs[1], ctx.attrs["dim"]
        gx = g if ctx.attrs["add"] else scatter(g, dim, index, value=0.0)
        if ctx.attrs["src_like"] is None:
            return gx, None
        src = ctx.inputs[2]
        gs = gather(g, dim, index) if ctx.needs_input_grad[2] else None
        if gs is not None and gs.shape != src.shape:  # src larger than index: zeros beyond
            gs = ops.place_at_index(gs, tuple(slice(0, n) for n in gs.shape), src.shape)
        return gx, None, gs


def _scatter(input: Node, dim: int, index, src, add: bool, value=None) -> Node:
    op = "scatter_add" if add else "scatter"
    if isinstance(src, Node):
        if src.dtype != input.dtype:
            raise TypeError(f"{op}: src is {src.dtype.name}, the input {input.dtype.name}; "
                            "cast one of them (src.to(input.dtype))")
        return Scatter.apply(input, _as_index(index, input), src, dim=dim, add=add)
    value = src if value is None else value
    if value is None:
        raise TypeError(f"{op}: give src (a tensor) or value (a number)")
    return Scatter.apply(input, _as_index(index, input), dim=dim, add=add, value=value)


def scatter(input: Node, dim: int, index: Node, src=None, *, value=None) -> Node:
    """A copy of ``input`` with ``src[i][j]`` (or ``value``) written at
    ``[index[i][j]][j]`` (dim 0), and so on; where indices repeat, one write wins."""
    return _scatter(input, dim, index, src, False, value)


def scatter_add(input: Node, dim: int, index: Node, src: Node) -> Node:
    """``scatter`` that adds ``src`` at ``index`` (repeated indices add up)."""
    return _scatter(input, dim, index, src, True)


class IndexSelect(_LibraryOp):
    """The entries of ``x`` at the 1-D ``index`` along ``dim``; backward index-adds."""

    @staticmethod
    def forward(ctx, x, index, dim):
        x, index = realize(x), realize(index)
        ctx.save_for_backward(index)
        ctx.attrs["like"] = x
        return L.index_select(x, dim, index)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        zeros = _zeros_like(ctx.attrs["like"])
        return L.index_add(zeros, ctx.attrs["dim"], index, realize(g)), None

    @staticmethod
    def graph_backward(ctx, g: Node, out: Node) -> tuple:
        x, index = ctx.inputs
        return index_add(zeros_like(x), ctx.attrs["dim"], index, g), None


def index_select(input: Node, dim: int, index: Node) -> Node:
    return IndexSelect.apply(input, _as_index(index, input), dim=dim)


class IndexAdd(_LibraryOp):
    """A copy of ``x`` with ``alpha * source`` added at ``index`` along ``dim``."""

    @staticmethod
    def forward(ctx, x, index, source, dim, alpha):
        index = realize(index)
        ctx.save_for_backward(index)
        return L.index_add(realize(x), dim, index, realize(source), alpha)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        g, alpha = realize(g), ctx.attrs["alpha"]
        gs = L.index_select(g, ctx.attrs["dim"], index) if ctx.needs_input_grad[2] else None
        return g, None, (gs if gs is None or alpha == 1 else realize(gs * alpha))

    @staticmethod
    def graph_backward(ctx, g: Node, out: Node) -> tuple:
        index, alpha = ctx.inputs[1], ctx.attrs["alpha"]
        gs = index_select(g, ctx.attrs["dim"], index) if ctx.needs_input_grad[2] else None
        return g, None, (gs if gs is None or alpha == 1 else gs * alpha)


def index_add(input: Node, dim: int, index: Node, source: Node, *, alpha=1) -> Node:
    return IndexAdd.apply(input, _as_index(index, input), source, dim=dim, alpha=alpha)


# ---- sorting: an argsort, then a gather ----------------------------------------------------

def argsort(input: Node, dim: int = -1, descending: bool = False, stable: bool = False) -> Node:
    """The int64 indices that sort ``input`` along ``dim`` (always stable here)."""
    return Node(L.argsort(input.value, dim, descending))


def sort(input: Node, dim: int = -1, descending: bool = False, stable: bool = False):
    """``(values, indices)`` of ``input`` sorted along ``dim``; values carry the gradient."""
    indices = argsort(input, dim, descending)
    return SortResult(gather(input, dim, indices), indices)


def topk(input: Node, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """``(values, indices)`` of the ``k`` largest (or smallest) entries along ``dim``,
    largest first (smallest first with ``largest=False``)."""
    d = normalize_axis(dim, input.ndim, input.shape) if input.ndim else 0
    n = input.shape[d] if input.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"topk: k ({k}) out of range for dimension {dim} of size {n}")
    order = argsort(input, d, descending=largest)
    indices = ops.getitem(order, (slice(None),) * d + (slice(0, k),)) if input.ndim else order
    return TopKResult(gather(input, d, indices.realize()), indices)


# ---- scans and products ------------------------------------------------------------------

class Cumsum(_LibraryOp):
    """Running sums along ``dim``; backward: running sums of the gradient from the end."""

    @staticmethod
    def forward(ctx, x, dim):
        return L.cumsum(realize(x), dim)

    @staticmethod
    def backward(ctx, g):
        return (L.cumsum(realize(g), ctx.attrs["dim"], reverse=True),)

    @staticmethod
    def graph_backward(ctx, g: Node, out: Node) -> tuple:
        """``backward`` on Nodes (``create_graph``): the running sums from the end."""
        dim = ctx.attrs["dim"]
        return (views.flip(cumsum(views.flip(g, dim), dim), dim),)


class Cumprod(_LibraryOp):
    """Running products along ``dim``; backward exact where ``x`` has zeros
    (``library.cumprod_grad``)."""

    @staticmethod
    def forward(ctx, x, dim):
        x = realize(x)
        ctx.save_for_backward(x)
        return L.cumprod(x, dim)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (L.cumprod_grad(x, realize(g), ctx.attrs["dim"]),)


def _scan_input(input: Node, dtype) -> Node:
    return input if dtype is None else ops.astype(input, dtypes.as_dtype(dtype))


def cumsum(input: Node, dim: int, *, dtype=None) -> Node:
    return Cumsum.apply(_scan_input(input, dtype), dim=dim)


def cumprod(input: Node, dim: int, *, dtype=None) -> Node:
    return Cumprod.apply(_scan_input(input, dtype), dim=dim)


# ---- norms ----------------------------------------------------------------------------

class VectorNorm(_LibraryOp):
    """``(sum |x|^p)^(1/p)`` over ``axes``; ``inf``/``-inf`` the largest/smallest ``|x|``,
    0 the count of nonzeros. Backward: ``sign(x) (|x| / norm)^(p-1)``, 0 where the norm
    (or ``x``, for p < 1) is 0; for ``inf`` the gradient shared among the entries at
    the maximum, as PyTorch shares it."""

    @staticmethod
    def forward(ctx, x, ord, axes, keepdim):
        x = realize(x)

        def fn(xp, a):
            r = xp.abs(a)
            if ord == math.inf or ord == -math.inf:
                r = (xp.amax if ord > 0 else xp.amin)(r, axis=axes, keepdims=True)
            elif ord == 0:
                r = xp.sum(r != 0, axis=axes, keepdims=True).astype(a.dtype)
            else:
                r = xp.sum(r ** ord, axis=axes, keepdims=True) ** (1.0 / ord)
            return (r,)
        kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        out = L.library_call(fn, (x,), [(kept, x.dtype)], x.device)[0]
        ctx.save_for_backward(x, out)
        return out if keepdim else out.reshape(tuple(n for i, n in enumerate(x.shape)
                                                     if i not in axes))

    @staticmethod
    def backward(ctx, g):
        x, norm = ctx.saved_tensors
        ord, kept = ctx.attrs["ord"], norm.shape
        g = realize(g).reshape(kept).broadcast_to(x.shape)
        norm = norm.broadcast_to(x.shape)
        ax = apply_op("abs", x)
        if ord == 0:
            return (creation.zeros(x.shape, dtype=x.dtype, device=x.device),)
        if ord in (math.inf, -math.inf):
            at = apply_op("eq", ax, norm).astype(x.dtype)
            share = realize(at).sum_to(kept).broadcast_to(x.shape)
            return (realize(apply_op("sign", x) * at * g / share),)
        zero = apply_op("logical_or", apply_op("eq", norm, 0), apply_op("eq", x, 0))
        scale = apply_op("pow", apply_op("div", ax, norm), ord - 1)
        return (realize(apply_op("where", zero, 0.0, apply_op("sign", x) * scale * g)),)

    @staticmethod
    def graph_backward(ctx, g: Node, out: Node) -> tuple:
        """``backward``'s rule on Nodes (``create_graph``), reading the norm ``out`` as
        the node it is, so that its own dependence on ``x`` is recorded."""
        x, ord = ctx.inputs[0], ctx.attrs["ord"]
        kept = ctx.saved_tensors[1].shape
        g, norm = (ops.expand(ops.reshape(t, kept), x.shape) for t in (g, out))
        if ord == 0:
            return (zeros_like(x),)
        if ord in (math.inf, -math.inf):
            at = ops.astype(abs(x) == norm, x.dtype)
            share = ops.expand(ops.sum(at, ctx.attrs["axes"], keepdims=True), x.shape)
            return (x.sign() * at * g / share,)
        zero = ops.elementwise("logical_or", norm == 0, x == 0)
        scale = (abs(x) / norm) ** (ord - 1)
        return (ops.elementwise("where", zero, 0.0, x.sign() * scale * g),)


def vector_norm(x: Node, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Node:
    """PyTorch's ``torch.linalg.vector_norm``: the ``ord``-norm over ``dim`` (None: all)."""
    x = _scan_input(x, dtype)
    if x.dtype.kind != "f":
        raise TypeError(f"vector_norm: expected a float tensor, got {x.dtype.name}")
    axes = tuple(range(x.ndim)) if dim is None else tuple(
        sorted(normalize_axes(dim, x.ndim, x.shape)))
    return VectorNorm.apply(x, ord=float(ord), axes=axes, keepdim=keepdim)


def norm(input: Node, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Node:
    """``torch.norm``: a vector norm (``"fro"`` is the 2-norm of the entries)."""
    if p == "nuc":
        raise NotImplementedError("norm(p='nuc'): the nuclear norm needs an SVD; not here")
    return vector_norm(input, 2 if p in ("fro", None) else p, dim, keepdim, dtype=dtype)


# ---- sampling -----------------------------------------------------------------------------

def multinomial(input: Node, num_samples: int, replacement: bool = False, *,
                generator=None) -> Node:
    """``num_samples`` category indices drawn for each row of the weights ``input`` (1-D
    or 2-D, non-negative, any positive sum), without or with ``replacement``; from
    ``generator`` (an ``mt.Generator``; None: the stream ``mt.manual_seed`` seeds)."""
    return Node(L.multinomial(input.value, num_samples, replacement, generator))


def _node_state(arr: np.ndarray) -> Node:
    return Node(from_array(arr))


Generator.wrap_state = staticmethod(_node_state)


def get_rng_state() -> Node:
    """The default stream's position (``set_rng_state`` goes back to it)."""
    return creation.default_generator().get_state()


def set_rng_state(state) -> None:
    creation.default_generator().set_state(state)


def seed() -> int:
    """Reseed the default stream from the OS's entropy; returns the seed."""
    return creation.default_generator().seed()


def initial_seed() -> int:
    return creation.default_generator().initial_seed()


#: ``mt.<name>`` (api.py).
FUNCTIONS = {
    "gather": gather, "scatter": scatter, "scatter_add": scatter_add,
    "index_select": index_select, "index_add": index_add,
    "argsort": argsort, "sort": sort, "topk": topk,
    "cumsum": cumsum, "cumprod": cumprod,
    "norm": norm, "multinomial": multinomial, "Generator": Generator,
    "get_rng_state": get_rng_state, "set_rng_state": set_rng_state, "seed": seed,
    "initial_seed": initial_seed,
}
#: Node's methods (installed below), with the in-place forms PyTorch has.
_OUT_OF_PLACE = {name: fn for name, fn in FUNCTIONS.items() if name in (
    "gather", "scatter", "scatter_add", "index_select", "index_add", "argsort", "sort",
    "topk", "cumsum", "cumprod", "norm", "multinomial")}
METHODS = {**_OUT_OF_PLACE, **{f"{name}_": _in_place_form(_OUT_OF_PLACE[name]) for name in (
    "scatter", "scatter_add", "index_add", "cumsum", "cumprod")}}


def install() -> None:
    for name, method in METHODS.items():
        setattr(Node, name, method)


install()

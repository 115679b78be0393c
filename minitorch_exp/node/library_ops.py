"""Library ops at the Node level: gathers, scatters, sorts, scans, norms, sampling.

Each row of ``LIBRARY`` (tensor/library.py) -- its forward one library call
(NumPy, or CuPy on a GPU, on the tensor's array), its gradient rule beside it --
becomes one Function here (``Gather``, ``IndexAdd``, ``Cumprod``...). Its rule runs
as written on Tensors in a first backward and on Nodes in one that records
(``create_graph``), with the functions ``forms.of(g)`` gives (``TENSOR_FORMS`` or
``NODE_FORMS``, registered there): one body for both. The functions below give each
row PyTorch's signature. The rest are compositions: ``sort`` and ``topk`` are an
``argsort`` (no gradient: indices) and a ``gather`` (whose gradient scatters back);
``vector_norm`` is a reduction of the registry.

Every library call runs through ``capture.host_op``, so a captured step replays
it on the values of that run (``multinomial`` draws anew on each replay).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ..tensor import creation, dtypes
from ..tensor.engine import realize
from ..tensor.generator import Generator
from ..tensor.layout import normalize_axes, normalize_axis
from ..tensor.library import LIBRARY, TENSOR_FORMS, LibraryDef
from ..tensor.ops import _e
from ..tensor.tensor import from_array
from . import forms, ops, views
from .function import Function
from .masks import _in_place_form
from .node import Node, zeros_like

SortResult = namedtuple("sort", ["values", "indices"])
TopKResult = namedtuple("topk", ["values", "indices"])


class LibraryFunction(Function):
    """A row of ``LIBRARY`` as a Function: forward its Tensor-level call, backward its
    rule (``row.derivative``), one body for both levels. Subclassed once per row."""

    keyword_attributes = True
    backward_on_nodes = True
    row: LibraryDef

    @staticmethod
    def forward(ctx, x, *operands, dim, **attrs):
        x, *operands = (realize(v) for v in (x, *operands))
        ctx.save_for_backward(x, *operands)
        return ctx.fn.row.forward(x, dim, *operands, **attrs)

    @staticmethod
    def backward(ctx, g):
        return ctx.fn.row.derivative(forms.of(g), g, *ctx.saved_tensors, **ctx.attrs)


def _function_class(row: LibraryDef) -> type:
    name = "".join(word.capitalize() for word in row.name.split("_"))  # ScatterAdd
    return type(name, (LibraryFunction,), {
        "row": row, "__module__": __name__, "__qualname__": name,
        "__doc__": f"``{row.name}``; backward: its row's rule (tensor/library.py)."})


#: ``Gather``, ``ScatterAdd``, ``Cumprod``...: the Function of each differentiable row.
LIBRARY_FUNCTIONS = {name: _function_class(row) for name, row in LIBRARY.items()
                     if row.derivative is not None}
Gather, Scatter, ScatterAdd, IndexSelect, IndexAdd, Cumsum, Cumprod = (
    LIBRARY_FUNCTIONS[name] for name in ("gather", "scatter", "scatter_add", "index_select",
                                         "index_add", "cumsum", "cumprod"))


def _as_index(index, like: Node) -> Node:
    """``index`` as a Node; a list or array of indices made an int64 tensor on ``like``'s
    device."""
    if isinstance(index, Node):
        return index
    return Node(from_array(np.asarray(index, dtype=np.int64))).to(like.device)


# ---- gather and scatter ---------------------------------------------------------------

def gather(input: Node, dim: int, index: Node) -> Node:
    """``out[i][j] = input[index[i][j]][j]`` (dim 0), ``input[i][index[i][j]]`` (dim 1)..."""
    return Gather.apply(input, _as_index(index, input), dim=dim)


def _scatter(input: Node, dim: int, index, src, add: bool, value=None) -> Node:
    op = "scatter_add" if add else "scatter"
    index = _as_index(index, input)
    if isinstance(src, Node):
        if src.dtype != input.dtype:
            raise TypeError(f"{op}: src is {src.dtype.name}, the input {input.dtype.name}; "
                            "cast one of them (src.to(input.dtype))")
        return (ScatterAdd if add else Scatter).apply(input, index, src, dim=dim)
    value = src if value is None else value
    if value is None:
        raise TypeError(f"{op}: give src (a tensor) or value (a number)")
    if add:
        raise TypeError(f"scatter_add: src must be a tensor, got {type(value).__name__}")
    return Scatter.apply(input, index, dim=dim, value=value)


def scatter(input: Node, dim: int, index: Node, src=None, *, value=None) -> Node:
    """A copy of ``input`` with ``src[i][j]`` (or ``value``) written at
    ``[index[i][j]][j]`` (dim 0), and so on; where indices repeat, one write wins."""
    return _scatter(input, dim, index, src, False, value)


def scatter_add(input: Node, dim: int, index: Node, src: Node) -> Node:
    """``scatter`` that adds ``src`` at ``index`` (repeated indices add up)."""
    return _scatter(input, dim, index, src, True)


def index_select(input: Node, dim: int, index: Node) -> Node:
    """The entries of ``input`` at the 1-D ``index`` along ``dim``."""
    return IndexSelect.apply(input, _as_index(index, input), dim=dim)


def index_add(input: Node, dim: int, index: Node, source: Node, *, alpha=1) -> Node:
    """A copy of ``input`` with ``alpha * source`` added at ``index`` along ``dim``."""
    return IndexAdd.apply(input, _as_index(index, input), source, dim=dim, alpha=alpha)


# ---- sorting: an argsort, then a gather ----------------------------------------------------

def argsort(input: Node, dim: int = -1, descending: bool = False, stable: bool = False) -> Node:
    """The int64 indices that sort ``input`` along ``dim`` (always stable here)."""
    return Node(LIBRARY["argsort"].forward(input.value, dim, descending))


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


# ---- scans ----------------------------------------------------------------------------

def _scan_input(input: Node, dtype) -> Node:
    return input if dtype is None else ops.astype(input, dtypes.as_dtype(dtype))


def cumsum(input: Node, dim: int, *, dtype=None) -> Node:
    return Cumsum.apply(_scan_input(input, dtype), dim=dim)


def cumprod(input: Node, dim: int, *, dtype=None) -> Node:
    return Cumprod.apply(_scan_input(input, dtype), dim=dim)


# ---- norms ----------------------------------------------------------------------------

class VectorNorm(Function):
    """``(sum |x|^p)^(1/p)`` over ``axes``, kept as size-1 dims; ``inf``/``-inf`` the
    largest/smallest ``|x|``, 0 the count of nonzeros: a reduction of the registry over
    a fused expression. Backward: ``sign(x) (|x| / norm)^(p-1)``, 0 where the norm (or
    ``x``, for p < 1) is 0; for ``inf`` the gradient shared among the entries at the
    maximum, as PyTorch shares it. One body for both levels (``backward_on_nodes``)."""

    keyword_attributes = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, ord, axes):
        x = realize(x)
        if ord in (math.inf, -math.inf):
            out = abs(x).max(axes, True) if ord > 0 else abs(x).min(axes, True)
        elif ord == 0:
            out = (x != 0).astype(x.dtype).sum(axes, True)
        elif ord == 2:
            out = (x * x).sum(axes, True).sqrt()
        else:
            out = (abs(x) ** ord).sum(axes, True) ** (1.0 / ord)
        out = realize(out)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, norm = ctx.saved_tensors
        ord, e = ctx.attrs["ord"], _e(g)
        g, norm = g.broadcast_to(x.shape), norm.broadcast_to(x.shape)
        if ord == 0:
            return (e.where(True, 0.0, g),)
        if ord in (math.inf, -math.inf):
            at = (abs(x) == norm).astype(x.dtype)
            share = at.sum(ctx.attrs["axes"], True).broadcast_to(x.shape)
            return (x.sign() * at * g / share,)
        scale = (abs(x) / e.where(norm == 0, 1.0, norm)) ** (ord - 1)
        return (e.where((norm == 0) | (x == 0), 0.0, x.sign() * scale * g),)


def vector_norm(x: Node, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Node:
    """PyTorch's ``torch.linalg.vector_norm``: the ``ord``-norm over ``dim`` (None: all)."""
    x = _scan_input(x, dtype)
    if x.dtype.kind != "f":
        raise TypeError(f"vector_norm: expected a float tensor, got {x.dtype.name}")
    axes = tuple(range(x.ndim)) if dim is None else tuple(
        sorted(normalize_axes(dim, x.ndim, x.shape)))
    out = VectorNorm.apply(x, ord=float(ord), axes=axes)
    return out if keepdim else ops.reshape(out, tuple(n for i, n in enumerate(x.shape)
                                                      if i not in axes))


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
    return Node(LIBRARY["multinomial"].forward(input.value, num_samples, replacement,
                                                generator))


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


#: What a row's rule calls its ``f`` in a backward that records: the Node level's twins
#: of tensor/library.py's ``TENSOR_FORMS``.
NODE_FORMS = dict(
    gather=gather, scatter=scatter, scatter_add=scatter_add, index_select=index_select,
    index_add=index_add, cumsum=cumsum, cumprod=cumprod, argsort=argsort,
    multinomial=multinomial, flip=views.flip, zeros_like=zeros_like,
    embed=lambda t, shape: ops.place_at_index(t, tuple(slice(0, n) for n in t.shape), shape))
forms.add(TENSOR_FORMS, NODE_FORMS)

#: ``mt.<name>`` (api.py): each row's function, and the compositions and the random
#: stream's controls.
FUNCTIONS = {
    **{name: NODE_FORMS[name] for name in LIBRARY},
    "sort": sort, "topk": topk, "norm": norm, "Generator": Generator,
    "get_rng_state": get_rng_state, "set_rng_state": set_rng_state, "seed": seed,
    "initial_seed": initial_seed,
}
#: Node's methods (installed below): each row's and composition's, and the in-place
#: forms PyTorch has (a row's ``in_place``).
METHODS = {name: FUNCTIONS[name] for name in (*LIBRARY, "sort", "topk", "norm")}
METHODS.update((f"{name}_", _in_place_form(FUNCTIONS[name]))
               for name, row in LIBRARY.items() if row.in_place)


def install() -> None:
    for name, method in METHODS.items():
        setattr(Node, name, method)


install()

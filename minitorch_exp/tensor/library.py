"""Library ops at the Tensor level: each one call into the device's array library.

Gathers and scatters, sorts, scans and random sampling are no per-element
formula the fused kernels could hold: each is evaluated by one call of the
device's array module (``t.device.xp``: NumPy on the CPU, CuPy on a GPU) on
the tensors' arrays, strides and all. ``library_call`` is the one place that
runs them: it makes the result tensors and fills them through
``capture.host_op``, so a captured step repeats the call on every replay (on
the values the replayed kernels left in its inputs) rather than keeping the
values of the recording. Their gradients are written with these same functions
by node/library_ops.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import capture, dtypes
from .backends import device_backend
from .creation import _rng, new_empty, zeros, zeros_like
from .engine import evaluate
from .expr import Exp
from .layout import normalize_axis
from .slicing import flip
from .tensor import Tensor


def library_call(fn, inputs: tuple, outputs: list[tuple], device) -> tuple[Tensor, ...]:
    """New tensors of ``outputs`` (``(shape, dtype)`` each) on ``device``, holding
    ``fn(xp, *arrays)`` -- one array per output -- of the ``inputs`` (Tensors or
    expressions, or anything else passed as it is). Recorded by a capture, replayed
    with it."""
    outs = tuple(new_empty(tuple(shape), dtypes.as_dtype(dtype), device)
                 for shape, dtype in outputs)

    inputs = tuple(evaluate(a) if isinstance(a, Exp) and not isinstance(a, Tensor) else a
                   for a in inputs)  # an expression (a gradient, say) is computed first

    def run():
        xp = device.xp
        results = fn(xp, *(a.array if isinstance(a, Tensor) else a for a in inputs))
        for out, r in zip(outs, results):
            out.array[...] = xp.asarray(r)

    capture.host_op(run, *(o.storage for o in outs))
    return outs


def _dim(t: Tensor, dim: int) -> int:
    return normalize_axis(dim, t.ndim, t.shape) if t.ndim else 0


def _check_index(xp, index, size: int, dim: int, op: str) -> None:
    """Refuse an index outside ``[0, size)`` (NumPy would wrap a negative one)."""
    if index.size and (int(index.min()) < 0 or int(index.max()) >= size):
        bad = int(index.min()) if int(index.min()) < 0 else int(index.max())
        raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with "
                         f"size {size}")


def _coords(xp, index, dim: int) -> tuple:
    """The full fancy index of each entry of ``index`` along ``dim``: ``index`` itself
    there, the entry's own position along every other dim (PyTorch's gather rule)."""
    nd = index.ndim
    return tuple(index if d == dim else
                 xp.arange(n).reshape(tuple(-1 if e == d else 1 for e in range(nd)))
                 for d, n in enumerate(index.shape))


def _checked_index_shape(t: Tensor, dim: int, index: Tensor, op: str) -> None:
    if index.dtype != dtypes.int64 or index.ndim != max(t.ndim, 1) and t.ndim:
        raise ValueError(f"{op}: index must be an int64 tensor with as many dims as the "
                         f"input ({t.ndim}); got {index.dtype.name} of shape {index.shape}")
    for d, (n, m) in enumerate(zip(index.shape, t.shape)):
        if d != dim and n > m:
            raise ValueError(f"{op}: index has size {n} in dim {d}, the input only {m}")


def _part(xp, src, shape):
    """The leading ``shape`` block of ``src`` (PyTorch reads a larger src so)."""
    return src[tuple(slice(0, n) for n in shape)] if hasattr(src, "shape") else src


def gather(t: Tensor, dim: int, index: Tensor) -> Tensor:
    """``out[i][j][k] = t[index[i][j][k]][j][k]`` for ``dim == 0``, and so on."""
    dim = _dim(t, dim)
    _checked_index_shape(t, dim, index, "gather")

    def fn(xp, a, idx):
        _check_index(xp, idx, a.shape[dim], dim, "gather")
        return (a[_coords(xp, idx, dim)],)
    return library_call(fn, (t, index), [(index.shape, t.dtype)], t.device)[0]


def scatter(t: Tensor, dim: int, index: Tensor, src=None, *, value=None) -> Tensor:
    """A copy of ``t`` with ``src`` (a tensor; or the number ``value``) written at
    ``index`` along ``dim``; where indices repeat, one write wins."""
    return _scatter(t, dim, index, value if src is None else src, False)


def scatter_add(t: Tensor, dim: int, index: Tensor, src) -> Tensor:
    """``scatter`` that adds ``src`` at ``index`` (repeated indices add up)."""
    return _scatter(t, dim, index, src, True)


def _scatter(t: Tensor, dim: int, index: Tensor, src, reduce_add: bool) -> Tensor:
    dim = _dim(t, dim)
    op = "scatter_add" if reduce_add else "scatter"
    _checked_index_shape(t, dim, index, op)

    def fn(xp, a, idx, s):
        _check_index(xp, idx, a.shape[dim], dim, op)
        out, at, part = a.copy(), _coords(xp, idx, dim), _part(xp, s, idx.shape)
        if reduce_add:
            xp.add.at(out, at, part)
        else:
            out[at] = part
        return (out,)
    return library_call(fn, (t, index, src), [(t.shape, t.dtype)], t.device)[0]


def index_select(t: Tensor, dim: int, index: Tensor) -> Tensor:
    """The entries of ``t`` at the 1-D ``index`` along ``dim``."""
    dim = _dim(t, dim)
    _checked_vector(index, "index_select")
    shape = t.shape[:dim] + (index.shape[0],) + t.shape[dim + 1:] if t.ndim else ()

    def fn(xp, a, idx):
        _check_index(xp, idx, a.shape[dim] if a.ndim else 1, dim, "index_select")
        return (xp.take(a, idx, axis=dim) if a.ndim else a.copy(),)
    return library_call(fn, (t, index.reshape(-1)), [(shape, t.dtype)], t.device)[0]


def index_add(t: Tensor, dim: int, index: Tensor, source: Tensor, alpha=1) -> Tensor:
    """A copy of ``t`` with ``alpha * source[k]`` added at ``index[k]`` along ``dim``."""
    dim = _dim(t, dim)
    _checked_vector(index, "index_add")

    backend = device_backend(t.device)

    def fn(xp, a, idx, s):
        _check_index(xp, idx, a.shape[dim], dim, "index_add")
        out = a.copy()
        s = s * alpha if alpha != 1 else s
        if dim == 0 and s.shape == idx.shape + out.shape[1:]:  # rows: an embedding's
            backend.add_rows(out, idx, s)
        else:
            xp.add.at(out, (slice(None),) * dim + (idx,), s)
        return (out,)
    return library_call(fn, (t, index, source), [(t.shape, t.dtype)], t.device)[0]


def _checked_vector(index: Tensor, op: str) -> None:
    if index.dtype not in (dtypes.int64, dtypes.int32) or index.ndim > 1:
        raise ValueError(f"{op}: index must be a 1-D integer tensor, got {index.dtype.name} "
                         f"of shape {index.shape}")


# ---- sorting -----------------------------------------------------------------------

def _stable_argsort(xp, a, axis: int):
    return xp.argsort(a, axis=axis, kind="stable") if xp is np else xp.argsort(a, axis=axis)


def argsort(t: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The int64 indices that sort ``t`` along ``dim``; stable (ties keep their order,
    descending too), NaN counted as the largest value, as PyTorch's."""
    dim = _dim(t, dim)

    def fn(xp, a):
        if a.ndim == 0:
            return (xp.zeros((), dtype=np.int64),)
        if not descending:
            return (_stable_argsort(xp, a, dim),)
        n = a.shape[dim]  # sort the reversed values, then reverse: ties stay in order
        order = _stable_argsort(xp, xp.flip(a, dim), dim)
        return (xp.flip(n - 1 - order, dim),)
    return library_call(fn, (t,), [(t.shape, dtypes.int64)], t.device)[0]


# ---- scans ----------------------------------------------------------------

def _scan_dtype(t: Tensor):
    """PyTorch's: integers and bools accumulate in int64, floats in their own dtype."""
    return t.dtype if t.dtype.kind == "f" else dtypes.int64


def cumsum(t: Tensor, dim: int) -> Tensor:
    """Running sums along ``dim``."""
    return _scan(t, dim, "cumsum")


def cumprod(t: Tensor, dim: int) -> Tensor:
    """Running products along ``dim``."""
    return _scan(t, dim, "cumprod")


def _scan(t: Tensor, dim: int, name: str) -> Tensor:
    dim, dtype = _dim(t, dim), _scan_dtype(t)

    def fn(xp, a):
        a = a.reshape(1) if a.ndim == 0 else a
        return (getattr(xp, name)(a, axis=dim, dtype=dtype).reshape(t.shape),)
    return library_call(fn, (t,), [(t.shape, dtype)], t.device)[0]


# ---- random sampling --------------------------------------------------------------------

def multinomial(probs: Tensor, num_samples: int, replacement: bool = False,
                generator=None) -> Tensor:
    """``num_samples`` category indices per row of ``probs`` (1-D or 2-D weights, not
    necessarily normalized), drawn on the host from ``generator`` (None: the default
    stream, as it is at each draw -- a replay after ``manual_seed`` draws anew)."""
    _check_multinomial(probs, num_samples, replacement)
    shape = probs.shape[:-1] + (num_samples,)

    def fn(xp, p):
        weights = _host_rows(xp, p)
        draw = _with_replacement if replacement else _without_replacement
        return (draw(_rng(generator), weights, num_samples).reshape(shape),)
    return library_call(fn, (probs,), [(shape, dtypes.int64)], probs.device)[0]


def _check_multinomial(probs: Tensor, num_samples: int, replacement: bool) -> None:
    if probs.ndim not in (1, 2) or probs.dtype.kind != "f":
        raise RuntimeError(f"multinomial: prob_dist must be a 1-D or 2-D float tensor, got "
                           f"{probs.dtype.name} of shape {probs.shape}")
    if probs.shape[-1] == 0:
        raise RuntimeError("multinomial: the number of categories cannot be zero")
    if not isinstance(num_samples, (int, np.integer)) or num_samples <= 0:
        raise RuntimeError(f"multinomial: cannot sample n_sample <= 0 samples "
                           f"(got {num_samples!r})")
    if not replacement and num_samples > probs.shape[-1]:
        raise RuntimeError(f"multinomial: cannot sample n_sample > prob_dist.size(-1) "
                           f"samples without replacement ({num_samples} > {probs.shape[-1]})")


def _host_rows(xp, p) -> np.ndarray:
    """The weights as a float64 host array of rows, checked as PyTorch checks them."""
    w = np.asarray(p if xp is np else xp.asnumpy(p), dtype=np.float64).reshape(-1, p.shape[-1])
    if not np.isfinite(w).all() or (w < 0).any():
        raise RuntimeError("multinomial: probability tensor contains either `inf`, `nan` "
                           "or element < 0")
    if (w.sum(axis=1) <= 0).any():
        raise RuntimeError("multinomial: invalid multinomial distribution (sum of "
                           "probabilities <= 0)")
    return w


def _with_replacement(rng, w: np.ndarray, k: int) -> np.ndarray:
    """Inverse CDF: a uniform draw lands in the category whose share of the running sum
    holds it (a zero weight holds no share, so it is never drawn)."""
    cdf = np.cumsum(w, axis=1)
    cdf /= cdf[:, -1:]
    u = rng.random((w.shape[0], k))
    return np.stack([np.searchsorted(c, v, side="right") for c, v in zip(cdf, u)])


def _without_replacement(rng, w: np.ndarray, k: int) -> np.ndarray:
    """Exponential races: the ``k`` smallest of ``E / w`` (``E`` ~ Exp(1)) are the
    categories that drawing one at a time, each in proportion to the weights left,
    picks, in that order. Zero weights come last, in index order, as PyTorch's do when
    fewer than ``k`` are positive."""
    with np.errstate(divide="ignore"):
        keys = rng.standard_exponential(w.shape) / w
    return np.argsort(keys, axis=1, kind="stable")[:, :k]


# ---- the registry of library ops -------------------------------------------------------

@dataclass(frozen=True)
class LibraryDef:
    """A library op: a boundary of fusion (mshadow's complex expressions) that one call
    of the device's array module evaluates, with its gradient rule beside it.

    ``forward(input, dim, *operands, **attrs)`` is the Tensor-level function
    (``T.<name>``), in PyTorch's order; ``derivative(f, g, input, *operands, dim,
    **attrs)`` gives one gradient per operand (None
    where there is none), written once with the functions of ``f``: this module's
    (``TENSOR_FORMS``) in a first backward, the Node level's in one that records
    (``create_graph``), so the same body serves both. The Node level makes one Function
    per row (node/library_ops.py), and ``mt.<name>``, the method, and ``<name>_`` where
    ``in_place``.
    """

    name: str
    forward: Callable
    derivative: Callable | None = None
    in_place: bool = False


def _d_gather(f, g, x, index, *, dim):
    return f.scatter_add(f.zeros_like(x), dim, index, g), None


def _src_gradient(f, g, index, src, dim):
    """``src``'s gradient: ``g`` at ``index``, and 0 past it (only the leading block of a
    larger ``src`` is read, as PyTorch reads it); None for a number."""
    if not hasattr(src, "shape"):
        return None
    gs = f.gather(g, dim, index)
    return gs if gs.shape == src.shape else f.embed(gs, src.shape)


def _d_scatter(f, g, x, index, *src, dim, value=None):
    gx = f.scatter(g, dim, index, value=0)
    return (gx, None, _src_gradient(f, g, index, src[0], dim)) if src else (gx, None)


def _d_scatter_add(f, g, x, index, src, *, dim):
    return g, None, _src_gradient(f, g, index, src, dim)


def _d_index_select(f, g, x, index, *, dim):
    return f.index_add(f.zeros_like(x), dim, index, g), None


def _d_index_add(f, g, x, index, source, *, dim, alpha=1):
    gs = f.index_select(g, dim, index)
    return g, None, gs if alpha == 1 else gs * alpha


def _reversed_cumsum(f, t, dim):
    """Sums from each entry to the end of ``dim``."""
    return f.flip(f.cumsum(f.flip(t, dim), dim), dim)


def _d_cumsum(f, g, x, *, dim):
    return (_reversed_cumsum(f, g, dim),)


def _d_cumprod(f, g, x, *, dim):
    """``grad[k] = sum over j >= k of g[j] * (the product of x[:j+1] but x[k])``, with
    no division by zero and a right derivative of its own (as ``prod``'s rule in
    tensor/ops.py): ``p`` are the running products of the nonzero entries, ``n`` the
    running counts of zeros, ``zsum`` the running sums of the zeros (0, with a gradient
    of 1 to each). A nonzero entry's term is ``p / x`` times the zeros' product so far;
    a zero entry's is ``p`` times the product of the other zeros (1 alone; the other
    one, ``zsum - x``, with two; else 0)."""
    zero = x == 0
    nonzero = f.where(zero, 1, x)
    p = f.cumprod(nonzero, dim)
    n = f.cumsum(zero.astype(x.dtype), dim)
    zsum = f.cumsum(f.where(zero, x, 0), dim)
    gp = g * p
    elsewhere = _reversed_cumsum(f, gp * f.where(n == 0, 1, f.where(n == 1, zsum, 0)), dim)
    at_zero = (_reversed_cumsum(f, gp * f.where(n == 1, 1, f.where(n == 2, zsum, 0)), dim)
               - x * _reversed_cumsum(f, gp * (n == 2), dim))
    return (f.where(zero, at_zero, elsewhere / nonzero),)


def _embed(t, shape) -> Tensor:
    """``t`` as the leading block of a zero tensor of ``shape``."""
    out = zeros(shape, dtype=t.dtype, device=t.device)
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


LIBRARY: dict[str, LibraryDef] = {row.name: row for row in [
    LibraryDef("gather", gather, _d_gather),
    LibraryDef("scatter", scatter, _d_scatter, in_place=True),
    LibraryDef("scatter_add", scatter_add, _d_scatter_add, in_place=True),
    LibraryDef("index_select", index_select, _d_index_select),
    LibraryDef("index_add", index_add, _d_index_add, in_place=True),
    LibraryDef("cumsum", cumsum, _d_cumsum, in_place=True),
    LibraryDef("cumprod", cumprod, _d_cumprod, in_place=True),
    LibraryDef("argsort", argsort),
    LibraryDef("multinomial", multinomial),
]}
#: What a rule's ``f`` is in a first backward: the rows and the few functions the
#: rules build with, at the Tensor level (the Node level's twin: node/library_ops.py).
TENSOR_FORMS = {**{name: row.forward for name, row in LIBRARY.items()},
                "flip": flip, "zeros_like": zeros_like, "embed": _embed}
#: ``T.<name>`` for each row (tensor/__init__.py).
FUNCTIONS = {name: row.forward for name, row in LIBRARY.items()}

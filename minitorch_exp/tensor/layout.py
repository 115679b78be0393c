"""Index arithmetic for strided tensors, as small pure functions.

A tensor's elements live in one flat buffer. Its *layout* says where:
element ``(i0, ..., ik)`` sits at ``offset + i0*strides[0] + ... + ik*strides[k]``.
Strides are counted in elements (not bytes) and may be negative (reversed
slices) or zero (broadcast dimensions). Every view -- slicing, transposing,
expanding, reshaping -- is a new layout over the same buffer.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import NamedTuple

from .caches import memo_table

Shape = tuple[int, ...]
Strides = tuple[int, ...]


class Layout(NamedTuple):
    """An immutable (shape, strides, offset) triple."""

    shape: Shape
    strides: Strides
    offset: int = 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@functools.lru_cache(maxsize=4096)
def contiguous_strides(shape: Shape) -> Strides:
    """Row-major (C order) strides: the last dimension moves fastest."""
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


#: shape -> its row-major Layout at offset 0. A Layout is an immutable value, so one per
#: shape serves every tensor; the evaluator of small work makes a tensor per op, and
#: reads this table inline (tensor/eager.py).
CONTIGUOUS = memo_table("layout.contiguous", 4096)


def contiguous(shape: Shape, offset: int = 0) -> Layout:
    shape = tuple(shape)
    if offset:
        return Layout(shape, contiguous_strides(shape), offset)
    layout = CONTIGUOUS.get(shape)
    if layout is None:
        layout = CONTIGUOUS.keep(shape, Layout(shape, contiguous_strides(shape), 0))
    return layout


def is_contiguous(shape: Shape, strides: Strides) -> bool:
    """True when the layout is row-major with no gaps (size-1 dims may have any stride).

    An empty layout addresses nothing, so it is contiguous whatever its strides
    (NumPy's flag agrees).
    """
    if 0 in shape:
        return True
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def normalize_shape(shape) -> Shape:
    """Accept ``f(2, 3)``, ``f((2, 3))`` or ``f([2, 3])`` spellings of a shape."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    try:
        out = tuple(map(operator.index, shape))
    except TypeError:
        raise TypeError(f"a shape must be a sequence of ints, got {shape!r}") from None
    return out


def check_shape(shape: Shape) -> Shape:
    if any(n < 0 for n in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


def broadcast_axes(shape: Shape, target: Shape) -> tuple[int, ...]:
    """The axes of ``target`` that broadcasting ``shape`` to it added or stretched: what
    a gradient of ``target``'s shape is summed over to give one of ``shape``."""
    lead = len(target) - len(shape)
    return tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and target[lead + i] != 1)


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy's broadcasting rule: align on the right; each pair of sizes must match or be 1."""
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return shapes[0]
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape, start=ndim - len(shape)):
            if n != out[i]:
                if out[i] != 1 and n != 1:
                    listed = " and ".join(str(tuple(s)) for s in shapes)
                    raise ValueError(f"shapes {listed} cannot broadcast")
                if n != 1:
                    out[i] = n
    return tuple(out)


def broadcast_layout(layout: Layout, shape: Shape) -> Layout:
    """View ``layout`` as ``shape``: new leading dims and size-1 dims get stride 0."""
    if layout.shape == shape:
        return layout
    lead = len(shape) - layout.ndim
    if lead < 0:
        raise ValueError(f"cannot broadcast shape {layout.shape} to {shape}: target has fewer dims")
    strides = [0] * lead
    for n, s, target in zip(layout.shape, layout.strides, shape[lead:]):
        if n == target:
            strides.append(s)
        elif n == 1:
            strides.append(0)
        else:
            raise ValueError(f"cannot broadcast shape {layout.shape} to {shape}")
    return Layout(tuple(shape), tuple(strides), layout.offset)


def normalize_axis(axis, ndim: int, shape: Shape | None = None) -> int:
    """``axis`` wrapped into ``range(ndim)``; ``shape`` (the tensor's) is for messages.

    Not an int: TypeError. Out of ``[-ndim, ndim - 1]``: IndexError (as PyTorch's). Both
    name the axis, the valid range and the shape.
    """
    try:
        i = operator.index(axis)
    except TypeError:
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r} "
                        f"({type(axis).__name__}){_valid(ndim, shape)}") from None
    if not -ndim <= i < max(ndim, 1):
        raise IndexError(f"axis {axis} is out of range{_valid(ndim, shape)}")
    return i % ndim if ndim else 0


def _valid(ndim: int, shape: Shape | None) -> str:
    """`` for a tensor of shape (2, 3) with 2 dims: expected a value in [-2, 1]``."""
    of = f"shape {tuple(shape)} with {len(shape)} dims" if shape is not None else f"{ndim} dims"
    return f" for a tensor of {of}: expected a value in [{-ndim}, {max(ndim, 1) - 1}]"


def normalize_axes(axis, ndim: int, shape: Shape | None = None) -> tuple[int, ...]:
    """``None`` means every axis; an int or a tuple/list of ints is wrapped and checked."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(normalize_axis(a, ndim, shape) for a in items)
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axis in {axis}")
    return axes


def permute_layout(layout: Layout, dims: tuple[int, ...]) -> Layout:
    dims = tuple(normalize_axis(d, layout.ndim, layout.shape) for d in dims)
    if sorted(dims) != list(range(layout.ndim)):
        raise ValueError(f"permute: {dims} is not a permutation of {layout.ndim} dims")
    return Layout(
        tuple(layout.shape[d] for d in dims), tuple(layout.strides[d] for d in dims), layout.offset
    )


def transpose_layout(layout: Layout, i: int, j: int) -> Layout:
    shape, strides = list(layout.shape), list(layout.strides)
    i = normalize_axis(i, len(shape), layout.shape)
    j = normalize_axis(j, len(shape), layout.shape)
    shape[i], shape[j] = shape[j], shape[i]
    strides[i], strides[j] = strides[j], strides[i]
    return Layout(tuple(shape), tuple(strides), layout.offset)


def expand_layout(layout: Layout, shape: Shape) -> Layout:
    """PyTorch's ``expand``: ``-1`` keeps a size; size-1 dims stretch with stride 0."""
    lead = len(shape) - layout.ndim
    if lead < 0:
        raise ValueError(f"expand: cannot expand shape {layout.shape} to fewer dims {shape}")
    target = list(shape)
    for i, n in enumerate(layout.shape):
        if target[lead + i] == -1:
            target[lead + i] = n
    if any(n == -1 for n in target[:lead]):
        raise ValueError(f"expand: -1 is not allowed for the new leading dims of {shape}")
    return broadcast_layout(layout, tuple(target))


def squeeze_layout(layout: Layout, axis=None) -> Layout:
    if axis is None:
        axes = {i for i, n in enumerate(layout.shape) if n == 1}
    else:
        axes = {a for a in normalize_axes(axis, layout.ndim, layout.shape)
                if layout.shape[a] == 1}
    keep = [i for i in range(layout.ndim) if i not in axes]
    return Layout(
        tuple(layout.shape[i] for i in keep), tuple(layout.strides[i] for i in keep), layout.offset
    )


def unsqueeze_layout(layout: Layout, axis: int) -> Layout:
    axis = normalize_axis(axis, layout.ndim + 1, layout.shape)
    shape = layout.shape[:axis] + (1,) + layout.shape[axis:]
    strides = layout.strides[:axis] + (0,) + layout.strides[axis:]
    return Layout(shape, strides, layout.offset)


def infer_shape(shape: Shape, numel: int) -> Shape:
    """Resolve one ``-1`` in a requested shape so that it holds ``numel`` elements."""
    if -1 not in shape and min(shape, default=0) >= 0:  # nothing to resolve
        if math.prod(shape) != numel:
            raise ValueError(f"cannot reshape {numel} elements into shape {shape}")
        return shape
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1:
        raise ValueError(f"only one dimension can be -1, got shape {shape}")
    if any(n < -1 for n in shape):
        raise ValueError(f"invalid shape {shape}")
    known = math.prod(n for n in shape if n != -1)
    if unknown:
        if known == 0 or numel % known:
            raise ValueError(f"cannot reshape {numel} elements into shape {shape}")
        shape = tuple(numel // known if n == -1 else n for n in shape)
    elif known != numel:
        raise ValueError(f"cannot reshape {numel} elements into shape {shape}")
    return shape


def reshape_strides(shape: Shape, strides: Strides, new_shape: Shape) -> Strides | None:
    """Strides that show the same elements in ``new_shape`` without copying, or None.

    Walk old and new dims together, grouping runs whose products match. A run of
    old dims can be regrouped only if it is itself contiguous (each stride equals
    the next stride times the next size); then the new dims of the run get
    row-major strides scaled to the run's innermost stride.
    """
    if math.prod(shape) == 0 or math.prod(new_shape) == 0:
        return contiguous_strides(new_shape)
    if is_contiguous(shape, strides):  # row-major: every run is contiguous, as below
        return tuple([0 if n == 1 else s for n, s in zip(new_shape, contiguous_strides(new_shape))])
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out: list[int] = []
    i = 0
    j = 0
    while j < len(new_shape):
        if new_shape[j] == 1:
            out.append(0)
            j += 1
            continue
        # Gather old dims and new dims until their products agree.
        old_run = [old[i]]
        i += 1
        new_run = [j]
        j += 1
        old_n, new_n = old_run[0][0], new_shape[new_run[0]]
        while old_n != new_n:
            if old_n < new_n:
                old_run.append(old[i])
                old_n *= old[i][0]
                i += 1
            else:
                new_run.append(j)
                new_n *= new_shape[j]
                j += 1
        for (_, outer), (n_inner, inner) in zip(old_run, old_run[1:]):
            if outer != inner * n_inner:
                return None
        step = old_run[-1][1]
        run_strides = []
        for k in reversed(new_run):
            run_strides.append(step)
            step *= new_shape[k]
        out.extend(reversed(run_strides))
    return tuple(out)


def index_layout(layout: Layout, key) -> Layout:
    """Apply basic indexing (ints, slices, None, Ellipsis) to a layout.

    Raises IndexError for out-of-range ints or too many indices.
    """
    if not isinstance(key, tuple):
        key = (key,)
    if None in key or Ellipsis in key:
        key = _expand_index(layout, key)
    elif len(key) > layout.ndim:
        raise IndexError(
            f"too many indices: tensor has {layout.ndim} dims but {len(key)} were indexed")
    shape: list[int] = []
    strides: list[int] = []
    offset = layout.offset
    dim = 0
    for k in key:
        if k is None:
            shape.append(1)
            strides.append(0)
            continue
        n, s = layout.shape[dim], layout.strides[dim]
        if type(k) is slice:
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            if length:
                offset += start * s
            shape.append(length)
            strides.append(s * step)
        else:
            i = operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of range for dim {dim} with size {n}")
            offset += (i % n) * s
        dim += 1
    return Layout((*shape, *layout.shape[dim:]), (*strides, *layout.strides[dim:]), offset)


def _expand_index(layout: Layout, key: tuple) -> tuple:
    """``key`` with its Ellipsis (if any) spelled out as full slices."""
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > layout.ndim:
        raise IndexError(
            f"too many indices: tensor has {layout.ndim} dims but {n_real} were indexed"
        )
    expanded: list = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (layout.ndim - n_real))
        else:
            expanded.append(k)
    return tuple(expanded)


def extent(layout: Layout) -> tuple[int, int]:
    """Lowest and highest buffer positions the layout touches (empty: (0, -1))."""
    if layout.numel == 0:
        return 0, -1
    lo = hi = layout.offset
    for n, s in zip(layout.shape, layout.strides):
        if s > 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi


def has_overlap_with_self(layout: Layout) -> bool:
    """True when two different indices map to one position (a stride-0 dim of size > 1)."""
    return any(s == 0 and n > 1 for n, s in zip(layout.shape, layout.strides))


def coalesce(shape: Shape, *stride_sets: Strides) -> tuple[Shape, list[Strides]]:
    """Merge adjacent dims that every operand walks as one (for fewer loop levels).

    Dims ``d`` and ``d+1`` merge when, for every operand, ``strides[d] ==
    strides[d+1] * shape[d+1]``. Size-1 dims are dropped first.
    """
    keep = [d for d, n in enumerate(shape) if n != 1]
    if len(keep) != len(shape):
        shape = tuple(shape[d] for d in keep)
        stride_sets = tuple(tuple(st[d] for d in keep) for st in stride_sets)
    if not shape:
        return (), [() for _ in stride_sets]
    out_shape = [shape[0]]
    out_strides = [[st[0]] for st in stride_sets]
    for d in range(1, len(shape)):
        n = shape[d]
        if all(acc[-1] == st[d] * n for acc, st in zip(out_strides, stride_sets)):
            out_shape[-1] *= n
            for acc, st in zip(out_strides, stride_sets):
                acc[-1] = st[d]
        else:
            out_shape.append(n)
            for acc, st in zip(out_strides, stride_sets):
                acc.append(st[d])
    return tuple(out_shape), [tuple(acc) for acc in out_strides]

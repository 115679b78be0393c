"""How a compiled numba kernel is called: loops over the operands, arguments, threads.

A kernel (``numba_compile.py``) takes each operand as its flat storage array
plus an offset and strides, so views of any kind need no copy. Working out
those arguments for a statement -- merging dims, broadcasting leaves, finding
which leaf aliases dst, reading an overlapping leaf through a private copy --
depends only on layouts, never on the data, so it is done once per
combination of layouts and kept:

* ``plan_loops`` / ``plan_group_loops`` / ``reduce_loops``: the loops one
  statement, a group of statements or a reduction walks, and each operand's
  kernel arguments after its array (``tails``);
* ``Launch``: one kernel call with every number bound; ``run`` only fills in
  the arrays (through a generated straight-line runner) and returns the call
  that repeats it.

Threads: a kernel runs its ``prange`` variant from ``parallel_min()`` elements
(by numba's threading layer; ``MINITORCH_PARALLEL_MIN`` or
``set_parallel_min`` override), counted in elements rather than element-
operations so that statements over the same arrays all split or all stay on
one core. Changing the threshold goes through ``caches.invalidate``: kept
launches hold ``may_parallel``. Why these numbers: ``docs/cpu_kernels.md``. While
other work fills the cores (``load.busy``), an elementwise kernel runs its serial
variant instead (``WhenFree``): the same bits, no waiting for a core.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

import numba

from . import caches, environment, load
from . import codegen as C
from . import layout as L
from .counters import _COUNTS, count
from .cpu_numpy import overlaps

MAX_DIMS = 4
# Elements from which the prange variant runs, by numba's threading layer (measured:
# docs/cpu_kernels.md). ``MINITORCH_PARALLEL_MIN`` or ``set_parallel_min`` overrides;
# None: this layer's, once numba's threads start.
PARALLEL_MIN_BY_LAYER = {"tbb": 3 << 15, "omp": 3 << 15, "workqueue": 1 << 24}
PARALLEL_MIN: int | None = environment.whole_number("MINITORCH_PARALLEL_MIN", None,
                                                    what="elements")


def parallel_min() -> int:
    """The elements from which a kernel splits over numba's threads."""
    global PARALLEL_MIN
    if PARALLEL_MIN is None:
        numba.get_num_threads()  # starts numba's threads, which fixes the layer
        PARALLEL_MIN = PARALLEL_MIN_BY_LAYER.get(numba.threading_layer(), 1 << 24)
    return PARALLEL_MIN


def set_parallel_min(elements: int | None) -> None:
    """Split kernels over at least ``elements`` elements (None: the layer's measured
    default). Launches worked out under the old value are forgotten."""
    global PARALLEL_MIN
    PARALLEL_MIN = elements
    caches.invalidate("numba parallel threshold")  # launches hold may_parallel


def go_parallel(elements: int) -> bool:
    """Whether a call over ``elements`` runs the prange variant now."""
    return elements >= parallel_min() and numba.get_num_threads() > 1


def reduce_chunks(loops, parallel: bool) -> int:
    """How many pieces a reduction's outermost reduced loop is cut into: one per thread
    for a column reduction (each piece has a row of accumulators), four per thread
    for a full one (the prange balances them), else one (the kept loop is the prange)."""
    if parallel and loops.by_columns:
        return numba.get_num_threads()
    if parallel and not loops.kept:
        return numba.get_num_threads() * 4
    return 1


# ---- launches ----------------------------------------------------------------

class Launch:
    """One kernel call worked out for a combination of plan, saver and layouts.

    ``template`` is the argument list with None where an operand's array goes;
    the scalars' values are appended at the call. A training step repeats its
    statements with new tensors of the same layouts, so each statement finds
    its launch with one dict lookup and only fills in the arrays.

    ``run(operands, scalars)`` (dsts first, then leaves) calls the kernel and
    returns ``(function, args)`` that repeat the call, or None if an operand
    was read through a private copy (repeating the args would read it stale).
    """

    __slots__ = ("kernel", "may_parallel", "template", "holes", "run", "function")

    def __init__(self, kernel, may_parallel: bool, template: list, holes: tuple):
        self.kernel = kernel                # the module with ``serial`` and ``parallel``
        self.may_parallel = may_parallel    # enough elements for prange (if threads > 1 then)
        self.template = template
        self.holes = holes                  # (argument index, operand index, private copy?)
        #: What runs the kernel, and repeats it in prepared and recorded calls: the
        #: serial variant, or (enough elements) ``WhenFree``, which chooses at each call.
        self.function = WhenFree(kernel) if may_parallel else kernel.serial
        copies = any(copy for _, _, copy in holes)
        self.run = self._run_with_copies if copies else _runner(self)

    def _run_with_copies(self, operands, scalars) -> None:
        count("cpu", "fused")
        args = self.template.copy()
        for at, k, copy in self.holes:
            t = operands[k]
            args[at] = private_copy(t) if copy else t.storage.data
        self.function(*args, *scalars)


class WhenFree:
    """A kernel's parallel variant where the calling thread may use several of numba's
    threads (``mt.set_num_threads``) and a core is free for them (``load.busy``), else
    its serial one, chosen at every call: prepared and recorded calls hold this, so a
    step captured on one thread runs on two after ``set_num_threads(2)``. An
    elementwise kernel computes each element alike on any thread, so the bits are
    the same either way."""

    __slots__ = ("serial", "parallel")

    def __init__(self, kernel):
        self.serial, self.parallel = kernel.serial, kernel.parallel

    def __call__(self, *args) -> None:
        shared = numba.get_num_threads() > 1 and not load.busy()
        (self.parallel if shared else self.serial)(*args)


def _runner(launch: Launch):
    """``launch.run`` as straight-line code: each array read from its operand, the
    template's numbers from the closure. At 1e3 elements a loop over the holes
    would cost about as much as the kernel call itself.

    The code depends only on where the holes are, so it is compiled once per
    such pattern and bound to each launch's numbers.
    """
    arrays = {at: k for at, k, _ in launch.holes}
    pattern = (len(launch.template), tuple(arrays.items()))
    bind = _RUNNER_FACTORIES.memo(pattern, lambda: _runner_factory(*pattern))
    numbers = [x for at, x in enumerate(launch.template) if at not in arrays]
    return bind(_COUNTS, ("cpu", "fused"), launch.function, numbers)


#: (template length, array holes) -> the compiled ``bind`` of a runner
_RUNNER_FACTORIES = caches.memo_table("numba.runner_factories", 1024)


def _runner_factory(length: int, arrays: tuple):
    arrays = dict(arrays)
    numbers = [f"c{at}" for at in range(length) if at not in arrays]
    args = "".join(f"operands[{arrays[at]}].storage.data, " if at in arrays else f"c{at}, "
                   for at in range(length))
    source = (f"def bind(counts, KEY, fn, numbers):\n"
              f"    ({''.join(n + ', ' for n in numbers)}) = numbers\n"
              f"    def run(operands, scalars):\n"
              f"        counts[KEY] = counts.get(KEY, 0) + 1\n"
              f"        args = ({args}*scalars)\n"
              f"        fn(*args)\n"
              f"        return fn, args\n"
              f"    return run\n")
    namespace: dict = {}
    exec(compile(source, "<minitorch_exp launch>", "exec"), namespace)
    return namespace["bind"]


def _no_elements(*args) -> None:
    """The kernel of a launch over zero elements."""


_NO_ELEMENTS = SimpleNamespace(serial=_no_elements, parallel=_no_elements)


def make_launch(kernel, shape, tails, copies, elements: int) -> Launch:
    """A Launch over loops ``shape`` (``elements`` in all) of operands with kernel
    arguments ``tails`` (None: no array, see ``tails_of``), reading the ``copies`` ones
    through private copies."""
    template, holes = list(shape), []
    for k, (tail, copy) in enumerate(zip(tails, copies)):
        if tail is not None:
            holes.append((len(template), k, copy))
            template += [None, *tail]
    if 0 in shape:
        kernel = _NO_ELEMENTS
    return Launch(kernel, elements >= parallel_min(), template, tuple(holes))


# ---- loops over the operands ---------------------------------------------------

class LoopLayout(NamedTuple):
    """How one elementwise kernel call walks memory (see ``plan_loops``)."""

    shape: L.Shape                      # merged loop sizes, outermost first
    tails: list                         # per operand: (offset, *strides) or None for "d"
    kinds: tuple[str, ...]              # innermost stride kind per operand, dst first
    copies: tuple[bool, ...]            # per leaf: read through a private copy


def plan_loops(dst, leaves) -> LoopLayout | None:
    """The loops of ``dst (saver)= plan(leaves)``: dst and the broadcast leaves in dst's
    memory order, adjacent dims merged; a leaf overlapping dst elsewhere than at the
    element written is read through a private copy. None beyond MAX_DIMS."""
    layouts, copies, shares = [dst.layout], [], []
    for t in leaves:
        lay = L.broadcast_layout(t.layout, dst.shape)
        copy = overlaps(dst, t.storage, lay)
        if copy:
            lay = L.broadcast_layout(L.contiguous(t.shape), dst.shape)
        layouts.append(lay)
        copies.append(copy)
        shares.append(t.storage is dst.storage and not copy)
    shape, strides, offsets = C.iteration_layout(dst.shape, layouts)
    if len(shape) > MAX_DIMS:
        return None
    kinds = C.operand_kinds(strides, offsets, shares)
    return LoopLayout(shape, tails_of(shape, strides, offsets, kinds), kinds, tuple(copies))


def tails_of(shape, strides, offsets, kinds) -> list:
    """Each operand's kernel arguments after its array: the offset and the strides its
    kind does not imply (``numba_source._stride_params``); None for a ``d`` operand."""
    return [None if kind[0] == "d" else (offsets[k], *strides[k][:len(shape) - (kind != "s")])
            for k, kind in enumerate(kinds)]


class GroupLoops(NamedTuple):
    """How one kernel of several statements walks memory (see ``plan_group_loops``)."""

    shape: L.Shape                      # merged loop sizes, outermost first
    tails: list                         # per dst, then per leaf: (offset, *strides) or None
    kinds: tuple[str, ...]              # the same order; ``d<j>``: the element dst j is at


def plan_group_loops(dsts, leaves) -> GroupLoops | None:
    """None when the statements cannot share one loop: an operand that meets a dst's
    storage anywhere but at the element being written (an element written earlier
    in the loop would be read too late, or one written later too soon)."""
    shape = dsts[0].shape
    layouts, same_as = [], []
    for k, d in enumerate(dsts):
        layouts.append(d.layout)
        same_as.append(_same_element(d.storage, d.layout, dsts[:k]))
        if same_as[-1] is None and any(overlaps(o, d.storage, d.layout) for o in dsts[:k]):
            return None
    for t in leaves:
        lay = L.broadcast_layout(t.layout, shape)
        if any(overlaps(d, t.storage, lay) for d in dsts):
            return None
        layouts.append(lay)
        same_as.append(_same_element(t.storage, lay, dsts))
    shape, strides, offsets = C.iteration_layout(shape, layouts)
    if len(shape) > MAX_DIMS:
        return None
    one = len(dsts) == 1
    kinds = tuple(C.inner_kind(st) if j is None else "d" if one else f"d{j}"
                  for st, j in zip(strides, same_as))
    return GroupLoops(shape, tails_of(shape, strides, offsets, kinds), kinds)


def _same_element(storage, layout, dsts) -> int | None:
    """The first of ``dsts`` that is ``layout`` of ``storage``: the same elements."""
    return next((j for j, d in enumerate(dsts) if d.storage is storage and d.layout == layout),
                None)


def private_copy(t):
    """A contiguous copy of ``t``'s elements: breaks aliasing with dst."""
    count("cpu", "copy")
    return t.array.copy(order="C").reshape(-1)


class ReduceLoops(NamedTuple):
    """How one reduction kernel call walks memory: kept loops outside, reduced inside."""

    kept: L.Shape                       # merged kept sizes (one output per index)
    reduced: L.Shape                    # merged reduced sizes
    out_tail: tuple                     # dst: (offset, *kept strides)
    tails: list                         # per leaf: (offset, *kept, *reduced strides)
    kinds: tuple[str, ...]              # per leaf: innermost loop's stride kind
    copies: tuple[bool, ...]            # per leaf: read through a private copy
    by_columns: bool                    # reduced loops outside (codegen.reduces_by_columns)


#: (dst layout, input shape, axes, kept shape, leaf layouts and aliasing) -> the loops
_REDUCE_LOOPS = caches.memo_table("numba.reduce_loops", 4096)


def reduce_loops(dst, e, leaves) -> ReduceLoops | None:
    """The loops for ``dst (saver)= e`` over ``leaves`` (of the lowered ``e.x``); None
    beyond MAX_DIMS.

    Like a Launch it depends only on layouts, so it is memoized on them.
    """
    key = (dst.layout, e.x.shape, e.axes, e.kept_shape,
           tuple((t.layout, t.storage is dst.storage) for t in leaves))
    return _REDUCE_LOOPS.memo(key, lambda: _plan_reduce_loops(dst, e, leaves))


def _plan_reduce_loops(dst, e, leaves) -> ReduceLoops | None:
    """Kept and reduced loops merged (``codegen.reduce_layout``), by columns when the
    reduced dims stride further than the kept ones."""
    x_shape = e.x.shape
    out = L.broadcast_layout(dst._try_view_reshape(e.kept_shape).layout, x_shape)
    layouts, copies = [out], []
    for t in leaves:
        lay = L.broadcast_layout(t.layout, x_shape)
        copies.append(overlaps(dst, t.storage, lay))
        layouts.append(L.broadcast_layout(L.contiguous(t.shape), x_shape) if copies[-1] else lay)
    kept, reduced, kstrides, rstrides = C.reduce_layout(x_shape, e.axes, layouts)
    if len(kept) > MAX_DIMS or len(reduced) > MAX_DIMS:
        return None
    by_columns = C.reduces_by_columns(kstrides, rstrides)
    kinds = C.reduce_kinds(kstrides, rstrides, by_columns)
    # A unit stride in the innermost loop is implied, not passed (numba_source._ReduceSpec).
    unit = [kind == "1" for kind in kinds]
    tails = [(lay.offset, *ks[:len(kept) - u], *rs) if by_columns else
             (lay.offset, *ks, *rs[:len(reduced) - u])
             for lay, ks, rs, u in zip(layouts[1:], kstrides[1:], rstrides, unit)]
    return ReduceLoops(kept, reduced, (out.offset, *kstrides[0]), tails, kinds, tuple(copies),
                       by_columns)

"""The backend contract: every method the engine may call on an evaluator.

An evaluator (a *backend*: NumPy blocks, numba loops, CUDA kernels) runs work
that the planner has already lowered: Plans (``plan.py``), the tensors they
read and the scalars' values, written into a destination tensor with a saver
(``=``, ``+=``, ...). The engine calls; a backend is called and never calls
back. So a backend module imports nothing of the engine, the planner or the
capture machinery:

* what it needs from the planner is passed in: a Plan and its leaves for an
  elementwise statement, the lowered input (``Lowered``) of a reduction;
* it records nothing: methods that run a kernel return the *call* that
  repeats it, ``(function, args)`` with every argument bound, and the engine
  keeps or records that call; None means a repeat would not be the same
  kernel call (an operand read through a private copy, a fallback that plans
  each time), so the engine repeats the method call itself instead;
* a change that makes kept launches wrong (another CPU backend, a new thread
  threshold) goes to the cache owner, ``caches.invalidate``, which the engine's
  memos are registered with: nothing calls the engine.

Every backend implements every method of ``Backend``. One that cannot do
something says so the documented way -- ``group_launch`` returns None -- and
never by lacking the method, so callers need no ``getattr`` probing.
``tests/tensor/test_backend_contract.py`` checks each backend class against
``Backend``, signatures included.

This module imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

#: ``(function, args)``: ``function(*args)`` repeats a kernel call exactly.
Call = tuple


class Lowered(NamedTuple):
    """A reduction's input lowered by the planner: what ``plan.make_plan(e.x, e.x.ndim)``
    returns. ``plan`` computes the input's elements from ``leaves`` (tensors) and
    ``scalars`` (values); any 3-tuple in this order will do."""

    plan: Any
    leaves: Sequence
    scalars: Sequence


@runtime_checkable
class KernelLaunch(Protocol):
    """One kernel call worked out for a Plan, a saver and operands' layouts, kept by the
    engine per statement key and run with each new statement's tensors."""

    def run(self, operands: Sequence, scalars: Sequence) -> Call | None:
        """Run the kernel over ``operands`` (dsts first, then the leaves) and
        ``scalars``; return the call that repeats it, or None."""


@runtime_checkable
class Backend(Protocol):
    """An evaluator of one device. Tensors passed in are on that device; ``saver`` is
    one of ``=``, ``+=``, ``-=``, ``*=``, ``/=`` and was checked by the engine."""

    #: ``"numpy"``, ``"numba"`` or ``"cuda"``: what ``explain`` reports.
    name: str

    def elementwise(self, plan, dst, leaves, scalars, saver: str) -> Call | None:
        """``dst (saver)= plan(leaves, scalars)``; the repeating call or None."""

    def launch(self, plan, dst, leaves, saver: str) -> KernelLaunch:
        """A ``KernelLaunch`` for this plan, saver and these layouts (dst's, the leaves',
        and which leaves share dst's storage): the engine keeps it per statement key
        and runs it with later statements of the same key. Never None."""

    def group_launch(self, dsts, plans, leaves, savers) -> KernelLaunch | None:
        """A ``KernelLaunch`` running statement ``k`` (``dsts[k] (savers[k])= plans[k]``,
        the leaves of all statements in order) per element in one loop, or None: the
        statements cannot share one loop, or this backend has no grouped kernels.
        None is an answer, not an error: the engine then runs them one at a time."""

    def dot(self, dst, a, b, saver: str) -> Call | None:
        """``dst (saver)= a @ b`` for tensors ``a`` and ``b``; the repeating call or None."""

    def accumulates_in_place(self, dst, a, b, saver: str) -> bool:
        """Whether ``dot`` applies the product to ``dst`` with ``saver`` as BLAS computes
        it (``beta = 1``), or else from a product-sized temporary: what ``dot`` does,
        and what ``explain`` reports."""

    def reduce(self, dst, e, saver: str, lowered: Lowered) -> Call | None:
        """``dst (saver)= e`` for a reduction ``e``, its input given as ``lowered``.

        The backend reads only ``e.reduction`` (the ``ops.ReduceDef`` row: what to
        compute, from its fields, never by its name), ``e.axes``, ``e.shape``,
        ``e.dtype``, ``e.kept_shape`` and its input's ``e.x.shape`` and ``e.x.dtype``:
        the input's values come from ``lowered``, never from evaluating ``e.x``.
        Returns the repeating call or None."""

    def flat_loop(self, plan, dtype) -> Callable | None:
        """For small work computed at once (eager.py): a compiled loop of ``plan`` over
        whole C-contiguous arrays of one shape, ``loop(shape, args) -> new array of
        dtype`` (``args``: each leaf's flat array and offset, then the scalars), where
        this backend has one that beats NumPy's forms -- an op of ``plan`` NumPy runs
        slowly (``OpDef.numpy_slow``), every op built in. None: NumPy's forms answer."""

    def add_rows(self, out, index, src) -> None:
        """``out[index[k]] += src[k]`` for every ``k`` in order, on this device's arrays:
        ``out`` (rows, ...) C-ordered, ``index`` 1-D integers already checked to lie in
        ``[0, rows)``, ``src`` (len(index), ...). Repeated indices add up, in ``k``'s
        order, as ``numpy.add.at`` adds them (an embedding's gradient: rows of a table
        scattered back from a batch)."""

    def column_sums(self, x, plan):
        """For small work computed at once: ``x.sum(0)`` of a C-ordered 2-D float array
        (a bias's gradient), accumulated in float64 row after row as NumPy does, by a
        loop of this backend's (``plan``: one leaf of ``x``'s dtype, which keeps it);
        None where it has none (NumPy's reduce answers)."""


class EvaluatorLaunch:
    """The ``KernelLaunch`` of a backend without launch objects of its own: each run
    calls its ``elementwise`` (NumPy blocks, CUDA, numba's NumPy fallback)."""

    __slots__ = ("backend", "plan", "saver")

    def __init__(self, backend: Backend, plan, saver: str):
        self.backend, self.plan, self.saver = backend, plan, saver

    def run(self, operands, scalars):
        return self.backend.elementwise(self.plan, operands[0], operands[1:], scalars,
                                        self.saver)


def whole_tensor(lowered: Lowered, shape):
    """The tensor a lowered input only reads -- no op, one leaf of ``shape`` -- so that
    its values need no kernel; else None."""
    plan, leaves, _ = lowered
    if plan.instrs or plan.out >= plan.n_leaves:
        return None
    t = leaves[plan.out]
    return t if tuple(t.shape) == tuple(shape) else None

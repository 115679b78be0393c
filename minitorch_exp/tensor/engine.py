"""ExpEngine: ``assign(dst, exp, saver)`` -- check, lower, dispatch, evaluate.

This is where laziness ends. The engine

1. checks the assignment (shape broadcastable to ``dst``, same device, a dtype
   that casts ``same_kind`` as NumPy's in-place ops require, ``dst`` writable);
2. evaluates every complex node nested *inside* a map (a dot or reduction whose
   result feeds further elementwise work) into a temporary, so that the rest
   is purely elementwise;
3. dispatches by the kind of what is left at the root: elementwise -> one fused
   pass; ``Dot`` -> BLAS; ``Reduce`` -> one pass over its fused input.

Which code runs that pass depends on the device's backend (``backends.py``),
which the engine calls only through the methods of the written contract,
``backend_contract.Backend``. Each method returns the call that repeats its
kernel (or None); while a capture records, ``_record`` keeps that call -- the
one place the engine and capture meet.

Two memos make repeated statements cheap. An expression assigned again into
the same place replays its bound call (``e.prepared``). A statement built
afresh with the same structure, layouts and aliasing as an earlier one -- a
training loop's every step -- finds that one's launch under its statement key
(``plan.statement_key``) and only fills in its arrays and scalars;
``assign_all`` keeps one launch per group of such keys.
"""

from __future__ import annotations

import numpy as np

from . import capture, counters, creation, eager
from . import expr as _expr
from . import layout as L
from .backends import device_backend
from .caches import memo_table
from .device import CPU
from .expr import (
    COMPLEX,
    MAPPER,
    RVALUE,
    Dot,
    Exp,
    Reduce,
    Scalar,
    as_exp,
    operand_str,
)
from .lower import Visitor, evaluated, root_body
from .ops import SAVERS
from .plan import NotElementwise, make_plan, statement_key, statement_plan
from .tensor import Tensor

# A *prepared* assignment, kept on its expression as ``e.prepared``: the tuple
# ``(dst, saver, epoch, fn, args)``, one kernel call with every argument bound.
# Assigning the same expression into the same tensor again (``w[...] = e`` in a
# loop, with ``e`` built once) replays ``fn(*args)``: no checks, no plan lookup,
# no argument marshalling. It is valid while nothing that decided the call can
# have changed: the destination, the saver and ``expr.EPOCH`` (which also moves
# when the CPU evaluator is switched). Tensors are immutable views, so the
# leaves and their layouts cannot change. (A tuple: a statement built afresh
# every step makes one per assignment and never replays it.)


def assign(dst, e: Exp, saver: str = "=", *, prepare: bool = True) -> None:
    """Evaluate ``e`` straight into the tensor ``dst`` with the given saver.

    ``prepare=False``: ``dst`` is a new temporary that nothing assigns into again,
    so no prepared call is kept (it would only hold the temporary alive). Small work
    is written at once by the evaluator of small work (``eager.assign``: the policy).
    """
    p = e.prepared
    if (p is not None and p[0] is dst and p[1] == saver and p[2] == _expr.EPOCH
            and not counters.DEBUG):
        fn, args = p[3], p[4]
        dst.storage.before_write()
        counters.count(dst.device.type, "fused")
        fn(*args)
        if capture.active() is not None:
            _record((fn, args), None, (), [dst], "fused")
        return
    if eager.assign(dst, e, saver):
        return
    maybe_elementwise = e.kind != COMPLEX
    if maybe_elementwise and type(e) is not Scalar and type(dst) is Tensor \
            and not counters.DEBUG:
        try:  # the common case: purely elementwise
            return _run_statement(dst, e, saver, prepare)
        except NotElementwise:
            maybe_elementwise = False  # a dot or reduction inside: resolved below
    _check(dst, e, saver)
    planned = None
    if maybe_elementwise:
        try:
            planned = make_plan(e, dst.ndim)
        except NotElementwise:
            pass
    elif e.kind == COMPLEX and e.shape != dst.shape:
        e = evaluate(e)  # a dot or reduction broadcasting into dst: compute, then copy
    if planned is None:
        e = resolve_boundaries(e)
    dst.storage.before_write()
    if counters.DEBUG:  # MINITORCH_DEBUG: print each kernel as it runs (explain.py)
        counters.debug_run(_dispatch, dst, e, saver)
    else:
        _dispatch(dst, e, saver, planned, prepare)


#: statement key (``plan.statement_key``) -> the backend's launch for it (see ``assign``).
_STATEMENT_LAUNCHES = memo_table("engine.statement_launches", 4096, stale_on_invalidate=True)


def _run_statement(dst, e: Exp, saver: str, prepare: bool) -> None:
    """An elementwise statement through the launch kept for its key (made the first time);
    raises NotElementwise, having run nothing, if the tree holds a dot or reduction.

    Only a new key is checked: the key holds everything the checks read (dst's
    layout, dtype and device, the saver, and the tree's ops, leaf dtypes and
    layouts, scalar types and device), so a kept launch's statement passed them.
    A scalar root is not taken here: its check reads the scalar's value.
    """
    key, leaves, scalars = statement_key(dst, e, saver)
    launch = _STATEMENT_LAUNCHES.get(key)
    if launch is None:
        _check(dst, e, saver)
        launch = _STATEMENT_LAUNCHES.keep(key, device_backend(dst.device).launch(
            statement_plan(key), dst, leaves, saver))
    dst.storage.before_write()
    operands = [dst, *leaves]
    call = launch.run(operands, scalars)
    if capture.active() is not None:
        _record(call, launch.run, (operands, scalars), [dst], "fused")
    if prepare and call is not None and e.kind == MAPPER:
        e.prepared = (dst, saver, _expr.EPOCH, *call)


def _record(call, again, args: tuple, dsts, kind: str) -> None:
    """Add a kernel that just ran to the capture in progress, as the one writing ``dsts``.

    ``call``: what the backend returned, ``(function, args)`` repeating the kernel
    exactly, recorded with a tally of ``kind`` for the kernel counter; None: the
    backend could not bind one (a private copy, an evaluator that plans each
    time), so ``again(*args)`` -- the backend method or launch that ran -- is
    recorded instead, and counts its kernel itself on each replay.
    """
    storages = [d.storage for d in dsts]
    if call is None:
        capture.active().add(again, args, *storages)
    else:
        capture.active().add(*call, *storages, tally=(dsts[0].device.type, kind))


def assign_all(statements) -> None:
    """Run several assignments as if one after another -- in one fused pass when they can.

    ``statements``: ``(dst, e)`` or ``(dst, e, saver)`` tuples, as in ``assign``.
    They share one loop when every ``e`` is elementwise, every dst has the same
    shape and device, and no statement reads a dst at another element than the
    one being written; each element then runs the statements in order, so a
    statement reading an earlier one's dst sees what it stored (Adam's ``m``,
    ``v`` and ``w`` updates are one kernel). Otherwise, or on a device without
    a grouped kernel, they run one at a time. The result is the same either way.
    """
    items = [(dst, as_exp(e), rest[0] if rest else "=") for dst, e, *rest in statements]
    if len(items) > 1 and all(
            type(dst) is Tensor and type(e) is not Scalar and e.kind != COMPLEX
            for dst, e, _ in items):
        try:
            if _run_group(items):
                return
        except NotElementwise:  # a dot or reduction: its own kernel, one at a time
            pass
    for dst, e, saver in items:  # every statement checked before any runs
        _check(dst, e, saver)
    for dst, e, saver in items:
        assign(dst, e, saver)


#: group key (``_run_group``) -> the backend's launch for the statements, or None when
#: they cannot share one loop.
_GROUP_LAUNCHES = memo_table("engine.group_launches", 4096, stale_on_invalidate=True)


def _run_group(items) -> bool:
    """Statements through the one launch kept for their group key (see ``assign_all``);
    False, having run nothing, when they cannot share one loop.

    The key is each statement's key plus which storages the statements share:
    for each dst, the first dst on its storage, and for each leaf, the dst it
    shares a storage with (-1: none). As in ``_run_statement`` only a new key
    is checked. Every dst counts its write first, so the walks see the lazy
    values that this realizes.
    """
    dst_of: dict[int, int] = {}
    shared = []
    for j, (dst, _, _) in enumerate(items):
        dst.storage.before_write()
        shared.append(dst_of.setdefault(id(dst.storage), j))
    keys, leaves, scalars = [], [], []
    for dst, e, saver in items:
        key, own_leaves, values = statement_key(dst, e, saver)
        keys.append(key)
        leaves += own_leaves
        scalars += values
    key = (*keys, tuple(shared), tuple([dst_of.get(id(t.storage), -1) for t in leaves]))
    dsts = [dst for dst, _, _ in items]
    launch = _GROUP_LAUNCHES.get(key, False)
    if launch is False:
        for dst, e, saver in items:
            _check(dst, e, saver)
        launch = _GROUP_LAUNCHES.keep(key, _new_group_launch(items, dsts, keys, leaves))
    if launch is None:
        return False
    operands = [*dsts, *leaves]
    if counters.DEBUG:  # the kernel that runs without debug, printed (explain.debug_group)
        calls = []
        counters.debug_group(lambda: calls.append(launch.run(operands, scalars)), items)
        call = calls[0]
    else:
        call = launch.run(operands, scalars)
    if capture.active() is not None:
        _record(call, launch.run, (operands, scalars), dsts, "fused")
    return True


def _new_group_launch(items, dsts, keys, leaves):
    if any(d.shape != dsts[0].shape or d.device != dsts[0].device for d in dsts):
        return None
    return device_backend(dsts[0].device).group_launch(
        dsts, [statement_plan(k) for k in keys], leaves, [s for _, _, s in items])


def _check(dst, e: Exp, saver: str) -> None:
    if not _fast_checks_pass(dst, e, saver):
        _check_assign(dst, e, saver)


def _fast_checks_pass(dst, e: Exp, saver: str) -> bool:
    """The checks of ``_check_assign`` for the everyday case, in a few comparisons."""
    return (type(dst) is Tensor and e.shape == dst.shape and e.dtype == dst.dtype
            and e.device == dst.device and saver in SAVERS and 0 not in dst.layout.strides
            and (dst.dtype.kind == "f" or saver in ("=", "+=", "*=")))  # bool -=, int /=


def _dispatch(dst, e: Exp, saver: str, planned=None, prepare: bool = False) -> None:
    """Run the one kernel that writes ``e`` (its boundaries resolved) into ``dst``."""
    backend = device_backend(dst.device)
    if e.kind != COMPLEX:
        plan, leaves, scalars = planned or make_plan(e, dst.ndim)
        args, method, kind = (plan, dst, leaves, scalars, saver), backend.elementwise, "fused"
    elif type(e) is Dot:
        args, method, kind = (dst, e.a, e.b, saver), backend.dot, "blas"
    elif type(e) is Reduce:  # the backend reads the input's values from its Plan alone
        args, method, kind = (dst, e, saver, make_plan(e.x, e.x.ndim)), backend.reduce, "reduce"
    else:  # pragma: no cover - resolve_boundaries leaves no other complex root
        raise TypeError(f"cannot evaluate {type(e).__name__}")
    call = method(*args)
    if capture.active() is not None:
        _record(call, method, args, [dst], kind)
    if prepare and call is not None and e.kind == MAPPER and type(e) is not Scalar:
        e.prepared = (dst, saver, _expr.EPOCH, *call)


def evaluate(e: Exp):
    """Materialize ``e`` into a new contiguous tensor."""
    if e.kind == RVALUE:
        return e
    if type(e) is Scalar:
        raise TypeError("a bare scalar has no shape to evaluate into; use tensor(value)")
    if e.realized is not None:
        return e.realized
    view = evaluated(e, _REALIZING)  # a contiguous view of a computed base: no copy pass
    if view is not None:
        return view
    dst = creation.new_empty(e.shape, e.dtype, e.device or CPU)  # numbers alone: on the CPU
    assign(dst, e, prepare=False)
    return dst


def realize(e: Exp):
    """``e`` computed once, the tensor remembered on the node (``e.realized``): by the
    engine's policy, at once with NumPy where its work is below the fusion threshold
    on the CPU (``eager.walk``), else fused into a new tensor."""
    if e.kind == RVALUE:
        return e
    if e.realized is None:
        if eager.computes_now(eager.work(e)):
            values = eager.walk(e, _fused)
            if e.realized is None:  # else the walk left e itself to ``_fused``
                _expr.set_realized(e, eager.wrap(values))
        else:
            _fused(e)
    return e.realized


def _fused(e: Exp):
    """``realize`` past the policy: ``e`` evaluated by a kernel, remembered."""
    if e.realized is None:
        _expr.set_realized(e, evaluate(e))
    return e.realized


def evaluate_copy(t):
    """A contiguous copy of the tensor ``t`` (one elementwise pass)."""
    dst = creation.new_empty(t.shape, t.dtype, t.device)
    _dispatch(dst, t, "=")
    return dst


def resolve_boundaries(e: Exp) -> Exp:
    """Compute the complex nodes below the root of ``e``, returning what the root's own
    kernel computes (``lower.root_body``): a ``Dot`` over tensors, a ``Reduce`` over its
    fused input, an elementwise body over tensors (a ``ViewExp``'s base computed, then
    viewed)."""
    if e.kind != RVALUE and type(e) is not Scalar and e.realized is not None:
        return e.realized
    return root_body(e, _REALIZING)


class _Realizing(Visitor):
    """The engine's visitor of the lowering walk: a boundary is computed by its own
    kernel and remembered (inside a statement the engine runs kernels, whatever the
    size: what ``explain`` lists)."""

    def temporary(self, e: Exp, cut: str) -> Exp:
        return _fused(e)


_REALIZING = _Realizing()


def _check_assign(dst, e: Exp, saver: str) -> None:
    if saver not in SAVERS:
        raise ValueError(f"unknown saver {saver!r}: expected one of {SAVERS}")
    if getattr(dst, "kind", None) != RVALUE:
        raise TypeError(f"can only assign into a Tensor, got {type(dst).__name__}")
    if L.has_overlap_with_self(dst.layout):
        raise ValueError(
            f"cannot write into an expanded view (shape {dst.shape}, strides {dst.strides}): "
            "several elements share one memory location; write into the original tensor "
            "or make a copy with .contiguous()")
    if e.shape != dst.shape:
        try:
            ok = L.broadcast_shapes(e.shape, dst.shape) == dst.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"assign ({saver}): expression of shape {e.shape} cannot be "
                             f"written into a tensor of shape {dst.shape}")
    if e.device is not None and e.device != dst.device:
        raise ValueError(f"assign ({saver}): expression on {e.device} cannot be written into "
                         f"a tensor on {dst.device}; move it with .to('{dst.device}')")
    if type(e) is not Scalar and not np.can_cast(e.dtype, dst.dtype, "same_kind"):
        raise TypeError(f"assign ({saver}): cannot write a {e.dtype.name} expression into a "
                        f"{dst.dtype.name} tensor; convert explicitly with .astype("
                        f"'{dst.dtype.name}') ({operand_str(e)})")
    if type(e) is Scalar and saver != "=":
        # NumPy's in-place rule with a weak scalar: ``int32 += 1.5`` would compute
        # a float64 and cannot store it back (plain ``=`` casts, as NumPy's setitem).
        found = np.result_type(dst.dtype, e.value)
        if not np.can_cast(found, dst.dtype, "same_kind"):
            raise TypeError(f"assign ({saver}): {dst.dtype.name} {saver} {e.value!r} gives "
                            f"{found.name}, which cannot be stored back into the "
                            f"{dst.dtype.name} tensor; use a {found.name} tensor")
    if saver == "/=" and dst.dtype.kind in "bi":
        raise TypeError(f"assign (/=): true division into an {dst.dtype.name} tensor would "
                        "need a cast; use a float tensor")
    if saver == "-=" and dst.dtype.kind == "b":
        raise TypeError("assign (-=): cannot subtract from a bool tensor (NumPy refuses "
                        "boolean subtract); use a numeric tensor")


# What the core types and the evaluator of small work reach the engine by: they are
# what it is built on, so they cannot import it.
_expr.ENGINE.evaluate, _expr.ENGINE.assign = evaluate, assign
_expr.ENGINE.evaluate_copy, _expr.ENGINE.realize = evaluate_copy, realize

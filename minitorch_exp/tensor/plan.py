"""MakePlan: lower an elementwise expression tree into a flat, cached Plan.

A Plan is a tiny straight-line program in SSA form. Slots ``0..L-1`` are the
leaf tensors, ``L..L+S-1`` the scalars, and each instruction appends one slot.
For ``w[...] = -0.1 * (g + 0.01 * w)`` (in0 = g, in1 = w, s0 = -0.1, s1 = 0.01)::

    t0 = mul(s1, in1) -> float32
    t1 = add(in0, t0) -> float32
    t2 = mul(s0, t1) -> float32
    result = t2

The cache key is the tree in post-order (see ``_walk``); ``_build`` reads the
key back into the Plan, so the key provably holds everything the Plan needs.

float16 is stored, never computed (``dtypes.arithmetic_dtype``): a step whose
dtype promotes to float16 is held in float32, and only a cast to float16 or the
store into dst rounds (``x * 0.1 + y``, all float16, rounds once)::

    t0 = mul(in0, s0) -> float32      # in0, in1: float16; the Plan's dtype: float16
    t1 = add(t0, in1) -> float32
    result = t1

A weak scalar keeps float32's precision there (Adam's ``eps`` of 1e-8 would be 0
in float16), except in a comparison: ``x == 0.1`` compares with float16's 0.1, as
NumPy and PyTorch do (a ``cast(s0) -> float16`` step first).

Plans are cached by *structure* -- op names, dtypes, scalar kinds, the number
of dims and which leaf is read where -- never by data, sizes or scalar values,
so a training loop lowers each distinct statement once and then only looks
the Plan up. Backends (NumPy blocks, numba, CUDA) hang their compiled form on
``plan.compiled``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import dtypes
from . import expr as _expr
from .caches import memo_table
from .expr import RVALUE, Cast, Exp, Map, Scalar
from .ops import OPS, on_unregister
from .tokens import NOT_DST, LeafToken, TreeToken, leaf_tokens


@dataclass(frozen=True)
class Instr:
    op: str                    # an op name from ops.OPS, or "cast"
    args: tuple[int, ...]      # input slots
    dtype: np.dtype            # result dtype, as held (float16 only from a cast)
    compute: np.dtype          # dtype the operands are converted to


@dataclass(eq=False)
class Plan:
    key: tuple
    n_leaves: int
    scalar_types: tuple[type, ...]
    leaf_dtypes: tuple[np.dtype, ...]
    instrs: tuple[Instr, ...]
    out: int                   # the slot holding the result
    dtype: np.dtype
    compiled: dict = field(default_factory=dict)

    @property
    def n_inputs(self) -> int:
        return self.n_leaves + len(self.scalar_types)

    def describe(self) -> str:
        names = [f"in{i}" for i in range(self.n_leaves)]
        names += [f"s{i}" for i in range(len(self.scalar_types))]
        lines = []
        for k, ins in enumerate(self.instrs):
            name = f"t{k}"
            names.append(name)
            args = ", ".join(names[a] for a in ins.args)
            lines.append(f"  {name} = {ins.op}({args}) -> {ins.dtype.name}")
        lines.append(f"  result = {names[self.out]}")
        return "\n".join(lines)


_PLANS = memo_table("plan.plans", 4096)  # plan key -> Plan (kernels hang on it)


class NotElementwise(TypeError):
    """Raised by MakePlan on a dot, reduction or view boundary inside the tree."""

#: Stand-ins for weak scalars when deriving dtypes from a key (the value never matters).
_WEAK = {float: 1.0, int: 1, bool: True}


def _walk(operands, leaves: list, scalars: list, key: list, memo: dict,
          storage=None) -> None:
    """Append the structure of ``operands`` to ``key`` in post-order, collecting
    their leaves and scalars.

    One token per node, each kind of token a different Python type: a tensor
    is ``(dtype char, ndim)`` (its slot is its order among the leaves), a weak
    scalar its ``type``, a map its op name (a ``str``), a cast its target
    ``np.dtype``, and a subtree seen before the ``int`` index of its first
    token. The key is all a Plan needs: ``_build`` reads it back.

    Leaves and scalars are handled in the loop, without a call each, and a
    tensor used twice is two leaves (the kernel loads it twice), as a map
    gathers them when it is built (``expr.Map``).

    Given dst's ``storage`` (a statement key, see ``statement_key``) a tensor's
    token is its ``LeafToken`` instead: its dtype, its layout, and whether it
    is that storage.
    """
    for e in operands:
        t = type(e)
        if t is Scalar:
            scalars.append(e.value)
            key.append(type(e.value))
            continue
        kind = e.kind
        if kind != RVALUE and e.realized is not None:
            e, kind = e.realized, RVALUE  # computed before: read the remembered tensor
        if kind == RVALUE:
            if storage is None:
                key.append((e.dtype.char, len(e.shape)))
            else:
                key.append((e._leaf_tokens or leaf_tokens(e))[e.storage is storage])
            leaves.append(e)
            continue
        seen = memo.get(id(e))
        if seen is not None:
            key.append(seen)
            continue
        if t is Map:
            _walk(e.args, leaves, scalars, key, memo, storage)
            key.append(e.op.name)
        elif t is Cast:
            _walk((e.x,), leaves, scalars, key, memo, storage)
            key.append(e.dtype)
        else:
            raise NotElementwise(f"MakePlan: {t.__name__} is not elementwise; "
                                 "the engine evaluates it before planning")
        memo[id(e)] = len(key) - 1


def make_plan(e: Exp, ndim: int) -> tuple[Plan, list, list]:
    """Lower ``e`` (maps, casts, scalars and tensors only) for an output of ``ndim`` dims.

    Returns ``(plan, leaves, scalar_values)``. Only the cheap structural walk
    runs every time; the Plan is built once per distinct key.
    """
    leaves: list = []
    scalars: list = []
    key: list = [ndim]
    _walk_root(e, leaves, scalars, key, None)
    return _plan(tuple(key)), leaves, scalars


def _walk_root(e: Exp, leaves: list, scalars: list, key: list, storage) -> None:
    """``_walk`` from the root, which no other node can share: no memo entry for it."""
    if type(e) is Map and e.realized is None:
        _walk(e.args, leaves, scalars, key, {}, storage)
        key.append(e.op.name)
    else:
        _walk((e,), leaves, scalars, key, {}, storage)


def _plan(key: tuple) -> Plan:
    plan = _PLANS.get(key)
    return _PLANS.keep(key, _build(key)) if plan is None else plan


def statement_key(dst, e: Exp, saver: str) -> tuple[tuple, Sequence, Sequence]:
    """``(key, leaf tensors, scalar_values)`` of the assignment ``dst (saver)= e``.

    The key holds dst's leaf token, device and saver, the tree's structure and
    each leaf's ``LeafToken``: everything that decides the kernel call, short
    of the arrays and the scalars' values. A training loop builds each
    statement afresh but with the same key, so the engine keeps the call it
    worked out per key and reaches it from this key alone.

    A map gathered its leaves and scalars when it was built (``expr.Map``); its
    key is then its ``TreeToken`` and one token per leaf, with no walk. A tree
    that could not gather them (a node in it realized since, a cast, a very
    big tree) is walked: its key spells the structure out token by token.
    """
    storage = dst.storage
    dst_token = (dst._leaf_tokens or leaf_tokens(dst))[NOT_DST]
    if type(e) is Map and e.leaves is not None and e.epoch == _expr.EPOCH \
            and e.realized is None:
        key = (saver, dst_token, dst.device, e.token)
        for t in e.leaves:  # a loop, not a comprehension: no frame for two or three leaves
            key += ((t._leaf_tokens or leaf_tokens(t))[t.storage is storage],)
        return key, e.leaves, e.scalars
    leaves: list = []
    scalars: list = []
    key: list = [saver, dst_token, dst.device, e.device]
    _walk_root(e, leaves, scalars, key, storage)
    return tuple(key), leaves, scalars


_STATEMENT_HEAD = 4  # how many of a statement key's items come before its tokens


def statement_plan(key: tuple) -> Plan:
    """The Plan of a ``statement_key``: its tokens without layouts."""
    ndim = key[1].ndim
    if type(key[3]) is TreeToken:
        return _plan((ndim, *key[3].plan_tokens))
    back = _STATEMENT_HEAD - 1  # a repeat token indexes the key; the plan key has one head item
    return _plan((ndim, *[
        (tok.char, tok.ndim) if type(tok) is LeafToken else
        tok - back if type(tok) is int else tok for tok in key[_STATEMENT_HEAD:]]))


def _build(key: tuple) -> Plan:
    """Read a key back into a Plan (see ``_walk`` for the token format)."""
    tokens = key[1:]  # key[0] is the output's ndim
    leaf_dtypes = [np.dtype(tok[0]) for tok in tokens if type(tok) is tuple]
    scalar_types = tuple(tok for tok in tokens if type(tok) is type)
    n_leaves, n_inputs = len(leaf_dtypes), len(leaf_dtypes) + len(scalar_types)
    instrs: list[Instr] = []
    promoted: list[np.dtype] = []  # each step's dtype by promotion (its Instr's: as held)
    slots: list[int] = [-1]        # key index -> slot (key[0] is no node)
    stack: list[int] = []
    leaves_seen = scalars_seen = 0

    def kind(slot):  # what the promotion rules see: a dtype, or a weak scalar
        if slot < n_leaves:
            return leaf_dtypes[slot]
        if slot < n_inputs:
            return _WEAK[scalar_types[slot - n_leaves]]
        return promoted[slot - n_inputs]

    def append(ins: Instr, dtype: np.dtype) -> int:
        instrs.append(ins)
        promoted.append(dtype)
        return n_inputs + len(instrs) - 1

    for tok in tokens:
        if type(tok) is int:
            slot = slots[tok]
        elif type(tok) is tuple:
            slot, leaves_seen = leaves_seen, leaves_seen + 1
        elif type(tok) is type:
            slot, scalars_seen = n_leaves + scalars_seen, scalars_seen + 1
        else:
            slot = _instr(tok, stack, kind, append, range(n_leaves, n_inputs))
        slots.append(slot)
        stack.append(slot)
    out = stack[-1]
    out_kind = kind(out)
    dtype = out_kind if isinstance(out_kind, np.dtype) else np.result_type(out_kind)
    return Plan(key, n_leaves, scalar_types, tuple(leaf_dtypes), tuple(instrs), out,
                np.dtype(dtype))


def _instr(tok, stack: list, kind, append, scalar_slots: range) -> int:
    """Append the instruction of a map token (an op name) or a cast token (a dtype), its
    operands popped from ``stack``; return its slot. A step promoted to float16 is held
    and computed in float32; a comparison's weak scalars are rounded to float16 first
    (module docstring)."""
    held = dtypes.arithmetic_dtype
    if type(tok) is not str:
        x = stack.pop()
        return append(Instr("cast", (x,), tok, held(np.result_type(kind(x)))), tok)
    op = OPS[tok]
    args = stack[-op.arity:]
    del stack[-op.arity:]
    kinds = [kind(a) for a in args]
    result, compute = op.result_dtype(kinds), op.compute_dtype(kinds)
    if compute == dtypes.float16 and result == dtypes.bool_:
        args = [append(Instr("cast", (a,), compute, np.result_type(kinds[i])), compute)
                if a in scalar_slots else a
                for i, a in enumerate(args)]
    return append(Instr(op.name, tuple(args), held(result), held(compute)), result)


def plan_cache_size() -> int:
    return len(_PLANS)


def forget_op(name: str) -> None:
    """Drop the cached plans that use op ``name``, and the kernels hung on them: the user
    op was unregistered (``ops.unregister_op`` calls this hook, then invalidates)."""
    for key, plan in list(_PLANS.items()):
        if any(ins.op == name for ins in plan.instrs):
            del _PLANS[key]


on_unregister(forget_op)

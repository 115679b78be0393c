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

Plans are cached by *structure* -- op names, dtypes, scalar kinds, the number
of dims and which leaf is read where -- never by data, sizes or scalar values,
so a training loop lowers each distinct statement once and then only looks
the Plan up. Backends (NumPy blocks, numba, CUDA) hang their compiled form on
``plan.compiled``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .expr import RVALUE, Cast, Exp, Map, Scalar, new_epoch
from .ops import OPS


@dataclass(frozen=True)
class Instr:
    op: str                    # an op name from ops.OPS, or "cast"
    args: tuple[int, ...]      # input slots
    dtype: np.dtype            # result dtype
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


_PLANS: dict[tuple, Plan] = {}


class NotElementwise(TypeError):
    """Raised by MakePlan on a dot, reduction or view boundary inside the tree."""

#: Stand-ins for weak scalars when deriving dtypes from a key (the value never matters).
_WEAK = {float: 1.0, int: 1, bool: True}


def _walk(e: Exp, leaves: list, scalars: list, key: list, memo: dict) -> None:
    """Append ``e``'s structure to ``key`` in post-order, collecting leaves and scalars.

    Each node appends one token: ``("t", leaf, dtype, ndim)`` for a tensor,
    ``("s", type)`` for a scalar, ``(op, n_args)`` for a map, ``("cast", dtype)``
    for a cast, or an int -- the index of an earlier token -- when a tensor or
    subtree is used twice. The key is all a Plan needs: ``_build`` reads it back.
    """
    t = type(e)
    if t is Scalar:
        scalars.append(e.value)
        key.append(("s", type(e.value)))
        return
    if e.kind != RVALUE and e.realized is not None:
        e = e.realized  # computed before: read the remembered tensor
    seen = memo.get(id(e))
    if seen is not None:
        key.append(seen)
        return
    if e.kind == RVALUE:
        key.append(("t", len(leaves), e.dtype.char, len(e.shape)))
        leaves.append(e)
    elif t is Map:
        for arg in e.args:
            _walk(arg, leaves, scalars, key, memo)
        key.append((e.op.name, len(e.args)))
    elif t is Cast:
        _walk(e.x, leaves, scalars, key, memo)
        key.append(("cast", e.dtype.char))
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
    key: list = []
    _walk(e, leaves, scalars, key, {})
    key_t = (ndim, *key)
    plan = _PLANS.get(key_t)
    if plan is None:
        plan = _PLANS[key_t] = _build(key_t)
    return plan, leaves, scalars


def _build(key: tuple) -> Plan:
    """Read a key back into a Plan (see ``_walk`` for the token format)."""
    tokens = key[1:]
    leaf_dtypes = {tok[1]: np.dtype(tok[2]) for tok in tokens
                   if type(tok) is tuple and tok[0] == "t"}
    scalar_types = tuple(tok[1] for tok in tokens if type(tok) is tuple and tok[0] == "s")
    n_leaves, n_inputs = len(leaf_dtypes), len(leaf_dtypes) + len(scalar_types)
    instrs: list[Instr] = []
    slots: list[int] = []          # token index -> slot
    stack: list[int] = []
    n_scalars = 0

    def kind(slot):  # what the promotion rules see: a dtype, or a weak scalar
        if slot < n_leaves:
            return leaf_dtypes[slot]
        if slot < n_inputs:
            return _WEAK[scalar_types[slot - n_leaves]]
        return instrs[slot - n_inputs].dtype

    for tok in tokens:
        if type(tok) is int:
            slot = slots[tok]
        elif tok[0] == "t":
            slot = tok[1]
        elif tok[0] == "s":
            slot = n_leaves + n_scalars
            n_scalars += 1
        else:
            n_args = 1 if tok[0] == "cast" else tok[1]
            args = tuple(stack[-n_args:])
            del stack[-n_args:]
            if tok[0] == "cast":
                instrs.append(Instr("cast", args, np.dtype(tok[1]), np.dtype(kind(args[0]))))
            else:
                op = OPS[tok[0]]
                kinds = [kind(a) for a in args]
                instrs.append(Instr(op.name, args, op.result_dtype(kinds), op.compute_dtype(kinds)))
            slot = n_inputs + len(instrs) - 1
        slots.append(slot)
        stack.append(slot)
    out = stack[-1]
    out_kind = kind(out)
    dtype = out_kind if isinstance(out_kind, np.dtype) else np.result_type(out_kind)
    return Plan(key, n_leaves, scalar_types, tuple(leaf_dtypes[i] for i in range(n_leaves)),
                tuple(instrs), out, np.dtype(dtype))


def plan_cache_size() -> int:
    return len(_PLANS)


def forget_op(name: str) -> None:
    """Drop the cached plans that use op ``name`` (called when a user op is unregistered)."""
    new_epoch()  # prepared assignments hold kernels that call the old function
    for key, plan in list(_PLANS.items()):
        if any(ins.op == name for ins in plan.instrs):
            del _PLANS[key]

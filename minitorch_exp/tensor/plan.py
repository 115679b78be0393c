"""MakePlan: lower an elementwise expression tree into a flat, cached Plan.

A Plan is a tiny straight-line program in SSA form. Slots ``0..L-1`` are the
leaf tensors, ``L..L+S-1`` the scalars, and each instruction appends one slot::

    w[...] = -eta * (g + lam * w)       leaves: g, w    scalars: -eta?, lam
      s4 = mul(lam, w)                    (slots: 0=g 1=w 2=eta 3=lam)
      s5 = add(g, s4)
      s6 = neg(eta) ...

Plans are cached by *structure* -- op names, dtypes, scalar kinds, the number
of dims and which leaf is read where -- never by data, sizes or scalar values,
so a training loop lowers each distinct statement once and then only looks
the Plan up. Backends (NumPy blocks, numba, CUDA) hang their compiled form on
``plan.compiled``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .expr import RVALUE, Cast, Exp, Map, Scalar


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

    def slot_dtype(self, slot: int, scalar_dtypes=None) -> np.dtype:
        if slot < self.n_leaves:
            return self.leaf_dtypes[slot]
        if slot < self.n_inputs:
            return (scalar_dtypes or self.scalar_compute_dtypes())[slot - self.n_leaves]
        return self.instrs[slot - self.n_inputs].dtype

    def scalar_compute_dtypes(self) -> tuple[np.dtype, ...]:
        """Each scalar takes the compute dtype of the first instruction that reads it."""
        found = {}
        for ins in self.instrs:
            for a in ins.args:
                if self.n_leaves <= a < self.n_inputs:
                    found.setdefault(a, ins.compute)
        return tuple(found.get(self.n_leaves + i, np.dtype(t if t is not bool else np.bool_))
                     for i, t in enumerate(self.scalar_types))

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


class _Lowering:
    """One walk over the tree: collects leaves and scalars, emits instructions and the key."""

    def __init__(self):
        self.leaves: list = []
        self.leaf_ids: dict[int, int] = {}
        self.scalars: list = []
        self.instrs: list[Instr] = []
        self.key: list = []
        self.memo: dict[int, int] = {}

    def visit(self, e: Exp) -> int:
        slot = self.memo.get(id(e))
        if slot is not None:
            self.key.append(("again", slot))
            return slot
        if e.kind == RVALUE:
            slot = self._leaf(e)
        elif type(e) is Scalar:
            self.scalars.append(e.value)
            slot = -len(self.scalars)  # scalar slots are renumbered in finish()
            self.key.append(("s", type(e.value)))
        elif type(e) is Map:
            args = tuple(self.visit(a) for a in e.args)
            operands = [a.value if type(a) is Scalar else a.dtype for a in e.args]
            slot = self._emit(e.op.name, args, e.dtype, e.op.compute_dtype(operands))
        elif type(e) is Cast:
            slot = self._emit("cast", (self.visit(e.x),), e.dtype, e.x.dtype)
        else:
            raise TypeError(f"MakePlan: {type(e).__name__} is not elementwise; "
                            "the engine evaluates it before planning")
        self.memo[id(e)] = slot
        return slot

    def _leaf(self, t) -> int:
        index = self.leaf_ids.get(id(t))
        if index is None:
            index = self.leaf_ids[id(t)] = len(self.leaves)
            self.leaves.append(t)
        self.key.append(("t", index, t.dtype.char, t.ndim))
        return index

    def _emit(self, op, args, dtype, compute) -> int:
        self.instrs.append(Instr(op, args, dtype, compute))
        self.key.append((op, args, dtype.char))
        return 1_000_000 + len(self.instrs) - 1


def _renumber(slot: int, n_leaves: int, n_scalars: int) -> int:
    if slot < 0:
        return n_leaves + (-slot - 1)
    if slot >= 1_000_000:
        return n_leaves + n_scalars + slot - 1_000_000
    return slot


_PLANS: dict[tuple, Plan] = {}


def make_plan(e: Exp, ndim: int) -> tuple[Plan, list, list]:
    """Lower ``e`` (maps, casts, scalars and tensors only) for an output of ``ndim`` dims.

    Returns ``(plan, leaves, scalar_values)``; the plan comes from the cache when
    the same structure was seen before.
    """
    low = _Lowering()
    out = low.visit(e)
    key = (ndim, tuple(low.key))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _build(key, low, out)
        _PLANS[key] = plan
    return plan, low.leaves, low.scalars


def _build(key, low: _Lowering, out: int) -> Plan:
    nl, ns = len(low.leaves), len(low.scalars)
    instrs = tuple(Instr(i.op, tuple(_renumber(a, nl, ns) for a in i.args), i.dtype, i.compute)
                   for i in low.instrs)
    out = _renumber(out, nl, ns)
    dtypes = tuple(t.dtype for t in low.leaves)
    result_dtype = instrs[-1].dtype if out >= nl + ns else (
        dtypes[out] if out < nl else np.result_type(low.scalars[out - nl]))
    return Plan(key, nl, tuple(type(v) for v in low.scalars), dtypes, instrs, out,
                np.dtype(result_dtype))


def plan_cache_size() -> int:
    return len(_PLANS)


def forget_op(name: str) -> None:
    """Drop the cached plans that use op ``name`` (called when a user op is unregistered)."""
    for key, plan in list(_PLANS.items()):
        if any(ins.op == name for ins in plan.instrs):
            del _PLANS[key]

"""Lowering: the one walk from an expression tree to the kernels that compute it.

Where does fusion stop? Every ``Dot``, every ``Reduce`` whose result feeds more
elementwise work, and every view that could not be pushed to the leaves
(``ViewExp``) must be computed by a kernel of its own before its consumer
runs; maps, casts and scalars fuse into the kernel that needs them. That rule
is written once, here, as a walk over the tree (``root_body`` /
``fused_body``). What happens at each boundary is up to a ``Visitor``:

* the engine's (``Realizing``) computes the boundary node into a temporary and
  remembers it on the node (``engine.realize``), then fuses the rest;
* ``Splitter`` computes nothing: it records each boundary as a ``Kernel`` over a
  data-less placeholder, which ``explain`` and ``kernels.py`` describe;

So what ``explain`` shows is, by construction, what the engine runs: both are
the same walk. Below the boundaries, a purely elementwise body goes to
``plan.make_plan`` / ``plan.statement_key``, whose key is the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .expr import COMPLEX, RVALUE, Dot, Exp, Reduce, Scalar, ViewExp, describe
from .plan import make_plan
from .tensor import Tensor


class Visitor:
    """What the walk does at a boundary, at a node computed before, and at a view."""

    def reused(self, e: Exp) -> Exp:
        """``e`` was computed before: what its consumers read (its tensor)."""
        return e.realized

    def member(self, e: Exp) -> None:
        """``e`` (a map, cast or view) is computed inside the current kernel."""

    def temporary(self, e: Exp, cut: str) -> Exp:
        """A boundary node: what its consumer reads instead (``cut`` says why)."""
        raise NotImplementedError

    def view(self, e: ViewExp) -> Exp:
        """A view that could not be pushed down: its base is a boundary, then viewed."""
        return e.fn(self.temporary(e.base, e.reason))


def root_body(e: Exp, visitor: Visitor) -> Exp:
    """What the kernel writing ``e`` computes, every boundary below it resolved by
    ``visitor``: a Dot over its two operands in memory, a Reduce over its fused
    input, or a fused elementwise body."""
    t = type(e)
    if t is Dot:
        return e.rebuild((operand(e.a, visitor), operand(e.b, visitor)))
    if t is Reduce:
        x = fused_body(e.x, visitor, e)
        return e.rebuild((x,)) if x is not e.x else e
    return fused_body(e, visitor, None)


def fused_body(e: Exp, visitor: Visitor, consumer) -> Exp:
    """``e`` with every complex node replaced by what ``visitor`` gives for it.

    By kind, not by class: a mapper (map, cast) fuses and its children are
    walked; a complex node is a boundary, except a view, whose *base* is.
    """
    if e.kind == RVALUE or type(e) is Scalar:
        return e
    if e.realized is not None:
        return visitor.reused(e)
    if e.kind == COMPLEX:
        if type(e) is ViewExp:
            visitor.member(e)
            return visitor.view(e)
        return visitor.temporary(e, cut_reason(e, consumer))
    visitor.member(e)
    children = e.children()
    walked = tuple([fused_body(c, visitor, e) for c in children])
    if any(x is not y for x, y in zip(walked, children)):
        return e.rebuild(walked)
    return e


def evaluated(e: Exp, visitor: Visitor) -> Exp | None:
    """``e`` evaluated into a new tensor without a kernel of its own, or None.

    Only a view that could not be pushed down has one: its base is a boundary
    (``visitor.temporary``), then viewed, and when that view is contiguous it
    already is the value -- no copy pass (``engine.evaluate`` and ``Splitter`` both
    ask here; tests/tensor/test_lowering.py pins it). Otherwise a kernel writes
    ``e`` into the new tensor.
    """
    if type(e) is not ViewExp:
        return None
    view = visitor.view(e)
    return view if view.is_contiguous() else None


def operand(x: Exp, visitor: Visitor) -> Exp:
    """A matmul operand: BLAS reads memory, so anything lazy is computed first."""
    if x.kind == RVALUE:
        return x
    if x.realized is not None:
        return x.realized
    return visitor.temporary(x, f"BLAS reads its operands from memory, so this {describe(x)} "
                                "operand is computed into a temporary first")


def cut_reason(e: Exp, consumer) -> str:
    """Why ``e`` is a kernel of its own rather than fused into ``consumer``."""
    user = describe(consumer) if consumer is not None else "the next step"
    if type(e) is Dot:
        return f"matmul runs as its own BLAS call; `{user}` reads its result from a temporary"
    return (f"{describe(e)} must see all of its input before `{user}` can use any result, "
            "so it finishes into a temporary first")


# ---- the plan-only visitor: kernels described, nothing computed ----------------------


@dataclass(eq=False)
class Kernel:
    """One pass the engine will run: ``body`` is what it computes, inputs as leaves."""

    number: int
    kind: str                  # fused | reduce | blas
    node: Exp                  # the original node whose value this kernel produces
    body: Exp                  # ``node`` with inputs from other kernels replaced by temporaries
    members: list              # original nodes computed inside this kernel
    cut: str = ""              # why it is a kernel of its own ("" for the last one)
    loop_shape: tuple = ()
    _plan: tuple | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"K{self.number}"

    def planned(self):
        """``(plan, leaves, scalars)`` for the elementwise part, or None for BLAS."""
        if self._plan is None and self.kind != "blas":
            x = self.body.x if self.kind == "reduce" else self.body
            if type(x) is not Scalar:
                self._plan = make_plan(x, len(self.loop_shape))
        return self._plan


class Splitter(Visitor):
    """Walks a tree once, cutting it where the engine will, computing nothing.

    ``labels`` names what the split invents: ``K1`` for kernel 1's temporary,
    ``K1.reshape(24,)`` for a view of it.
    """

    def __init__(self):
        self.labels: dict[int, str] = {}
        self.kernels: list[Kernel] = []
        self.kernel_of: dict[int, Kernel] = {}
        self.temps: dict[int, Tensor] = {}
        self.reused_nodes: list[Exp] = []  # nodes already computed: read, not recomputed
        self._members: list = []

    def kernel(self, e: Exp, cut: str = "", loop_shape=None) -> Kernel:
        outer, self._members = self._members, []
        kind = {Dot: "blas", Reduce: "reduce"}.get(type(e), "fused")
        body = root_body(e, self)
        if kind != "fused":
            self._members.append(e)
        loop = e.x.shape if kind == "reduce" else (loop_shape or e.shape)
        k = Kernel(len(self.kernels) + 1, kind, e, body, unique(self._members), cut, loop)
        self._members = outer
        self.kernels.append(k)
        for m in k.members:
            self.kernel_of[id(m)] = k
        return k

    def reused(self, e):
        self.reused_nodes.append(e)
        return e.realized

    def member(self, e):
        self._members.append(e)

    def view(self, e):
        base = self.temporary(e.base, e.reason)
        view = e.fn(base)
        self.labels[id(view)] = f"{self.labels[id(base)]}.{e.what}"
        return view

    def temporary(self, e: Exp, cut: str) -> Tensor:
        t = self.temps.get(id(e))
        if t is None:
            t = evaluated(e, self)
            if t is None:
                k = self.kernel(e, cut)
                t = Tensor.meta(e.shape, e.dtype)
                t.device = e.device
                self.labels[id(t)] = k.name
            self.temps[id(e)] = t
        return t


def split(e: Exp, loop_shape=None) -> Splitter:
    """The kernels that writing ``e`` into a tensor of ``loop_shape`` runs, in order; with
    no ``loop_shape``, those that evaluating it into a new tensor runs (``evaluated``)."""
    s = Splitter()
    if loop_shape is not None or evaluated(e, s) is None:
        s.kernel(e, loop_shape=loop_shape)
    return s


def unique(items: list) -> list:
    seen: dict[int, object] = {}
    for x in items:
        seen.setdefault(id(x), x)
    return list(seen.values())

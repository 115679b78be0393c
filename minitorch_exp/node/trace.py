"""What a backward pass does, rule by rule: each kernel named after the rules it computes.

``node/backward.py`` tells a ``BackwardTrace`` three things when one is active
(``MINITORCH_DEBUG`` is set, or ``explain(loss, backward=True)`` is running):
a node's rule is about to run (``step``), the rule built an input's gradient
(``built``), a gradient is written into a ``.grad`` (``accumulate``). The
trace tags every expression node a rule builds with that rule, so the debug
line of a kernel can say which rules it computes -- ``(backward of tanh, mul)``
(``note``) -- and names the tensors it writes ``W.grad``. With ``dry``,
backward writes each gradient into a stand-in's ``.grad`` instead (``stand_in``:
the same code, the same kernel, into scratch), and with ``record`` the trace
keeps every step for ``explain`` (node/explain_backward.py).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from ..tensor import counters, creation
from ..tensor import explain as tensor_explain
from ..tensor.expr import RVALUE, Exp
from ..tensor.names import name_after
from ..tensor.tensor import Tensor


class _Local(threading.local):
    def __init__(self):
        self.traces: list = []  # explain's traces, innermost last, while it runs a backward


_LOCAL = _Local()


@contextlib.contextmanager
def explaining(trace: BackwardTrace):
    """Backward passes this thread starts inside the block use ``trace``."""
    _LOCAL.traces.append(trace)
    try:
        yield trace
    finally:
        _LOCAL.traces.remove(trace)


@dataclass(eq=False)
class Step:
    """One step of a backward pass: a node's rule, or a gradient written into a ``.grad``."""

    node: object                 # the Node
    rule: str                    # "tanh", "MatMul"...; "" for a write into node.grad
    grad: object                 # the gradient arriving (as the rule reads it), or written
    built: list = field(default_factory=list)    # (input Node, gradient, its description)
    kernels: list = field(default_factory=list)  # debug lines of the kernels run
    counts: dict = field(default_factory=dict)   # kernels run, by kind


def trace_for_pass():
    """The trace of a backward pass starting now: explain's while it runs one in this
    thread, else one that names rules in debug lines when the debug level is set, else
    None."""
    if _LOCAL.traces:
        return _LOCAL.traces[-1]
    return BackwardTrace() if counters.DEBUG else None


class BackwardTrace:
    """Tags what each rule builds; ``dry`` writes gradients to scratch; ``record`` keeps
    the steps (``steps``) with the kernels each one ran."""

    def __init__(self, dry: bool = False, record: bool = False, device: str = "cpu",
                 describe=None):
        self.dry, self.record, self.device = dry, record, device
        self.describe = describe            # (step, input Node, gradient) -> str, as built
        self._real: dict[int, tuple] = {}   # id(stand-in) -> (stand-in, the Node it is for)
        self.steps: list[Step] = []
        self.lines: list[str] = []          # debug lines, filled by explain.collect_debug
        self._tags: dict[int, tuple] = {}   # id(expression) -> (expression, rule number)
        self._rules: list[str] = []
        self._current: list[str] = []       # what a kernel computes when no tag says
        self._old: set[int] = set()         # the running rule's inputs: not built by it
        self._node = None                   # whose rule is running
        self._mark = (0, counters.kernel_counts(device) if record else {})

    @contextlib.contextmanager
    def running(self):
        """Debug lines of the kernels run inside name the rules they compute."""
        with tensor_explain.kernel_notes(self.note):
            try:
                yield self
            finally:
                self._close()

    # ---- what backward.py calls ----------------------------------------------------------

    def step(self, node, g) -> None:
        """``node``'s rule is about to run on the gradient ``g``."""
        ctx, self._node = node.grad_fn, node
        rule = rule_name(ctx)
        self._rules.append(rule)
        self._current = self._labels(g) + [rule]
        self._old = _reachable([g, *ctx._saved, *(getattr(x, "_value", x) for x in ctx.inputs)])
        self._open(Step(node, rule, g))

    def built(self, g, inp, ig) -> None:
        """The running rule read ``g`` and built ``ig``, the gradient of its input ``inp``
        (as the rule returned it: a Node's expression is read, nothing computed)."""
        if hasattr(type(ig), "__exp__"):
            ig = ig.__exp__()
        if len(self._rules) == 1 and type(g) is Tensor:  # the gradient backward starts from
            name_after(g, self._node, "grad({})")
        if isinstance(ig, Exp):
            self._tag(ig, len(self._rules) - 1, self._old | _reachable([g]))
        if self.record and self.steps:
            step = self.steps[-1]
            step.grad = g
            text = self.describe(step, inp, ig) if self.describe else ""
            step.built.append((inp, ig, text))

    def accumulate(self, node, g):
        """``g`` is about to go into ``node.grad``: returns the Node whose ``.grad`` to
        write (a dry run's stand-in)."""
        self._current = self._labels(g)
        self._open(Step(node, "", g))
        return self.stand_in(node) if self.dry else node

    def writes(self, node, dst) -> None:
        """``dst`` is about to receive ``node``'s gradient: call it ``<node>.grad``."""
        name_after(dst, self._real.get(id(node), (None, node))[1], "{}.grad")

    def stand_in(self, node):
        """For a dry run: a Node like ``node`` whose ``.grad`` is what ``node.grad`` is to
        backward (None, or zeros where it holds one): written instead of it."""
        other = type(node)(node.__exp__())
        if node.grad is not None:
            other.grad = creation.zeros(node.shape, dtype=node.dtype, device=node.device)
        self._real[id(other)] = (other, node)
        return other

    # ---- what a debug line asks -------------------------------------------------------------

    def note(self, e) -> str:
        """``backward of <rules>`` for a kernel computing ``e``: the rules that built its
        nodes, else those of the expression being computed now."""
        labels = self._labels(e) or self._current
        return f"backward of {', '.join(labels)}" if labels else ""

    # ---- inside ------------------------------------------------------------------------------

    def _tag(self, e: Exp, rule: int, old: set[int]) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            if id(x) in old or id(x) in self._tags:
                continue
            self._tags[id(x)] = (x, rule)
            if x.kind != RVALUE and getattr(x, "realized", None) is None:
                stack.extend(x.children())

    def _labels(self, e) -> list[str]:
        """The rules that built the nodes of ``e``, in the order they ran, each once."""
        if not isinstance(e, Exp):
            return []
        tags = self._tags
        found = sorted({tags[i][1] for i in _reachable([e], computed=False) if i in tags})
        return list(dict.fromkeys(self._rules[r] for r in found))

    def _open(self, step: Step) -> None:
        self._close()
        if self.record:
            self.steps.append(step)

    def _close(self) -> None:
        """Give the last step the kernels run since it opened."""
        if not self.record:
            return
        lines, counts = self._mark
        now = counters.kernel_counts(self.device)
        if self.steps:
            last = self.steps[-1]
            last.kernels += self.lines[lines:]
            for kind, n in now.items():
                if kind != "total" and n - counts.get(kind, 0):
                    last.counts[kind] = last.counts.get(kind, 0) + n - counts.get(kind, 0)
        self._mark = (len(self.lines), now)


def rule_name(ctx) -> str:
    """An elementwise op's name (``tanh``), else the Function's (``MatMul``)."""
    op = ctx.attrs.get("op")
    return op if isinstance(op, str) and ctx.fn.__name__ == "Elementwise" else ctx.fn.__name__


def _reachable(roots, computed: bool = True) -> set[int]:
    """``id`` of every node of the trees ``roots``, down to tensors and to nodes realized
    before (included only when ``computed``: their work is done)."""
    seen: set[int] = set()
    stack = [r for r in roots if isinstance(r, Exp)]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        done = x.kind != RVALUE and getattr(x, "realized", None) is not None
        if done and not computed:
            continue
        seen.add(id(x))
        if x.kind != RVALUE and not done:
            stack.extend(x.children())
    return seen

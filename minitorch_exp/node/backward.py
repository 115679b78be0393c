"""The backward pass: gradients flow from an output to the leaves, in topological order.

Gradients travel as expressions. A chain of elementwise backward rules
therefore builds one expression that is realized in a single fused pass when
it reaches a leaf (or a dot, or a reduction). Two rules keep that honest:

* a gradient about to be used by two or more inputs is realized first, so the
  shared part is computed once -- unless it is a single op (``g * 0.5``, a
  broadcast scaled), which each consumer recomputes for less than a pass costs;
* a gradient expression that grows past ``MAX_FUSED_OPS`` ops is realized, so
  kernels and recursion stay bounded however long the chain.

Below the fusion threshold nothing waits: gradients are computed at once
(tensor/eager.py), Tensors like every other, summed and written into ``.grad``
with NumPy.
"""

from __future__ import annotations

import numpy as np

from ..tensor import creation, eager
from ..tensor.engine import assign, realize
from ..tensor.expr import COMPLEX, RVALUE, Dot, Exp, as_exp
from ..tensor.tensor import Tensor
from . import anomaly, capture
from .function import SliceGradient
from .hooks import HOOKS, run_hooks
from .node import MAX_FUSED_OPS, Node, count_ops
from .trace import trace_for_pass


def topological_order(root: Node, *more: Node) -> list[Node]:
    """Nodes reachable from ``root`` (and ``more`` roots) through ``grad_fn`` that need a
    gradient, each before its inputs (consumers first), found without recursion.

    ``graphwalk.post_order``'s walk written out for Nodes: it runs on every backward,
    where its callback per node cost a fifth of a small graph's backward (docs/eager.md).
    """
    order: list[Node] = []
    expanded: set[Node] = set()  # Nodes hash by identity
    stack = [(r, False) for r in reversed(more)] + [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
        elif node not in expanded:
            expanded.add(node)
            stack.append((node, True))
            ctx = node.grad_fn
            if ctx is not None:
                for p in ctx.inputs:
                    if isinstance(p, Node) and p.requires_grad and p not in expanded:
                        stack.append((p, False))
    order.reverse()
    return order


def _initial_grad(root: Node, grad):
    if grad is None:
        if root.numel() != 1:
            raise RuntimeError(
                f"backward() without a gradient needs a single-element output, got shape "
                f"{root.shape}; pass grad= (e.g. mt.ones_like(out)) or reduce it with .sum()")
        if eager.computes_now(root._value):
            return eager.full(root.shape, root.dtype, 1)
        return creation.ones(root.shape, dtype=root.dtype, device=root.device)
    g = grad._value if isinstance(grad, Node) else as_exp(grad)
    if g.shape != root.shape:
        raise RuntimeError(f"backward: grad has shape {g.shape}, the output has {root.shape}")
    return g


def backward(root: Node, grad=None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires grad
    (and every node that ``retain_grad()`` asked to keep one)."""
    if not root.requires_grad:
        raise RuntimeError("backward: this tensor does not require grad and has no grad_fn; "
                           "create its inputs with requires_grad=True")
    trace = trace_for_pass()  # MINITORCH_DEBUG, explain(backward=True): node/trace.py
    if trace is None:
        return _backward(root, grad, retain_graph, None)
    with trace.running():
        _backward(root, grad, retain_graph, trace)


def _backward(root: Node, grad, retain_graph: bool, trace) -> None:
    grads: dict[Node, Exp] = {root: _initial_grad(root, grad)}
    checks = anomaly.is_anomaly_enabled()  # mt.detect_anomaly(): each gradient for NaN/Inf
    for node in topological_order(root):
        g = grads.pop(node, None)
        if g is None:
            continue
        if type(g) is _Slices:
            g = g.tensor
        if HOOKS and HOOKS.get(id(node)):  # x.register_hook(fn): may replace the gradient
            g = run_hooks(node, g)
        ctx = node.grad_fn
        if ctx is None:
            _accumulate(node, g, trace)
            continue
        if ctx.freed:
            raise RuntimeError(
                f"backward through {ctx.name} a second time: its saved values were "
                "freed; pass retain_graph=True to the first backward() to keep them")
        if node._retains_grad:
            g = _retain(node, g, trace)
        if trace is not None:
            trace.step(node, g)
        if type(g) is Tensor:  # computed: nothing to decide
            pass
        elif g.kind == COMPLEX and not (type(g) is Dot and ctx.fn.transposes_products):
            # a dot or reduction is a boundary: every backward rule would evaluate it into a
            # temporary anyway, and unrealized, a chain of them nests without bound
            # (tests/node/test_backward.py::test_long_chain_of_non_elementwise_ops)
            g = realize(g)
        elif builtin_sum(ctx.needs_input_grad) > 1 and g.kind != RVALUE and count_ops(g, 2) > 1:
            g = realize(g)
        _propagate(ctx, g, grads, trace, checks)
        if not retain_graph:
            ctx.free()


builtin_sum = sum


def _propagate(ctx, g: Exp, grads: dict, trace=None, checks: bool = False) -> None:
    """Run ``ctx``'s backward on ``g`` and add each input's gradient into ``grads``
    (``checks``: anomaly mode's check of each for NaN/Inf)."""
    input_grads = ctx.fn.backward(ctx, g)
    if not isinstance(input_grads, tuple):
        input_grads = (input_grads,)
    if checks or trace is not None:  # they read each gradient whole
        input_grads = tuple([ig.dense() if type(ig) is SliceGradient else ig
                             for ig in input_grads])
    if len(input_grads) != len(ctx.inputs):
        raise RuntimeError(f"{ctx.name}.backward returned {len(input_grads)} gradients "
                           f"for {len(ctx.inputs)} inputs")
    if checks:
        input_grads = anomaly.check_backward(ctx, input_grads)
    for inp, need, ig in zip(ctx.inputs, ctx.needs_input_grad, input_grads):
        if not need or ig is None:
            continue
        prev = grads.get(inp)
        if type(ig) is SliceGradient:
            grads[inp] = _add_slice(prev, ig)
            continue
        if type(prev) is _Slices:
            prev = prev.tensor
        if trace is not None:  # as the rule built it, before anything computes it
            trace.built(g, inp, ig)
        if type(ig) is not Tensor:  # a Tensor was computed at once: nothing to do
            ig = _term(ig)
        if ig.shape != inp._value.shape:
            raise RuntimeError(f"{ctx.name}.backward returned a gradient of shape "
                               f"{ig.shape} for an input of shape {inp.shape}")
        grads[inp] = ig if prev is None else _sum(prev, ig)


class _Slices:
    """A gradient summed from slices (``SliceGradient``) in a tensor this pass owns, so
    the next slice may be added into it in place."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


def _add_slice(prev, s: SliceGradient) -> _Slices:
    """``prev`` (None, a gradient, or a ``_Slices``) plus the slice ``s``: into the
    ``_Slices`` buffer, made (from ``prev``, or zeros) the first time."""
    if type(prev) is not _Slices:
        buffer = creation.zeros(s.shape, dtype=s.dtype, device=s.device)
        if prev is not None:
            assign(buffer, prev, "=")
        prev = _Slices(buffer)
    assign(prev.tensor[s.key], s.grad, "+=")
    return prev


def _term(ig):
    """A gradient a backward returned (not a Tensor) as backward carries it: an
    expression, computed now below the fusion threshold, realized when its chain grows
    past ``MAX_FUSED_OPS``. An array (a user Function's) is wrapped, and a NumPy scalar
    -- a rule's arithmetic on a 0-d array gives one -- is that 0-d array, not a constant
    that broadcasts (tests/node/test_reduce_0d.py)."""
    if isinstance(ig, (np.ndarray, np.generic)):
        return eager.wrap(ig)
    ig = ig._value if isinstance(ig, Node) else as_exp(ig)
    if ig.kind != RVALUE and (eager.computes_now(ig)
                              or count_ops(ig, MAX_FUSED_OPS) >= MAX_FUSED_OPS):
        ig = realize(ig)
    return ig


def _sum(prev, ig):
    """Two gradients of one Node added: at once when either was computed so, else lazily,
    realized past ``MAX_FUSED_OPS`` -- a node with many consumers sums many terms
    (tests/node/test_backward.py::test_node_with_thousands_of_consumers)."""
    if eager.computes_now(ig):
        return eager.add(prev, ig)
    total = prev + ig
    return realize(total) if count_ops(total, MAX_FUSED_OPS) >= MAX_FUSED_OPS else total


def _accumulate(leaf: Node, g, trace=None):
    """Write the gradient into ``leaf.grad`` (a fresh tensor the first time, then ``+=``);
    returns what was written (with a trace: node/trace.py; a dry one gives a stand-in)."""
    if trace is not None:
        leaf = trace.accumulate(leaf, g)
    if capture.grad_log() is not None:  # a captured function's eager runs: see capture.py
        capture.note_grad(leaf)
    if leaf._grad is None:
        dst, saver = leaf.grad_buffer, "="  # asks the leaf's sink, if any: read once
        if dst is None:
            dst = creation.new_empty(leaf.shape, leaf.dtype, leaf.device)
    else:
        dst, saver = leaf._grad.value, "+="
    if trace is not None:
        trace.writes(leaf, dst)
    assign(dst, g, saver)
    if leaf._grad is None:
        leaf._grad = Node(dst)
    return dst


def _retain(node: Node, g, trace):
    """A node that retains its grad gets it as a leaf does, and its rule reads it from
    there: the first time the gradient is computed once, into ``node.grad``."""
    if node.grad is None:
        return _accumulate(node, g, trace)
    if isinstance(g, Exp):
        g = realize(g)
    _accumulate(node, g, trace)
    return g

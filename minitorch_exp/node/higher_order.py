"""Gradients that are themselves in the graph (``create_graph=True``): double backward.

``backward()`` computes gradients outside the graph, as fused expressions. With
``create_graph=True`` the same walk runs each Function's backward on Nodes, so
every gradient is a Node recorded like any other value and can be differentiated
again (a Hessian-vector product, a gradient penalty, a second derivative).

A registry row's rule is written once (tensor/ops.py) with operators and
``_e(g)``'s functions; on Nodes, ``_e`` finds the Node-level functions
(``Node.rule_forms``), so the very rule that fuses in a first backward records
Nodes here (``RULES``). A Function whose backward runs on Nodes
(``backward_on_nodes``) runs as written, calling ``forms.of(g)``'s Node-level
functions; the recurrent sequence, whose backward is hand-fused loops, gives its
forward again as recorded ops (``as_ops``), differentiated as recorded. Where the
output of an op is read by its rule (``exp``, ``tanh``...) it is recomputed from
the inputs as a Node, so its own dependence on them is recorded too. A
PyTorch-style ``autograd.Function`` brings its own (``graph_backward``). A Function
with no rule -- a library call on arrays, a Node-level ``mt.Function`` -- raises an
error naming it when a gradient has to pass through it.
"""

from __future__ import annotations

import math

from ..tensor.ops import OPS
from . import ops
from .backward import topological_order
from .grad_mode import enable_grad
from .node import Node, ones_like


def graph_gradients(roots: list, grads: list, stop=frozenset()) -> dict:
    """``{node: d(sum of roots . grads)/d(node)}`` for every node reachable from
    ``roots`` that requires grad, each gradient a Node in the graph; the walk does not
    go past a node of ``stop`` (a Function that recomputes its forward from its inputs
    needs their gradients only)."""
    pending: dict[Node, Node] = {}
    for root, g in zip(roots, grads):
        pending[root] = g if root not in pending else pending[root] + g
    order = topological_order(*roots)
    found: dict[Node, Node] = {}
    with enable_grad():
        for node in order:
            g = pending.pop(node, None)
            if g is None:
                continue
            found[node] = g
            ctx = node.grad_fn
            if ctx is None or node in stop:
                continue
            if ctx.freed:
                raise RuntimeError(f"create_graph through {ctx.name}: its saved values were "
                                   "freed by an earlier backward(); pass retain_graph=True")
            _ = ctx.saved_tensors  # raises if an input was modified in place since forward
            for inp, need, ig in zip(ctx.inputs, ctx.needs_input_grad, _grads(ctx, g, node)):
                if need and ig is not None and isinstance(inp, Node):
                    pending[inp] = ig if inp not in pending else pending[inp] + ig
    return found


def accumulate_graph_gradients(root: Node, grad=None) -> None:
    """``root.backward(grad, create_graph=True)``: each leaf's gradient, a Node in the
    graph, added to its ``.grad``."""
    if not root.requires_grad:
        raise RuntimeError("backward: this tensor does not require grad and has no grad_fn")
    if grad is None:
        if root.numel() != 1:
            raise RuntimeError(f"backward() without a gradient needs a single-element output, "
                               f"got shape {root.shape}")
        grad = ones_like(root)
    found = graph_gradients([root], [grad if isinstance(grad, Node) else Node(grad)])
    for node, g in found.items():
        if node.grad_fn is None and node.requires_grad:
            node.grad = g if node.grad is None else node.grad + g


def _grads(ctx, g: Node, out: Node) -> tuple:
    """The inputs' gradients of the call ``ctx`` (whose output is ``out``), as Nodes: by
    its backward run on Nodes, by its forward's ops (``as_ops``), by the Function's own
    ``graph_backward`` (a PyTorch-style ``autograd.Function``, whose backward computes
    with tensor operations), or by its registry row's rule."""
    if ctx.fn.backward_on_nodes:  # written with the surface Nodes share: run as is
        grads = ctx.fn.backward(_OnNodes(ctx, out), g)
        return grads if isinstance(grads, tuple) else (grads,)
    as_ops = getattr(ctx.fn, "as_ops", None)
    if as_ops is not None:  # the forward again as recorded ops: their rules apply
        found = graph_gradients([as_ops(ctx)], [g], stop=set(ctx.inputs))
        return tuple(found.get(x) if need else None
                     for x, need in zip(ctx.inputs, ctx.needs_input_grad))
    graph_backward = getattr(ctx.fn, "graph_backward", None)
    if graph_backward is not None:
        grads = graph_backward(ctx, g, out)
        return grads if isinstance(grads, tuple) else (grads,)
    return _rule(ctx)(ctx, g)


def _rule(ctx):
    rule = RULES.get(ctx.fn) or RULES.get(getattr(ctx.fn, "reduction", None) and "reduction")
    if rule is None:
        raise RuntimeError(
            f"create_graph: {ctx.name}.backward is not differentiable here -- it computes "
            "its gradient outside the graph (a library call on arrays, or a Function "
            "without a Node-level rule); a second derivative through it is not available")
    return rule


def saved_node(ctx, out: Node, value) -> Node | None:
    """The graph's own Node whose value a tensor ``ctx`` saved is -- one of its inputs,
    or its output ``out`` (held lazy, or computed since) -- or None."""
    for node in (*ctx.inputs, out):
        if isinstance(node, Node):
            held = node.__exp__()
            if (value is held or getattr(held, "realized", None) is value
                    or getattr(value, "realized", None) is held):
                return node
    return None


def _constant(ctx, value) -> bool:
    """Whether ``value`` is an input of ``ctx`` given as a tensor, not a Node."""
    return any(value is inp for inp in ctx.inputs if not isinstance(inp, Node))


class _OnNodes:
    """A Context as a backward run on Nodes sees it: each saved tensor is the graph's
    own Node (``saved_node``), so that gradients through it are recorded; the rest is
    the Context's."""

    __slots__ = ("_ctx", "_out")

    def __init__(self, ctx, out: Node):
        self._ctx, self._out = ctx, out

    @property
    def saved_tensors(self) -> tuple:
        return tuple(self._node_of(v) for v in self._ctx.saved_tensors)

    def _node_of(self, value):
        node = saved_node(self._ctx, self._out, value)
        if node is None and (_constant(self._ctx, value) or value.dtype.kind in "biu"):
            return value  # a constant input, or indices: nothing to differentiate through
        if node is None:
            raise RuntimeError(f"create_graph: {self._ctx.name}.backward reads a saved "
                               "tensor that is neither an input nor the output, so its "
                               "dependence on the inputs cannot be recorded")
        return node

    def __getattr__(self, name):
        return getattr(self._ctx, name)


# ---- each Function's rule on Nodes ------------------------------------------------------

def _elementwise(ctx, g):
    row = OPS[ctx.attrs["op"]]
    args = ctx.inputs
    out = ops.elementwise(row.name, *args)  # recomputed: the rule may read its output
    grads = row.gradients(g, out, tuple(args), ctx.needs_input_grad)
    return tuple(r if r is None or not isinstance(a, Node) else ops.sum_to(_node(r, g), a.shape)
                 for r, a in zip(grads, args))


def _node(r, like: Node) -> Node:
    """A rule's result as a Node (a rule may return a number: ``d(x + 1)/d1``)."""
    return r if isinstance(r, Node) else like * 0 + r


def _reduction(ctx, g):
    """The row's own derivative, on Nodes: ``g`` and (where the rule reads them) the
    input and the recomputed result spread back over the reduced axes."""
    r = ctx.fn.reduction
    shape, axes = ctx.attrs["in_shape"], ctx.attrs["axes"]
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    x = out = None
    if r.saves:
        x = ctx.inputs[0]
        out = ops.expand(ops.reshape(getattr(ops, r.function)(x, axes, keepdims=True), kept),
                         shape)
    spread = ops.expand(ops.reshape(g, kept), shape)
    return (r.derivative(spread, x, out, axes, math.prod(shape[a] for a in axes)),)


RULES = {ops.Elementwise: _elementwise, "reduction": _reduction}

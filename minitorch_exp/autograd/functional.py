"""PyTorch's ``torch.autograd.functional``: ``vjp``, ``jvp``, ``vhp``, ``hvp``,
``jacobian`` and ``hessian`` of a function of tensors.

Each is a backward, or two, through ``grad(create_graph=True)`` (node/higher_order.py):
``jvp`` is the double-backward trick (the vjp's gradient with respect to a dummy
upstream gradient), a Hessian product is the gradient of a gradient. As in
PyTorch, ``inputs`` is a tensor or a tuple of tensors (taken detached, requiring
grad), results come back in the same structure, and without ``create_graph`` they
are detached.
"""

from __future__ import annotations

from ..node import ops
from ..node.grad_mode import enable_grad
from ..node.node import Node, ones_like, zeros_like
from . import grad

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


def _as_tuple(x) -> tuple[bool, tuple]:
    return (True, tuple(x)) if isinstance(x, (tuple, list)) else (False, (x,))


def _inputs(inputs) -> tuple[bool, tuple]:
    is_tuple, xs = _as_tuple(inputs)
    for i, x in enumerate(xs):
        if not isinstance(x, Node):
            raise TypeError(f"inputs[{i}] must be a tensor, got {type(x).__name__}")
    return is_tuple, tuple(x.detach().requires_grad_(True) for x in xs)


def _shaped(values: tuple, is_tuple: bool):
    return values if is_tuple else values[0]


def _grads(outputs: tuple, xs: tuple, seeds, create_graph: bool) -> tuple:
    """d(outputs . seeds)/d(xs), zeros where an input is not used."""
    found = grad(outputs, xs, seeds, create_graph=True, allow_unused=True)
    found = tuple(zeros_like(x) if g is None else g for x, g in zip(xs, found))
    return found if create_graph else tuple(g.detach() for g in found)


def _vector(v, like: tuple, what: str) -> tuple:
    """``v`` in the structure and shapes of ``like`` (``v=None``: only for one element)."""
    if v is None:
        if any(t.numel() != 1 for t in like):
            raise RuntimeError(f"{what}: v can be omitted only when every tensor it pairs "
                               "with has one element")
        return tuple(ones_like(t) for t in like)
    _, vs = _as_tuple(v)
    if len(vs) != len(like) or any(tuple(a.shape) != b.shape for a, b in zip(vs, like)):
        raise RuntimeError(f"{what}: v has shapes {[tuple(a.shape) for a in vs]}, expected "
                           f"{[b.shape for b in like]}")
    return vs


def _dot(grads: tuple, vs: tuple, anchor: Node) -> Node:
    """``sum(g . v)`` over the gradients that exist, recorded (``anchor * 0`` keeps a
    sum of none in the graph)."""
    with enable_grad():
        terms = [ops.sum(g * v) for g, v in zip(grads, vs) if g is not None]
        return sum(terms, start=anchor.sum() * 0)


def _call(func, xs: tuple) -> tuple[bool, tuple]:
    with enable_grad():
        return _as_tuple(func(*xs))


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product."""
    is_tuple, xs = _inputs(inputs)
    out_tuple, outs = _call(func, xs)
    result = _grads(outs, xs, _vector(v, outs, "vjp"), create_graph)
    return _shaped(_detached(outs, create_graph), out_tuple), _shaped(result, is_tuple)


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), J v)``, by the double-backward trick: ``J v`` is the gradient of
    ``u^T J v`` with respect to a dummy ``u``."""
    is_tuple, xs = _inputs(inputs)
    vs = _vector(v, xs, "jvp")
    out_tuple, outs = _call(func, xs)
    dummies = tuple(zeros_like(o).requires_grad_(True) for o in outs)
    total = _dot(grad(outs, xs, dummies, create_graph=True, allow_unused=True), vs,
                 dummies[0])
    result = _grads((total,), dummies, None, create_graph)
    return _shaped(_detached(outs, create_graph), out_tuple), _shaped(result, out_tuple)


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T H)`` for a function with one element."""
    return _hessian_product(func, inputs, v, create_graph, "vhp")


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), H v)``: equal to ``vhp``'s, the Hessian being symmetric."""
    return _hessian_product(func, inputs, v, create_graph, "hvp")


def _hessian_product(func, inputs, v, create_graph: bool, what: str):
    is_tuple, xs = _inputs(inputs)
    vs = _vector(v, xs, what)
    out_tuple, outs = _call(func, xs)
    if len(outs) != 1 or outs[0].numel() != 1:
        raise RuntimeError(f"{what}: the function must return one tensor of one element, "
                           f"got shapes {[o.shape for o in outs]}")
    total = _dot(grad(outs, xs, None, create_graph=True, allow_unused=True), vs, outs[0])
    result = _grads((total,), xs, None, create_graph)
    return _shaped(_detached(outs, create_graph), out_tuple), _shaped(result, is_tuple)


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for each output and input, a tensor of
    shape ``output.shape + input.shape``, one backward per output element."""
    is_tuple, xs = _inputs(inputs)
    out_tuple, outs = _call(func, xs)
    blocks = [[None] * len(xs) for _ in outs]
    for k, out in enumerate(outs):
        rows = [[] for _ in xs]
        flat = ops.reshape(out, (-1,))
        for i in range(flat.shape[0]):
            for j, g in enumerate(_grads((flat[i],), xs, None, create_graph)):
                rows[j].append(g)
        for j, x in enumerate(xs):
            stacked = ops.stack(rows[j]) if rows[j] else zeros_like(x).reshape(0, *x.shape)
            blocks[k][j] = ops.reshape(stacked, out.shape + x.shape)
    result = tuple(_shaped(tuple(row), is_tuple) for row in blocks)
    return _shaped(result, out_tuple)


def hessian(func, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of a function returning one element: the Jacobian of its gradient."""
    is_tuple, xs = _inputs(inputs)
    out_tuple, outs = _call(func, xs)
    if len(outs) != 1 or outs[0].numel() != 1:
        raise RuntimeError("hessian: the function must return one tensor of one element, "
                           f"got shapes {[o.shape for o in outs]}")

    def gradient(*ys):
        out = func(*ys)
        return grad(out if isinstance(out, Node) else out[0], ys, create_graph=True,
                    allow_unused=True, materialize_grads=True)

    return jacobian(gradient if is_tuple else (lambda y: gradient(y)[0]), _shaped(xs, is_tuple),
                    create_graph=create_graph)


def _detached(outs: tuple, create_graph: bool) -> tuple:
    return outs if create_graph else tuple(o.detach() for o in outs)

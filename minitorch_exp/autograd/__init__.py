"""PyTorch's ``torch.autograd``: ``Function`` as PyTorch writes it, ``grad``, ``backward``,
``gradcheck``.

``mt.Function`` (node/function.py) is this project's own: its ``forward`` and
``backward`` compute on Tensor-level values (expressions), which fuse. A PyTorch
script's Function computes on tensors, with tensor methods; ``autograd.Function``
gives it exactly that -- its ``forward`` and ``backward`` receive Nodes (outside the
graph, as in PyTorch), and ``ctx.saved_tensors`` gives back Nodes -- and is
otherwise the same class (``apply``, ``ctx.needs_input_grad``, saved-tensor version
checks, ``gradcheck``).
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from ..node import Function as _NodeFunction
from ..node import Node
from ..node import gradcheck as _gradcheck
from ..node.anomaly import detect_anomaly
from ..node.backward import topological_order
from ..node.grad_mode import enable_grad, no_grad
from ..node.higher_order import graph_gradients, saved_node
from ..node.node import ones_like, zeros_like
from ..node.ops import cat
from ..tensor.expr import Exp
from ..tensor.tensor import from_array

__all__ = ["Function", "backward", "detect_anomaly", "enable_grad", "functional", "grad",
           "gradcheck", "gradgradcheck", "no_grad", "once_differentiable"]


def _node_of(value):
    """A Tensor-level value as a Node outside the graph; anything else as it is."""
    return Node(value) if isinstance(value, Exp) else value


def _value_of(x):
    """A Node's value (its expression, lazy or not) for the level below."""
    return x.__exp__() if isinstance(x, Node) else x


class _Ctx:
    """The ``ctx`` a PyTorch-style forward and backward see: the call's Context, with
    tensors going in and out of ``save_for_backward`` / ``saved_tensors`` as Nodes."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx):
        object.__setattr__(self, "_ctx", ctx)

    def save_for_backward(self, *tensors) -> None:
        self._ctx.save_for_backward(*(_value_of(t) for t in tensors))

    @property
    def saved_tensors(self) -> tuple:
        return tuple(_node_of(v) for v in self._ctx.saved_tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """Accepted for PyTorch's scripts: gradients here are always tensors."""

    def mark_non_differentiable(self, *tensors) -> None:
        """Accepted for PyTorch's scripts: an integer or bool output has no gradient anyway."""

    def __getattr__(self, name):  # needs_input_grad, attrs, and what the user stored
        return getattr(self._ctx, name)

    def __setattr__(self, name, value) -> None:  # ``ctx.constant = c`` lives on the Context
        setattr(self._ctx, name, value)


class _GraphCtx(_Ctx):
    """``_Ctx`` for ``graph_backward``: a saved tensor that is an input's or the output's
    value comes back as that Node, so gradients through it are recorded."""

    __slots__ = ("_out",)

    def __init__(self, ctx, out: Node):
        super().__init__(ctx)
        object.__setattr__(self, "_out", out)

    @property
    def saved_tensors(self) -> tuple:
        return tuple(self._graph_node(v) for v in self._ctx.saved_tensors)

    def _graph_node(self, value):
        node = saved_node(self._ctx, self._out, value)
        return _node_of(value) if node is None else node  # else a constant, as in PyTorch


def _single(out, name: str):
    if isinstance(out, (tuple, list)):
        raise TypeError(f"{name}.forward returned {len(out)} values; a Function here returns "
                        "one tensor (split it into one Function per output)")
    return _value_of(out)


def _wrap_forward(cls, fn):
    """``fn`` (PyTorch's forward: Nodes in, a Node out) as the Node level's forward."""
    setup = cls.setup_context
    new_style = setup is not Function.setup_context

    @functools.wraps(fn)
    def forward(ctx, *values, **attrs):
        nodes = tuple(_node_of(v) for v in values)
        with no_grad():
            if new_style:  # PyTorch 2's form: forward(*args), then setup_context(ctx, ...)
                out = fn(*nodes, **attrs)
                setup(_Ctx(ctx), nodes, out)
            else:
                out = fn(_Ctx(ctx), *nodes, **attrs)
        return _single(out, cls.__name__)

    if new_style:  # the Node level names positional arguments after ctx: show one
        sig = inspect.signature(fn)
        ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_ONLY)
        forward.__signature__ = sig.replace(parameters=[ctx, *sig.parameters.values()])
    return forward


def _wrap_backward(fn):
    @functools.wraps(fn)
    def backward(ctx, grad):
        with no_grad():
            grads = fn(_Ctx(ctx), _node_of(grad))
        if isinstance(grads, (tuple, list)):
            return tuple(_value_of(g) for g in grads)
        return _value_of(grads)
    return backward


class Function(_NodeFunction):
    """PyTorch's ``torch.autograd.Function``: subclass it with static ``forward(ctx,
    *args)`` and ``backward(ctx, grad_output)`` working on tensors, call ``apply``.

    ``forward`` gets its tensor arguments as Nodes outside the graph (others as they
    are) and returns one tensor; ``backward`` returns one gradient per argument of
    ``apply`` (None for non-tensors). PyTorch 2's form, ``forward(*args)`` plus
    ``setup_context(ctx, inputs, output)``, works too.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        forward, backward = cls.__dict__.get("forward"), cls.__dict__.get("backward")
        if forward is not None:
            cls._user_forward = staticmethod(_func(forward))
            cls.forward = staticmethod(_wrap_forward(cls, _func(forward)))
        if backward is not None:
            cls._user_backward = staticmethod(_func(backward))
            cls.backward = staticmethod(_wrap_backward(_func(backward)))

    @classmethod
    def graph_backward(cls, ctx, grad: Node, out: Node):
        """The backward with ``create_graph`` (node/higher_order.py): the user's backward
        run with grad enabled, its saved tensors the graph's own Nodes -- an input, or
        the output -- so that its tensor operations record, as PyTorch's do."""
        with enable_grad():
            grads = cls._user_backward(_GraphCtx(ctx, out), grad)
        return tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        """Override (with ``forward`` taking no ctx) for PyTorch 2's form."""


def _func(method):
    return method.__func__ if isinstance(method, (staticmethod, classmethod)) else method


def once_differentiable(fn):
    """Accepted for PyTorch's scripts: backward here never records a graph anyway."""
    return fn


def _as_list(x) -> list:
    return [x] if isinstance(x, Node) or x is None else list(x)


def backward(tensors, grad_tensors=None, retain_graph: bool | None = None) -> None:
    """``t.backward(g)`` for each tensor and gradient, into the leaves' ``.grad``."""
    tensors = _as_list(tensors)
    grads = _as_list(grad_tensors) if grad_tensors is not None else [None] * len(tensors)
    for k, (t, g) in enumerate(zip(tensors, grads, strict=True)):
        t.backward(g, retain_graph=bool(retain_graph) or k < len(tensors) - 1)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool | None = None,
         materialize_grads: bool = False) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs`` (leaves that require
    grad), returned rather than accumulated: every leaf's ``.grad`` is as before.

    ``create_graph=True``: the gradients are Nodes in the graph, to differentiate
    again (node/higher_order.py); ``inputs`` may then be any nodes of the graph.
    """
    inputs, outputs = _as_list(inputs), _as_list(outputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, Node) or not x.requires_grad:
            raise RuntimeError(f"grad: input {i} does not require grad")
    if create_graph:
        found = _graph_grad(outputs, inputs, grad_outputs)
    else:
        found = _leaf_grad(outputs, inputs, grad_outputs, retain_graph)
    if not allow_unused and not materialize_grads and any(g is None for g in found):
        raise RuntimeError("grad: one of the inputs was not used to compute the outputs; "
                           "pass allow_unused=True to get None for it")
    if materialize_grads:
        found = tuple(zeros_like(x) if g is None else g for x, g in zip(inputs, found))
    return found


def _leaf_grad(outputs, inputs, grad_outputs, retain_graph) -> tuple:
    """``grad`` outside the graph: a backward into the leaves, their ``.grad`` kept."""
    for i, x in enumerate(inputs):
        if not x.is_leaf:
            raise RuntimeError(f"grad: input {i} is not a leaf; gradients are kept for leaves "
                               "only here (pass the leaves it was computed from)")
    leaves = {id(x): x for x in inputs}
    for out in outputs:
        leaves.update((id(n), n) for n in topological_order(out) if n.grad_fn is None)
    held = {key: n.grad for key, n in leaves.items()}
    try:
        for n in leaves.values():
            n.grad = None
        backward(outputs, grad_outputs, retain_graph)
        found = tuple(x.grad for x in inputs)
    finally:
        for key, n in leaves.items():
            n.grad = held[key]
    return found


def _graph_grad(outputs, inputs, grad_outputs) -> tuple:
    """``grad(create_graph=True)``: every gradient a Node recorded in the graph."""
    seeds = _as_list(grad_outputs) if grad_outputs is not None else [None] * len(outputs)
    seeds = [_seed(out, g) for out, g in zip(outputs, seeds, strict=True)]
    found = graph_gradients(outputs, seeds)
    return tuple(found.get(x) for x in inputs)


def _seed(out: Node, g) -> Node:
    """The gradient a backward starts from at ``out``: ``g``, or 1 for one element."""
    if g is not None:
        if tuple(g.shape) != out.shape:
            raise RuntimeError(f"grad: grad_outputs has shape {tuple(g.shape)}, the output "
                               f"has {out.shape}")
        return g if isinstance(g, Node) else Node(g)
    if out.numel() != 1:
        raise RuntimeError(f"grad can be implicitly created only for one-element outputs, "
                           f"got shape {out.shape}; pass grad_outputs=")
    return ones_like(out)


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, **_ignored) -> bool:
    """PyTorch's signature for ``mt.gradcheck`` (central differences in float64):
    ``inputs`` a tensor or a tuple; with ``raise_exception=False`` a mismatch returns
    False instead of raising. The inputs' ``.grad`` are left as they were."""
    inputs = _as_list(inputs)
    held = [x.grad if isinstance(x, Node) else None for x in inputs]
    try:
        return _gradcheck(func, inputs, eps=eps, atol=atol, rtol=rtol)
    except AssertionError:
        if raise_exception:
            raise
        return False
    finally:
        for x, g in zip(inputs, held):
            if isinstance(x, Node) and x.requires_grad:
                x.grad = g


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True, **_ignored) -> bool:
    """PyTorch's ``gradgradcheck``: the second derivatives of ``func`` at ``inputs``
    (float64), through ``grad(create_graph=True)``, against central differences of its
    first derivatives. ``grad_outputs`` (default: fixed random values) weights the
    outputs in the first backward."""
    inputs = _as_list(inputs)
    leaves = [x for x in inputs if isinstance(x, Node) and x.requires_grad]
    with enable_grad():
        outs = _as_list(func(*inputs))
    if grad_outputs is None:
        rng = np.random.default_rng(1)
        grad_outputs = [Node(from_array(rng.uniform(0.5, 1.5, o.shape))).to(o.device)
                        for o in outs]

    def first_derivatives(*xs):
        with enable_grad():
            found = grad(_as_list(func(*xs)), [x for x in xs if isinstance(x, Node)
                                                and x.requires_grad],
                         _as_list(grad_outputs), create_graph=True, allow_unused=True,
                         materialize_grads=True)
        flat = cat([g.reshape(-1) for g in found])
        # constant first derivatives (x + y) have no graph: tie them to the inputs, with
        # zero second derivatives, so that they are checked too
        return flat + sum(x.sum() * 0.0 for x in xs if isinstance(x, Node) and x.requires_grad)

    if not leaves:
        raise ValueError("gradgradcheck: no input requires grad")
    return gradcheck(first_derivatives, inputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)


from . import functional  # noqa: E402 -- it reads grad from this module

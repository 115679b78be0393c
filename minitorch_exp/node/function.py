"""Function: one differentiable operation -- its forward and its backward, side by side.

``forward(ctx, *values, **attrs)`` computes on Tensor-level values (tensors or
lazy expressions) and may stash what backward needs with
``ctx.save_for_backward``. ``backward(ctx, grad)`` returns one gradient per
input (``None`` where there is none). Non-tensor arguments (axes, shapes) are
keyword attributes, never fake tensors.

Elementwise forwards return lazy expressions and their backwards build
expressions too, so chains of them realize as single fused passes.
"""

from __future__ import annotations

import inspect

import numpy as np

from ..tensor.expr import RVALUE, Exp
from ..tensor.tensor import Tensor
from . import anomaly
from .grad_mode import _modes


class Context:
    """What one call of a Function remembers for its backward."""

    # __dict__: a user Function may keep any attribute on ctx (``ctx.alpha = alpha``)
    __slots__ = ("fn", "inputs", "needs_input_grad", "_saved", "_versions", "attrs",
                 "keeps_graph", "known_reads", "__dict__")
    freed = False  # True once backward freed what it saved (``free``)
    where = None  # under mt.detect_anomaly(): the user's line that made the op

    def __init__(self, fn, needs_input_grad: tuple, attrs: dict, keeps_graph: bool,
                 known_reads: dict | None = None):
        self.fn = fn
        self.needs_input_grad = needs_input_grad
        self.attrs = attrs
        self.keeps_graph = keeps_graph  # False when no graph is kept: nothing needs saving
        self.inputs: tuple = ()
        self._saved: tuple = ()
        self._versions: tuple = ()
        #: During forward: what the lazy inputs' trees read, by ``id`` of the tree (apply);
        #: None until a lazy value is saved.
        self.known_reads = known_reads

    @property
    def name(self) -> str:
        """The op, for messages: ``MatMul``, or ``Elementwise(mul)`` for a registry op;
        PyTorch's ``grad_fn.name()`` calls it (``FunctionName``)."""
        op = self.attrs.get("op")
        return FunctionName(self.fn.__name__ if not isinstance(op, str)
                            else f"{self.fn.__name__}({op})")

    @property
    def next_functions(self) -> tuple:
        """PyTorch's: per input, ``(its grad_fn, 0)``; ``(AccumulateGrad, 0)`` for a leaf
        that requires grad, ``(None, 0)`` for the rest. Empty once backward freed it."""
        return tuple((_grad_fn_of(x), 0) for x in self.inputs)

    def __repr__(self) -> str:
        return f"<{self.name}>"

    def save_for_backward(self, *values) -> None:
        """Keep ``values`` for backward and remember the version of every buffer they read."""
        if not self.keeps_graph:
            return
        self._saved = values
        versions = []
        for v in values:  # the everyday case, an op computed now: tensors and numbers
            if type(v) is Tensor:
                versions.append((v.storage, v.storage.version))
            elif isinstance(v, Exp) and v.kind != RVALUE:
                break
        else:
            self._versions = tuple(versions)
            return
        if self.known_reads is None:
            self.known_reads = {}
        storages = _storages(values, self.known_reads)
        self._versions = tuple((s, s.version) for s in storages)
        for v in values:  # what the output reads is among these: lazy_value need not walk
            if isinstance(v, Exp) and v.kind != RVALUE:
                self.known_reads[id(v)] = storages

    @property
    def saved_tensors(self) -> tuple:
        if self.freed:
            raise RuntimeError(
                f"{self.name}: its saved values were freed by an earlier backward(); "
                "call backward(retain_graph=True) the first time to backward twice")
        for storage, version in self._versions:
            if storage.version != version:
                raise RuntimeError(
                    f"{self.name}: a tensor saved for backward was modified in place "
                    f"after it was saved (version {version} -> {storage.version}); the "
                    "gradient would be wrong. Clone it before modifying, or modify a copy.")
        return self._saved

    def free(self) -> None:
        """Drop saved values, what the Function kept on ctx (``ctx.softmax``) *and* the
        links to inputs, so that intermediate nodes nobody else holds are collected (and
        never realized by a later write)."""
        self._saved = ()
        self._versions = ()
        self.inputs = ()
        self.__dict__.clear()
        self.freed = True


class SliceGradient:
    """What a backward rule may return for an input it read a basic-index view of:
    ``grad`` (the view's gradient) belongs at ``key`` of a zero gradient of the input's
    ``shape``. Backward writes it there in a buffer it owns (backward.py
    ``_add_slice``), so the gradients of many slices of one tensor -- an ``unbind``
    into T pieces -- cost their own sizes, not T full-size passes."""

    __slots__ = ("key", "grad", "shape", "dtype", "device")

    def __init__(self, key, grad, shape, dtype, device):
        self.key, self.grad, self.shape = key, grad, shape
        self.dtype, self.device = dtype, device

    def dense(self) -> Tensor:
        """The gradient as a full tensor of the input's shape."""
        from ..tensor import creation
        out = creation.zeros(self.shape, dtype=self.dtype, device=self.device)
        out[self.key] = self.grad
        return out


class FunctionName(str):
    """A Function's name that is also callable, so that both PyTorch's ``grad_fn.name()``
    and this project's ``grad_fn.name`` read it."""

    def __call__(self) -> str:
        return str(self)


class AccumulateGrad:
    """What ``next_functions`` shows for a leaf that requires grad: its ``variable``."""

    next_functions = ()

    def __init__(self, variable):
        self.variable = variable

    def name(self) -> str:
        return "AccumulateGrad"

    def __repr__(self) -> str:
        return "<AccumulateGrad>"


def _grad_fn_of(x):
    if not isinstance(x, _node.Node) or not x.requires_grad:
        return None
    return AccumulateGrad(x) if x.grad_fn is None else x.grad_fn


def _storages(values, known: dict) -> tuple:
    """Every Storage a value reads, walking lazy expression trees down to their tensors.

    ``known`` maps ``id(tree)`` to the storages of trees already walked (the lazy
    inputs of a Function): a chain of lazy ops then costs one step per op, not
    one walk of the whole chain.
    """
    found: dict[int, object] = {}
    stack = [v for v in values if isinstance(v, Exp)]
    visited: set[int] = set()  # inner nodes only: a tree may share subtrees
    while stack:
        e = stack.pop()
        if e.kind == RVALUE:
            found[id(e.storage)] = e.storage
        elif id(e) not in visited:
            visited.add(id(e))
            realized = getattr(e, "realized", None)  # a Scalar has none
            if realized is not None:
                stack.append(realized)
            elif id(e) in known:
                for storage in known[id(e)]:
                    found[id(storage)] = storage
            else:
                stack.extend(e.children())
    return tuple(found.values())


class Function:
    """Base class of differentiable operations; subclass and call ``MyFn.apply(...)``."""

    @staticmethod
    def forward(ctx: Context, *args, **attrs):
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad):
        raise NotImplementedError

    #: Elementwise functions return lazy expressions that may fuse with their consumers.
    lazy = False
    #: True: non-tensor arguments are keyword attributes only, and one passed positionally
    #: is refused at the call. False (user Functions, as in PyTorch): it is an input whose
    #: gradient is None, and also in ``ctx.attrs`` under its forward parameter's name.
    keyword_attributes = False
    #: A backward that only transposes its gradient may receive an unevaluated matrix
    #: product: ``(A @ B).T`` becomes ``B.T @ A.T``, written by BLAS in the right layout.
    transposes_products = False
    #: True: ``backward`` uses only methods Nodes share with expressions (``reshape``,
    #: ``@``, ``sum_to``...) and saves only its inputs or output, so with ``create_graph``
    #: it runs as written on the gradient Node, each saved tensor read as the Node it is
    #: (node/higher_order.py): one body for both levels.
    backward_on_nodes = False

    @classmethod
    def apply(cls, *args, **attrs):
        """Run ``forward`` on the inputs' values and record the op: the one place where
        every op, at any size, enters the graph. Whether its value is computed now or
        kept lazy is the forward's engine call's decision (tensor/eager.py's policy)."""
        needs, values, known, loose = [], [], {}, False
        for a in args:
            if isinstance(a, _Node):
                needs.append(a.requires_grad)
                v = a._value
                values.append(v)
                if a._reads is not None:  # lazy: what its tree reads is known already
                    known[id(v)] = a._reads
            else:
                needs.append(False)
                values.append(a)
                loose = loose or not isinstance(a, Exp)
        record = True in needs and _modes.grad
        ctx = Context(cls, tuple(needs), _named_positionals(cls, args, attrs) if loose else attrs,
                      record, known)
        out = cls.forward(ctx, *values, **attrs)
        if type(out) is Tensor:  # computed: the everyday small op
            node = _Node(out)
        else:
            if isinstance(out, _Node):
                out = out._value
            node = _node.lazy_value(out, cls.lazy and _modes.fusion, args, known)
        ctx.known_reads = None  # holds storages: not past this call (ctx lives with the graph)
        if record and out.dtype.kind == "f":  # comparisons, argmax: values, no gradient
            ctx.inputs = args
            node.requires_grad = True
            node.grad_fn = ctx
        if anomaly.this_thread.depth:  # mt.detect_anomaly(): record where; check NaN/Inf
            anomaly.check_forward(ctx, args, node)
        return node


#: Function class -> the names of its forward's positional parameters after ctx.
_POSITIONAL_NAMES: dict[type, tuple[str, ...]] = {}


def _named_positionals(cls, args, attrs: dict) -> dict:
    """``attrs`` plus each non-tensor passed positionally, under its forward parameter's
    name: a backward reads ``ctx.attrs["axis"]`` however ``axis`` was passed (PyTorch
    passes everything positionally). Elementwise's numbers fill ``*values``: no name.
    A Function with ``keyword_attributes`` refuses them instead (TypeError)."""
    names = _POSITIONAL_NAMES.get(cls)
    if names is None:
        names = _POSITIONAL_NAMES[cls] = _positional_names(cls.forward)
    if not names and not cls.keyword_attributes:
        return attrs  # Elementwise's numbers: the everyday case, kept cheap
    loose = [(i, a) for i, a in enumerate(args) if not isinstance(a, (_node.Node, Exp))]
    for i, a in loose:
        if isinstance(a, np.ndarray) and cls.__module__.startswith("minitorch_exp."):
            raise not_a_tensor(cls.__name__, i, a)  # a built-in op's input, not an attribute
    if cls.keyword_attributes:
        i, a = loose[0]
        name = names[i] if i < len(names) else "/".join(_keyword_names(cls.forward)) or "name"
        raise TypeError(f"{cls.__name__}.apply: argument {i + 1} is a {type(a).__name__} "
                        f"({a!r}), not a tensor; pass it as a keyword: {name}={a!r}")
    bound = {names[i]: a for i, a in loose if i < len(names) and names[i] not in attrs}
    return {**attrs, **bound} if bound else attrs


def not_a_tensor(op: str, i: int, found) -> TypeError:
    """The error for a NumPy array (or anything else) given where ``op`` takes a tensor."""
    what = (f"a numpy.ndarray of shape {found.shape} ({found.dtype})"
            if isinstance(found, np.ndarray) else f"a {type(found).__name__}")
    return TypeError(f"{op}: argument {i + 1} must be a tensor (Node), got {what}; make one "
                     "with mt.tensor(a) (a copy) or mt.from_numpy(a) (sharing its memory)")


def _keyword_names(forward) -> list[str]:
    params = inspect.signature(forward).parameters.values()
    return [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY]


def _positional_names(forward) -> tuple[str, ...]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    try:
        params = list(inspect.signature(forward).parameters.values())[1:]  # after ctx
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return ()
    names = []
    for p in params:
        if p.kind not in kinds:
            break
        names.append(p.name)
    return tuple(names)


# Bound last: node.py imports this module (``from . import`` resolves the cycle).
from . import node as _node  # noqa: E402
from .node import Node as _Node  # noqa: E402

"""Node: a value in the dynamic graph -- data, ``grad``, and the Function call that made it.

A Node's value is a Tensor, or a lazy expression not yet computed. Lazy values
come from elementwise ops; they are *realized* (evaluated, once, and
remembered) when something needs the numbers: a dot or reduction, ``.numpy()``,
printing, backward reaching a leaf. Laziness is invisible except in speed: a
lazy value registers with the buffers it reads, and a write into one of them
realizes it first.
"""

from __future__ import annotations

import functools
import operator
import sys

import numpy as np

from ..tensor import capture, creation, dtypes, eager
from ..tensor.engine import assign, realize
from ..tensor.expr import RVALUE, Exp, Map, as_exp
from ..tensor.ops import OPS
from ..tensor.tensor import Tensor, _is_basic_index
from ..tensor.tensor import from_numpy as tensor_from_numpy
from ..tensor.tensor import tensor as make_tensor
from .devices import default_device
from .function import _storages
from .grad_mode import is_grad_enabled

#: Longest chain of elementwise ops kept lazy before its inputs are realized
#: (bounds kernel size and recursion depth; see tests/node/test_fusion.py).
MAX_FUSED_OPS = 32

_backward_pass = None  # node/backward.py's backward, once Node.backward first runs


class Node:
    """A differentiable tensor, PyTorch-shaped: ``shape``, ``grad``, ``backward()``..."""

    __slots__ = ("_value", "_grad", "requires_grad", "grad_fn", "_lazy_ops", "_reads", "_guard",
                 "_grad_sink", "_retains_grad", "__weakref__")
    __array_priority__ = 200
    __hash__ = object.__hash__

    def __init__(self, value, requires_grad: bool = False):
        if not isinstance(value, Exp):
            raise TypeError(f"Node wraps a Tensor or an expression, got {type(value).__name__}")
        self._value = value
        self._grad: Node | None = None
        self.requires_grad = requires_grad
        self.grad_fn = None
        self._lazy_ops = 0
        self._reads = None  # a lazy value: the storages its tree reads (lazy_value)
        self._guard = None
        self._grad_sink = None  # set_grad_sink
        self._retains_grad = False  # retain_grad
        if requires_grad:
            _check_float(value.dtype)

    # ---- the value ----------------------------------------------------------
    @property
    def value(self) -> Tensor:
        """The realized Tensor (evaluating a lazy expression once)."""
        v = self._value
        if v.kind != RVALUE:
            t = self._value = realize(v)
            self._lazy_ops = 0
            self._reads = None
            shared = _realized_into(v, t.storage)
            if shared:
                self._guard = _KeepOnWrite(shared)
                t.storage.add_reader(self._guard)
            return t
        return v

    def __exp__(self) -> Exp:
        """The expression this Node holds, as it is (a lazy one is not computed): how
        tensor/explain.py names leaves after the Nodes holding them."""
        return self._value

    def __exp_parts__(self) -> dict:
        """Expressions this Node holds besides its value, by name: its gradient, which
        explain and debug output call ``W.grad`` after a Node named ``W``."""
        return {} if self._grad is None else {"grad": self._grad._value}

    def set_value(self, value: Tensor, *, move: bool = False, cast: bool = False) -> None:
        """Make the Tensor ``value`` this Node's value (for code that manages parameters).

        That very object is kept: one made anew over the same memory counts as a new
        value (a captured step records itself again). Its shape and dtype must be this
        Node's -- its dtype may change with ``cast`` -- and its device too unless ``move``
        (``Module.to``). nn/optim.py points
        each parameter into a flat buffer so; a user writes ``.data = t``.
        """
        if not isinstance(value, Tensor):
            raise TypeError(f"set_value takes a Tensor, got {type(value).__name__}")
        if not move:
            _checked_like(self, value, "the value")
        elif value.shape != self.shape or not cast and value.dtype != self.dtype:
            raise ValueError(f"set_value: the value of a {self.dtype.name} tensor of shape "
                             f"{self.shape} cannot become {value.dtype.name} {value.shape}")
        if value is not self._value:
            self._value = value
            self._lazy_ops, self._reads = 0, None

    def set_grad_sink(self, sink) -> None:
        """Where backward writes this leaf's next gradient while ``grad`` is None.

        ``sink.take(device)`` returns a Tensor of this Node's shape and dtype to write
        into, or None when it cannot serve ``device`` (backward then makes one, as it
        does when ``sink`` is None); ``sink.holds(value)`` tells whether a gradient's
        value lies in its memory (``grads_in_sinks``). An optimizer's flat gradient
        buffer is one (nn/optim.py ``GradSlot``).
        """
        self._grad_sink = sink

    @property
    def grad_buffer(self) -> Tensor | None:
        """The Tensor backward writes a new gradient into (None: it makes one); asked
        once per gradient started while ``grad`` is None."""
        sink = self._grad_sink
        return None if sink is None else sink.take(self._value.device)

    @property
    def grad(self) -> Node | None:
        """The gradient backward accumulated into this leaf, or into a node that
        ``retain_grad()`` asked to keep one (None until then, and for other nodes)."""
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        self._grad = None if value is None else _checked_like(self, value, ".grad")

    def retain_grad(self) -> None:
        """Keep this intermediate node's gradient in ``.grad`` when backward runs
        (accumulated by each backward, as a leaf's is); a leaf keeps one anyway."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that does not require grad")
        if not self.is_leaf:
            self._retains_grad = True

    @property
    def retains_grad(self) -> bool:
        """True for a non-leaf node after ``retain_grad()``."""
        return self._retains_grad

    def realize(self) -> Node:
        _ = self.value  # evaluates a lazy value, once
        return self

    @property
    def is_lazy(self) -> bool:
        return self._value.kind != RVALUE and getattr(self._value, "realized", None) is None

    @property
    def data(self) -> Node:
        """The value outside the graph, as PyTorch's: a new Node sharing this one's Tensor,
        with ``requires_grad=False``, so that every tensor method works on it and writes
        into it (``p.data.add_(g)``) change this Node, unrecorded. ``.value`` is the
        Tensor itself."""
        return Node(self.value)

    @data.setter
    def data(self, value) -> None:
        """Make ``value`` (same shape, dtype, device) this Node's Tensor, sharing its memory
        as PyTorch does; ``p.data += g`` ends here with the Tensor it already holds."""
        t = _checked_like(self, value, ".data").value
        if t is not self._value:
            self._value = t
            self._lazy_ops, self._reads = 0, None

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def dtype(self):
        return self._value.dtype

    @property
    def device(self):
        return self._value.device

    @property
    def ndim(self) -> int:
        return len(self._value.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return self._value.numel()

    def dim(self) -> int:
        return self.ndim

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def numpy(self, *, writable: bool | None = None) -> np.ndarray:
        """The values as a NumPy array sharing memory; read-only while the Node
        requires grad (PyTorch refuses ``.numpy()`` there: use ``.detach().numpy()``
        to write) or when ``writable=False`` (see ``Tensor.numpy``)."""
        if writable is None:
            writable = not self.requires_grad
        return self.value.numpy(writable=writable)

    def __array__(self, dtype=None, copy=None):
        return self.value.__array__(dtype, copy)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this Node's memory, no copy; refused while it requires grad,
        as PyTorch refuses (``.detach()`` first). See tensor/dlpack.py."""
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use "
                              "tensor.detach()")
        return self.value.__dlpack__(stream=stream, max_version=max_version,
                                     dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.value.__dlpack_device__()

    def item(self):
        return self.value.item()

    def tolist(self):
        return self.value.tolist()

    def detach(self) -> Node:
        """The same value outside the graph, sharing memory with this Node as in PyTorch
        (so a lazy value is realized first: writes into either show in both)."""
        return Node(self.value)

    def clone(self) -> Node:
        from . import ops
        return ops.clone(self)

    # ``to``, ``float()``, ``mm``, ``add_``...: PyTorch's spellings, in node/pytorch.py.

    def cpu(self) -> Node:
        return self.to("cpu")

    def requires_grad_(self, flag: bool = True) -> Node:
        if not self.is_leaf:
            raise RuntimeError("requires_grad_ can only change leaf nodes")
        if flag:
            _check_float(self.dtype)
        self.requires_grad = flag
        return self

    def zero_(self) -> Node:
        return self._inplace("=", 0)

    def backward(self, grad=None, retain_graph: bool = False, create_graph: bool = False
                 ) -> None:
        """Accumulate this Node's gradient into every leaf's ``.grad``; with
        ``create_graph=True`` the gradients are Nodes in the graph, to differentiate
        again (node/higher_order.py), and the graph is kept."""
        if create_graph:
            from .higher_order import accumulate_graph_gradients
            return accumulate_graph_gradients(self, grad)
        global _backward_pass  # node/backward.py imports this module: bound on first use
        if _backward_pass is None:
            from .backward import backward as _backward_pass
        _backward_pass(self, grad, retain_graph)

    def explain(self, parts=None, backward: bool = False, **options) -> str:
        """The graph around this Node, which lazy nodes fuse, and its expression;
        ``parts`` picks sections (``node/explain.py:NODE_SECTIONS``: ``plan`` and
        ``code`` show each fusion group's Plan and code), ``device=`` and
        ``backend=`` whose code. ``backward=True``: each gradient rule a
        ``backward()`` from here runs, in order, the expression it builds and the
        kernels that compute it (run into scratch: no ``.grad`` changes)."""
        from .explain import explain_node
        return explain_node(self, parts=parts, backward=backward, **options)

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extra = ""
        if self.grad_fn is not None:
            extra = f", grad_fn=<{self.grad_fn.name}>"
        elif self.requires_grad:
            extra = ", requires_grad=True"
        dev = "" if self.device.type == "cpu" else f", device='{self.device}'"
        dt = "" if self.dtype == dtypes.float32 else f", dtype={self.dtype.name}"
        return f"tensor({body}{dt}{dev}{extra})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.item())

    # ---- Python numbers from one-element tensors, as PyTorch's ----------------------
    def _scalar(self, what: str):
        if self.numel() != 1:
            raise ValueError(f"only one element tensors can be converted to Python scalars: "
                             f"{what} of a tensor of shape {self.shape}")
        return self.item()

    def __float__(self) -> float:
        return float(self._scalar("float()"))

    def __int__(self) -> int:
        return int(self._scalar("int()"))

    def __index__(self) -> int:
        """An integer tensor of one element as an index (``xs[t]``, ``range(t)``); any other
        is a TypeError, as Python's protocol wants of what is not an index."""
        if self.dtype.kind not in "biu" or self.numel() != 1:
            raise TypeError(f"only integer tensors of a single element can be converted to "
                            f"an index, got a {self.dtype.name} tensor of shape {self.shape}")
        return int(self.item())

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"`` for a 0-d tensor formats its number; any other is str()."""
        if self.ndim == 0:
            return format(self.item(), spec)
        if spec:
            raise TypeError(f"format spec {spec!r} needs a 0-d tensor, got shape {self.shape}; "
                            "format .item() of one element, or .tolist()")
        return str(self)

    # ---- in-place ops: written in place outside the graph ----------------------
    def _inplace(self, saver: str, other) -> Node:
        if is_grad_enabled() and (self.requires_grad or _needs_grad(other)):
            if saver == "=" or self.is_leaf and self.requires_grad:
                raise RuntimeError(
                    "in-place operation on a tensor that requires grad; wrap it in "
                    "`with mt.no_grad():` (e.g. a parameter update) or use an out-of-place op")
            # recorded out of place, as micrograd does: ``c += x`` rebinds the name c to a
            # new Node in the graph; other references to the old Node keep its value
            out = eager.SAVER_OPERATORS[saver](self, other)
            if out.shape != self.shape:
                raise ValueError(f"in-place {saver}: the result has shape {out.shape}, the "
                                 f"tensor {self.shape}")
            return out
        assign(self.value, other._value if isinstance(other, Node) else as_exp(other), saver)
        return self

    def __iadd__(self, other):
        return self._inplace("+=", other)

    def __isub__(self, other):
        return self._inplace("-=", other)

    def __imul__(self, other):
        return self._inplace("*=", other)

    def __itruediv__(self, other):
        return self._inplace("/=", other)

    def __setitem__(self, key, value):
        if is_grad_enabled() and (self.requires_grad or _needs_grad(value)):
            raise RuntimeError("item assignment involving a tensor that requires grad is not "
                               "recorded; do it under `with mt.no_grad():`, or build the "
                               "result with mt.where / mt.cat / mt.stack")
        key, value = index_key(key), value.value if isinstance(value, Node) else value
        if _is_basic_index(key):
            self.value[key] = value
            return
        # a mask or positions (``x[x < 0] = 0``): the Tensor level refuses, as such an index
        # selects a copy; written here on the device's array, recorded by a capture
        t = self.value
        if isinstance(value, Exp):
            value = (value if value.kind == RVALUE else realize(value)).to(t.device)
        t.storage.before_write()  # lazy values reading it are computed first
        capture.host_op(functools.partial(operator.setitem, t.array, key, value.array
                                          if isinstance(value, Exp) else value), t.storage)


def index_key(key):
    """An index with its tensors (a mask, positions) and lists as NumPy arrays, as the
    Tensor level takes them: ``x[mask]``, ``x[mask] = 0``."""
    items = key if isinstance(key, tuple) else (key,)
    converted = tuple(np.asarray(k.numpy()) if isinstance(k, (Node, Exp)) else
                      np.asarray(k) if isinstance(k, list) else k for k in items)
    return converted if isinstance(key, tuple) else converted[0]


def grads_in_sinks(nodes, values) -> bool:
    """True when each node still holds the very Tensor in ``values`` (nothing replaced
    it: ``set_value``, ``.data =``) and a gradient that its sink holds (``set_grad_sink``).

    One call for a group of parameters, reading no Node's internals outside this
    level: what an optimizer checks on every step (nn/optim.py ``FlatGroup.ready``).
    """
    for n, value in zip(nodes, values):
        grad, sink = n._grad, n._grad_sink
        if n._value is not value or grad is None or sink is None or not sink.holds(grad._value):
            return False
    return True


def _checked_like(node: Node, value, what: str) -> Node:
    """``value`` as the ``what`` (".grad", ".data") of ``node``: a Node (or Tensor) of
    its shape, dtype and device, else TypeError/ValueError naming both."""
    if isinstance(value, Tensor):
        value = Node(value)
    elif not isinstance(value, Node):
        none = "None or " if what == ".grad" else ""
        raise TypeError(f"{what} must be {none}a tensor (Node or Tensor) of the leaf's "
                        f"shape and dtype, got {type(value).__name__}")
    if value.shape != node.shape:
        raise ValueError(f"{what} of a tensor of shape {node.shape} must have shape "
                         f"{node.shape}, got {value.shape}")
    if value.dtype != node.dtype:
        raise TypeError(f"{what} of a {node.dtype.name} tensor must be {node.dtype.name}, "
                        f"got {value.dtype.name}")
    if value.device != node.device:
        raise ValueError(f"{what} of a tensor on {node.device} must be on {node.device}, "
                         f"got {value.device}")
    return value


class NotFloatError(RuntimeError, TypeError):
    """Raised when a non-float tensor is asked to require grad: PyTorch raises a
    RuntimeError there, and a TypeError is what a wrong dtype is in Python."""


def _check_float(dtype) -> None:
    if dtype.kind != "f":
        raise NotFloatError(f"only floating point tensors can require gradients, got dtype "
                            f"{dtype.name}; convert with .astype(mt.float32) first")


def _needs_grad(x) -> bool:
    return isinstance(x, Node) and x.requires_grad


class _KeepOnWrite:
    """Keeps a realized lazy value what it was when its Node's buffer is written in place.

    Realizing a lazy Node stores the result on its expression (``e.realized``),
    which other lazy trees may share: consumers not yet evaluated, values saved
    for backward, detached copies. Registered as a reader of the result's buffer,
    this gives those expressions a private copy before the first write into it
    (``y += 1``, ``y.data[...] = 0``), so laziness stays invisible
    (tests/node/test_fusion.py::test_write_into_a_realized_intermediate).
    """

    __slots__ = ("exps", "__weakref__")

    def __init__(self, exps):
        self.exps = exps

    def realize(self) -> None:
        from ..tensor.engine import evaluate_copy
        from ..tensor.expr import set_realized
        pending, self.exps = list(self.exps), ()
        pending.reverse()  # found root first; pop it first, so a dropped root frees its tree
        while pending:
            e = pending.pop()
            # Only an expression something else still holds can be read again:
            # references here are ``e``, ``pending`` when it holds e twice, and
            # getrefcount's own argument (CPython's count, as NumPy's resize uses it).
            if sys.getrefcount(e) > 2 + pending.count(e):
                set_realized(e, evaluate_copy(e.realized))


def _realized_into(e: Exp, storage) -> list:
    """The nodes of ``e`` whose remembered result lives in ``storage``."""
    found, stack = [], [e]
    while stack:
        x = stack.pop()
        r = getattr(x, "realized", None)
        if r is not None and r.kind == RVALUE and r.storage is storage:
            found.append(x)
            stack.extend(x.children())
    return found


def lazy_value(value: Exp, lazy: bool, parents, known_reads: dict) -> Node:
    """Wrap a Function's result: keep an elementwise expression lazy, or realize it now
    (and at once, with NumPy, below the fusion threshold: tensor/eager.py).

    ``known_reads``: the storages each lazy parent's tree reads, by ``id`` of the tree.
    """
    if value.kind == RVALUE:
        return Node(value)
    if not lazy:
        return Node(realize(value))
    if eager.computes_now(value):
        return Node(value).realize()  # kept on write if the tree is shared (Node.value)
    ops = 1 + sum(p._lazy_ops for p in parents if isinstance(p, Node) and p.is_lazy)
    if ops > MAX_FUSED_OPS:
        for p in parents:
            if isinstance(p, Node):
                p.realize()
        ops, known_reads = 1, {}
    reads = _storages([value], known_reads)
    for storage in reads:
        if storage.shared:  # writable from outside, unannounced: read it now
            return Node(realize(value))
    node = Node(value)
    node._lazy_ops = ops
    node._reads = reads
    for storage in reads:
        storage.add_reader(node)
    return node


def count_ops(e: Exp, limit: int) -> int:
    """Elementwise ops in a lazy tree, counting up to ``limit`` (cheap for big trees)."""
    n = 0
    stack = [e]
    while stack and n < limit:
        x = stack.pop()
        if isinstance(x, Map) and x.realized is None:
            n += 1
            stack.extend(x.args)
        elif x.kind != RVALUE and getattr(x, "realized", None) is None:
            stack.extend(x.children())
    return n


# ---- factories: Node versions of the Tensor-level ones --------------------------

def _wrap(t: Tensor, requires_grad: bool) -> Node:
    return Node(t, requires_grad=requires_grad)


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Node:
    """A new Node holding a copy of ``data`` (lists, scalars, arrays, Nodes)."""
    if isinstance(data, Node):
        data = data.numpy()
    return _wrap(make_tensor(data, dtype=dtype, device=default_device(device)), requires_grad)


def from_numpy(arr: np.ndarray, requires_grad: bool = False) -> Node:
    return _wrap(tensor_from_numpy(arr), requires_grad)


def from_dlpack(obj) -> Node:
    """A Node sharing the memory of ``obj`` (NumPy, PyTorch, CuPy, JAX...), no copy, as
    ``torch.from_dlpack``; what autograd's in-place check sees: tensor/dlpack.py."""
    from ..tensor.dlpack import from_dlpack as tensor_from_dlpack
    return Node(tensor_from_dlpack(obj))


def _factory(fn):
    def make(*shape, size=None, dtype=dtypes.float32, device=None, requires_grad=False, **kw):
        shape = shape if size is None else (size,)  # PyTorch's randn(size=(2, 3))
        return _wrap(fn(*shape, dtype=dtype, device=default_device(device), **kw),
                     requires_grad)
    make.__name__ = fn.__name__
    make.__doc__ = fn.__doc__
    return make


zeros = _factory(creation.zeros)
ones = _factory(creation.ones)
empty = _factory(creation.empty)
rand = _factory(creation.rand)
randn = _factory(creation.randn)


def full(shape, fill_value, dtype=None, device=None, requires_grad=False) -> Node:
    return _wrap(creation.full(shape, fill_value, dtype=dtype, device=default_device(device)),
                 requires_grad)


def arange(start, stop=None, step=1, dtype=None, device=None, requires_grad=False) -> Node:
    return _wrap(creation.arange(start, stop, step, dtype=dtype,
                                 device=default_device(device)), requires_grad)


def _like_factory(fn):
    def make(node, dtype=None, device=None, requires_grad=False, **kw):
        return _wrap(fn(node._value if isinstance(node, Node) else node, dtype=dtype,
                        device=device, **kw), requires_grad)
    make.__name__ = fn.__name__
    return make


zeros_like = _like_factory(creation.zeros_like)
ones_like = _like_factory(creation.ones_like)
empty_like = _like_factory(creation.empty_like)
rand_like = _like_factory(creation.rand_like)
randn_like = _like_factory(creation.randn_like)


def full_like(node, fill_value, dtype=None, device=None, requires_grad=False) -> Node:
    return _wrap(creation.full_like(node._value, fill_value, dtype=dtype, device=device),
                 requires_grad)


# ---- methods: PyTorch's names for node/ops.py's functions ------------------------------

def install_methods(ops) -> None:
    """Give Node its methods and operators: called once by node/ops.py (``ops``, which
    imports this module) when its functions exist.

    Each built-in row of the op registry (tensor/ops.py) and each reduction is a method
    (``ops.METHODS``: ``x.exp()``, ``x.maximum(y)``, ``x.max()``) and, where the row
    names one, an operator (``x + y``, ``2 - x``, ``-x``). The rest are ops' own
    functions under PyTorch's names.
    """
    for name, method in ops.METHODS.items():
        setattr(Node, name, method)
    for op in OPS.values():
        if op.builtin and op.operator is not None:
            _install_operator(op, ops)
    for name in ("logsumexp", "softmax", "log_softmax", "reshape", "view", "squeeze",
                 "unsqueeze", "flatten", "permute", "transpose", "expand", "astype", "sum_to"):
        setattr(Node, name, getattr(ops, name))
    Node.broadcast_to = ops.expand
    Node.__getitem__ = ops.getitem
    Node.__matmul__ = lambda self, other: ops.matmul(self, ops.as_node(other))
    Node.__rmatmul__ = lambda self, other: ops.matmul(ops.as_node(other), self)
    Node.T = property(lambda self: ops.permute(self, *reversed(range(self.ndim))))
    Node.mT = property(lambda self: ops.transpose(self, -2, -1))


def _install_operator(op, ops) -> None:
    if op.arity == 1:
        setattr(Node, f"__{op.operator}__", ops.FUNCTIONS[op.name])
        return
    setattr(Node, f"__{op.operator}__", _operator(ops, op.name, op.operator))
    if op.reflected:
        setattr(Node, f"__r{op.operator}__",
                _operator(ops, op.name, op.operator, reflected=True))


def _operator(ops, name: str, python_name: str, reflected: bool = False):
    """``x <op> other`` (``reflected``: ``other <op> x``) for a Node ``x``."""
    apply = ops.Elementwise.apply

    def method(self, other):
        if not isinstance(other, (Node, Exp, int, float, bool, np.ndarray, np.generic)):
            return NotImplemented
        return apply(other, self, op=name) if reflected else apply(self, other, op=name)
    method.__name__ = f"__{'r' if reflected else ''}{python_name}__"
    method.__qualname__ = f"Node.{method.__name__}"
    return method

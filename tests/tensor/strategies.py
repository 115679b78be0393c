"""Shared hypothesis strategies and NumPy-reference helpers for the Tensor-level tests.

Everything here builds *pairs*: a minitorch_exp object and the NumPy array (or
NumPy computation) it must agree with. Inputs are drawn small (at most 4 dims,
sides 0-4) but with every layout a strided tensor can have: permuted memory
order, gaps, negative steps and a non-zero offset.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
from hypothesis import strategies as st

from minitorch_exp.tensor import as_device, cpu_numpy
from minitorch_exp.tensor import exp as mt_exp
from minitorch_exp.tensor import log as mt_log
from minitorch_exp.tensor import maximum as mt_maximum
from minitorch_exp.tensor import minimum as mt_minimum
from minitorch_exp.tensor import relu as mt_relu
from minitorch_exp.tensor import sigmoid as mt_sigmoid
from minitorch_exp.tensor import sqrt as mt_sqrt
from minitorch_exp.tensor import tanh as mt_tanh
from minitorch_exp.tensor import where as mt_where

from ..devices import on_device, tolerance

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
INTS = (np.dtype(np.int32), np.dtype(np.int64))
NUMERIC = FLOATS + INTS
ALL_DTYPES = NUMERIC + (np.dtype(np.bool_),)


# ---- shapes -------------------------------------------------------------------

def shapes(min_dims: int = 0, max_dims: int = 4, min_side: int = 0, max_side: int = 4):
    """Shapes of 0-d to 4-d tensors, including size-0 and size-1 dims."""
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(tuple)


@st.composite
def broadcastable_to(draw, shape):
    """A shape that broadcasts to ``shape``: leading dims dropped, some dims set to 1."""
    lead = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.booleans()) and draw(st.booleans()) else n
                 for n in shape[lead:])


def elem_strides(arr: np.ndarray) -> tuple[int, ...]:
    return tuple(s // arr.itemsize for s in arr.strides)


def numpy_can_view(arr: np.ndarray, new) -> bool:
    """NumPy's own answer: ``reshape(copy=False)`` raises when a copy is needed."""
    try:
        np.reshape(arr, new, copy=False)
    except ValueError:
        return False
    return True


def numel(shape) -> int:
    return math.prod(shape)


# ---- values and layouts ---------------------------------------------------------

def random_values(rng: np.random.Generator, shape, dtype, lo=-3.0, hi=3.0) -> np.ndarray:
    """Values in ``[lo, hi]`` of the given dtype (bools: fair coin flips)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        return np.asarray(rng.integers(int(math.ceil(lo)), int(math.floor(hi)) + 1,
                                       size=shape)).astype(dtype)
    return np.asarray(rng.uniform(lo, hi, size=shape)).astype(dtype)


def strided_copy(arr: np.ndarray, perm, steps, pad: int = 1) -> np.ndarray:
    """A copy of ``arr`` living inside a larger buffer: memory order permuted by
    ``perm``, each dim spaced (|step| > 1) and/or reversed (step < 0), starting
    ``pad`` elements in. The result is a NumPy *view* with those strides."""
    shape = arr.shape
    buf = np.zeros(tuple(shape[p] * abs(steps[p]) + pad for p in perm), arr.dtype)
    index = []
    for p in perm:
        n, s = shape[p], steps[p]
        if s > 0:
            index.append(slice(pad, pad + n * s, s))
        else:
            index.append(slice(pad + n * -s - 1, pad - 1, s))
    view = buf[tuple(index) + (Ellipsis,)].transpose(np.argsort(perm))
    assert view.shape == shape
    view[...] = arr
    return view


@st.composite
def layouts(draw, ndim: int):
    """(perm, steps) for ``strided_copy``."""
    perm = draw(st.permutations(range(ndim)))
    steps = draw(st.lists(st.sampled_from([1, 2, -1, -2, 3]), min_size=ndim, max_size=ndim))
    return tuple(perm), tuple(steps)


@st.composite
def arrays(draw, shape, dtype, lo=-3.0, hi=3.0, strided=None):
    """A NumPy array of ``shape``; with ``strided`` (default: drawn) a non-contiguous one."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arr = random_values(rng, shape, dtype, lo, hi)
    if strided is None:
        strided = draw(st.booleans())
    if strided:
        perm, steps = draw(layouts(len(shape)))
        arr = strided_copy(arr, perm, steps)
    return arr


@st.composite
def tensor_pairs(draw, shape=None, dtype=None, lo=-3.0, hi=3.0, strided=None, device="cpu"):
    """(Tensor, ndarray) with equal values and layouts; the Tensor may be non-contiguous.

    On cpu the two share memory; on another device the Tensor holds a copy.
    """
    if shape is None:
        shape = draw(shapes())
    if dtype is None:
        dtype = draw(st.sampled_from(NUMERIC))
    arr = draw(arrays(shape, dtype, lo, hi, strided))
    return on_device(arr, device), arr


def pair_on(pair, device):
    """A ``tensor_pairs`` pair with its Tensor on ``device`` (the pair itself on cpu)."""
    arr = pair[1]
    return pair if as_device(device).type == "cpu" else (on_device(arr, device), arr)


# ---- comparing with NumPy -------------------------------------------------------

def tolerances(dtype):
    """(rtol, atol) suited to a result dtype."""
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return 1e-5, 1e-6
    if dtype.kind == "f":
        return 1e-10, 1e-12
    return 0, 0


def assert_matches(actual, expected, *, check_dtype=True, scale=1.0, rtol=None, f32=False,
                   device=None):
    """``actual`` (Tensor, Exp or array, on any device) equals the NumPy result ``expected``.

    Shapes and (by default) dtypes must agree; integers and bools exactly,
    floats to a dtype-sized tolerance (``scale`` widens the absolute part for
    results built from large intermediates; ``f32`` compares at float32
    precision, for results computed through float32 intermediates; a cuda
    ``device`` compares floats at float32-level tolerance, see tests/devices.py).
    """
    exp = np.asarray(expected)
    act = np.asarray(actual)
    assert act.shape == exp.shape, f"shape {act.shape} != NumPy's {exp.shape}"
    if check_dtype:
        assert act.dtype == exp.dtype, f"dtype {act.dtype} != NumPy's {exp.dtype}"
    if exp.dtype.kind in "biu" and act.dtype.kind in "biu":
        np.testing.assert_array_equal(act, exp)
    else:
        r, a = tolerances(act.dtype if act.dtype.kind == "f" else exp.dtype)
        if exp.dtype == np.float32 or act.dtype == np.float32 or f32:
            r, a = tolerances(np.float32)
        r, a = tolerance(device, rtol if rtol is not None else r, a)
        np.testing.assert_allclose(act, exp, rtol=r, atol=a * max(1.0, scale), equal_nan=True)


@contextlib.contextmanager
def block_size(n: int | None):
    """Run the NumPy evaluator's blocked paths with blocks of ``n`` elements.

    For hypothesis tests, where pytest's function-scoped ``monkeypatch`` cannot
    be used; ``None`` leaves the block size alone.
    """
    old = cpu_numpy.BLOCK
    if n is not None:
        cpu_numpy.BLOCK = n
    try:
        yield
    finally:
        cpu_numpy.BLOCK = old


def np_index(arr: np.ndarray, key):
    """``arr[key]`` as a NumPy *view*, also when every index is an int (then NumPy
    would return a scalar copy; an extra ``...`` keeps it a 0-d view)."""
    out = arr[key]
    if not isinstance(out, np.ndarray):
        k = key if isinstance(key, tuple) else (key,)
        out = arr[k + (Ellipsis,)]
    return out


# ---- basic index keys -------------------------------------------------------------

@st.composite
def basic_keys(draw, shape, allow_none=True, allow_ellipsis=True):
    """A basic index for ``shape``: ints, slices (any step sign), None and one Ellipsis."""
    entries = []
    for n in shape:
        kind = draw(st.sampled_from(["full", "slice", "slice", "int"] if n else ["full", "slice"]))
        if kind == "full":
            entries.append(slice(None))
        elif kind == "int":
            entries.append(draw(st.integers(-n, n - 1)))
        else:
            bound = st.none() | st.integers(-n - 2, n + 2)
            step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))
            entries.append(slice(draw(bound), draw(bound), step))
    if allow_ellipsis and draw(st.booleans()):
        # An Ellipsis standing for a run of full slices (maybe an empty run).
        p = draw(st.integers(0, len(entries)))
        q = draw(st.integers(p, len(entries)))
        if all(e == slice(None) for e in entries[p:q]):
            entries[p:q] = [Ellipsis]
    if Ellipsis not in entries:
        # Drop trailing full slices sometimes (NumPy fills them in).
        while entries and entries[-1] == slice(None) and draw(st.booleans()):
            entries.pop()
    if allow_none and len(shape) < 5:
        for _ in range(draw(st.integers(0, 2))):
            entries.insert(draw(st.integers(0, len(entries))), None)
    if len(entries) == 1 and draw(st.booleans()):
        return entries[0]
    return tuple(entries)


@st.composite
def reshape_targets(draw, shape, allow_infer=True):
    """A new shape with the same number of elements (maybe with one -1)."""
    n = numel(shape)
    if n == 0:
        new = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 3)))]
        new[draw(st.integers(0, len(new) - 1))] = 0
        return tuple(new)
    factors = []
    m, p = n, 2
    while m > 1:
        while m % p == 0:
            factors.append(p)
            m //= p
        p += 1
    ndim = draw(st.integers(0 if n == 1 else 1, 4))
    new = [1] * max(ndim, 1)
    for f in factors:
        new[draw(st.integers(0, len(new) - 1))] *= f
    if ndim == 0:
        new = []
    if new and allow_infer and draw(st.booleans()):
        new[draw(st.integers(0, len(new) - 1))] = -1
    return tuple(new)


def resolve(shape, n):
    """``shape`` with a -1 replaced, as NumPy resolves it."""
    return np.empty(n, np.int8).reshape(shape).shape


# ---- random expression trees --------------------------------------------------------

class MT:
    """The minitorch_exp spelling of each function a tree uses."""

    exp, log, sqrt, tanh, sigmoid = mt_exp, mt_log, mt_sqrt, mt_tanh, mt_sigmoid
    relu, maximum, minimum, where = mt_relu, mt_maximum, mt_minimum, mt_where

    @staticmethod
    def clip(x, lo, hi):
        return x.clip(lo, hi)

    @staticmethod
    def expand_dims(x, axis):
        return x.unsqueeze(axis)

    @staticmethod
    def squeeze(x, axis):
        return x.squeeze(axis)

    @staticmethod
    def broadcast_to(x, shape):
        return x.broadcast_to(shape)


class NP:
    """The NumPy reference for each function a tree uses."""

    exp, log, sqrt, tanh = np.exp, np.log, np.sqrt, np.tanh
    maximum, minimum, where = np.maximum, np.minimum, np.where

    @staticmethod
    def sigmoid(x):
        with np.errstate(all="ignore"):
            return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))

    @staticmethod
    def relu(x):
        return np.maximum(x, 0)

    @staticmethod
    def clip(x, lo, hi):
        return np.minimum(np.maximum(x, lo), hi)

    @staticmethod
    def expand_dims(x, axis):
        return np.expand_dims(x, axis)

    @staticmethod
    def squeeze(x, axis):
        return np.squeeze(x, axis)

    @staticmethod
    def broadcast_to(x, shape):
        return np.broadcast_to(x, shape)


class Tree:
    """A random expression: ``build(ns, leaves)`` spells it in ``MT`` or ``NP``.

    ``shape`` is its static (broadcast) shape, ``bound`` a bound on |value|,
    ``scale`` the largest bound of any node (for tolerances), ``is_int`` whether
    every value on the way is integral (so casts to ints are exact).
    """

    def __init__(self, fn, shape, bound, is_int, children=(), text="?", f32=False):
        self.fn, self.shape, self.bound, self.is_int = fn, tuple(shape), bound, is_int
        self.scale = max([bound] + [c.scale for c in children])
        self.text = text
        # A float32 value somewhere inside: a compiled evaluator may keep it in
        # float64 where NumPy rounds, so compare at float32 precision.
        self.f32 = f32 or any(c.f32 for c in children)

    def build(self, ns, leaves):
        return self.fn(ns, leaves)

    def __repr__(self):
        return self.text


class TreeInputs:
    """The leaves of one tree: NumPy arrays and the Tensors (on ``device``) with their
    values and layouts -- on cpu sharing their memory."""

    def __init__(self, device="cpu"):
        self.device = device
        self.arrays: list[np.ndarray] = []
        self.tensors: list = []

    def add(self, arr) -> int:
        self.arrays.append(arr)
        self.tensors.append(on_device(arr, self.device))
        return len(self.arrays) - 1

    def build(self, tree: Tree):
        """(minitorch_exp expression, NumPy value) for ``tree``."""
        with np.errstate(all="ignore"):
            ref = tree.build(NP, self.arrays)
        return tree.build(MT, self.tensors), ref


class Rand:
    """Choices for building a tree, from a seeded NumPy generator.

    Trees are drawn this way rather than through hypothesis's own draws: it
    gives deep, varied trees on every example (hypothesis favours tiny ones),
    and a failure still reproduces from its seed and prints its tree.
    """

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def boolean(self) -> bool:
        return bool(self.rng.integers(2))

    def permutation(self, n: int) -> tuple[int, ...]:
        return tuple(int(i) for i in self.rng.permutation(n))

    def bshape(self, shape) -> tuple[int, ...]:
        """A shape broadcastable to ``shape``."""
        lead = self.integer(0, len(shape))
        return tuple(1 if self.integer(0, 3) == 0 else n for n in shape[lead:])

    def array(self, shape, dtype, strided=None) -> np.ndarray:
        arr = random_values(self.rng, shape, dtype)
        if strided is None:
            strided = self.boolean()
        if strided:
            perm = self.permutation(len(shape))
            steps = tuple(self.choice([1, 2, -1, -2, 3]) for _ in shape)
            arr = strided_copy(arr, perm, steps)
        return arr


def _bshape(*shapes):
    return np.broadcast_shapes(*shapes)


def _leaf(r, inputs: TreeInputs, shape, dtypes=NUMERIC, strided=None) -> Tree:
    dtype = r.choice(dtypes)
    leaf_shape = r.bshape(shape)
    i = inputs.add(r.array(leaf_shape, dtype, strided))
    return Tree(lambda ns, L: L[i], leaf_shape, 3.0, dtype.kind in "iu",
                text=f"x{i}{leaf_shape}{dtype.name}", f32=dtype == np.float32)


def _scalar(r, nonzero=False):
    """A Python int in [-3, 3] or float in [-2.5, 2.5] (|s| >= 0.5 with ``nonzero``)."""
    while True:
        v = r.integer(-3, 3) if r.boolean() else round(float(r.rng.uniform(-2.5, 2.5)), 3)
        if not nonzero or abs(v) >= 0.5:
            return v


def _cond(r, inputs: TreeInputs, shape) -> Tree:
    """A bool condition built from leaves only (exact values, so no branch flips)."""
    a = _leaf(r, inputs, shape)
    op = r.choice(["<", "<=", ">", ">=", "==", "!="])
    if r.boolean():
        b = _leaf(r, inputs, shape)
        bshape = _bshape(a.shape, b.shape)
    else:
        s = r.integer(-2, 2)
        b = Tree(lambda ns, L, s=s: s, (), 2, True, text=str(s))
        bshape = a.shape
    cmp = {"<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y,
           ">=": lambda x, y: x >= y, "==": lambda x, y: x == y, "!=": lambda x, y: x != y}[op]
    cond = Tree(lambda ns, L: cmp(a.build(ns, L), b.build(ns, L)), bshape, 1, True,
                text=f"({a} {op} {b})")
    combine = r.choice(["", "", "not", "and", "or"])
    if combine == "not":
        return Tree(lambda ns, L: ~cond.build(ns, L), cond.shape, 1, True, text=f"~{cond}")
    if combine in ("and", "or"):
        other = _leaf(r, inputs, shape)
        f = (lambda x, y: x & y) if combine == "and" else (lambda x, y: x | y)
        return Tree(lambda ns, L: f(cond.build(ns, L), other.build(ns, L) > 0),
                    _bshape(cond.shape, other.shape), 1, True,
                    text=f"({cond} {combine} {other} > 0)")
    return cond


UNARY = ["neg", "abs", "relu", "tanh", "sigmoid", "exp", "log", "sqrt", "astype", "pow"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow2"]
OTHER = ["scalar", "scalar", "where", "clip", "view", "view", "view"]


def gen_tree(r, inputs: TreeInputs, shape, depth: int, dtypes=NUMERIC,
             views: bool = True, root: bool = True) -> Tree:
    """Draw a random expression of static shape broadcastable to ``shape``."""
    if depth <= 0 or (not root and r.integer(0, 5) == 0):
        return _leaf(r, inputs, shape, dtypes)
    kinds = UNARY + BINARY + [k for k in OTHER if views or k != "view"]
    kind = r.choice(kinds)

    def sub(target=shape):
        return gen_tree(r, inputs, target, depth - 1, dtypes, views, root=False)

    if kind in UNARY:
        return _unary(r, kind, sub())
    if kind in BINARY:
        return _binary(r, kind, sub(), sub())
    if kind == "scalar":
        return _with_scalar(r, sub())
    if kind == "where":
        c, a, b = _cond(r, inputs, shape), sub(), sub()
        return Tree(lambda ns, L: ns.where(c.build(ns, L), a.build(ns, L), b.build(ns, L)),
                    _bshape(c.shape, a.shape, b.shape), max(a.bound, b.bound),
                    a.is_int and b.is_int, (a, b), f"where({c}, {a}, {b})")
    if kind == "clip":
        a = sub()
        lo, hi = sorted([_scalar(r), _scalar(r)])
        return Tree(lambda ns, L: ns.clip(a.build(ns, L), lo, hi), a.shape,
                    max(abs(lo), abs(hi)), a.is_int and all(isinstance(v, int) for v in (lo, hi)),
                    (a,), f"clip({a}, {lo}, {hi})")
    return _view(r, shape, sub)


def _unary(r, kind, a: Tree) -> Tree:
    B = a.bound
    if kind == "exp" and B > 8:
        kind = "tanh"
    if kind == "pow" and B ** 3 > 1e6:
        kind = "abs"
    if kind == "neg":
        return Tree(lambda ns, L: -a.build(ns, L), a.shape, B, a.is_int, (a,), f"-{a}")
    if kind == "abs":
        return Tree(lambda ns, L: abs(a.build(ns, L)), a.shape, B, a.is_int, (a,), f"|{a}|")
    if kind == "relu":
        return Tree(lambda ns, L: ns.relu(a.build(ns, L)), a.shape, B, a.is_int, (a,),
                    f"relu({a})")
    if kind in ("tanh", "sigmoid"):
        return Tree(lambda ns, L: getattr(ns, kind)(a.build(ns, L)), a.shape, 1.0, False, (a,),
                    f"{kind}({a})")
    if kind == "exp":
        return Tree(lambda ns, L: ns.exp(a.build(ns, L)), a.shape, math.exp(B), False, (a,),
                    f"exp({a})")
    if kind in ("log", "sqrt"):
        # Positive inputs only: log(|a| + 0.5), sqrt(|a| + 0.5).
        return Tree(lambda ns, L: getattr(ns, kind)(abs(a.build(ns, L)) + 0.5), a.shape,
                    max(B + 0.5, 1.0), False, (a,), f"{kind}(|{a}| + 0.5)")
    if kind == "pow":
        k = r.choice([2, 3])
        return Tree(lambda ns, L: a.build(ns, L) ** k, a.shape, B ** k, a.is_int, (a,),
                    f"{a} ** {k}")
    # astype: to an int dtype only when the values are integral (exact).
    choices = list(NUMERIC) if a.is_int else list(FLOATS)
    dtype = r.choice(choices)
    return Tree(lambda ns, L: a.build(ns, L).astype(dtype), a.shape, B, a.is_int, (a,),
                f"{a}.astype({dtype.name})", f32=dtype == np.float32)


def _binary(r, kind, a: Tree, b: Tree) -> Tree:
    shape = _bshape(a.shape, b.shape)
    Ba, Bb = a.bound, b.bound
    if kind == "mul" and Ba * Bb > 1e6:
        kind = "add"
    both_int = a.is_int and b.is_int
    if kind in ("add", "sub"):
        f = (lambda x, y: x + y) if kind == "add" else (lambda x, y: x - y)
        return Tree(lambda ns, L: f(a.build(ns, L), b.build(ns, L)), shape, Ba + Bb, both_int,
                    (a, b), f"({a} {'+' if kind == 'add' else '-'} {b})")
    if kind == "mul":
        return Tree(lambda ns, L: a.build(ns, L) * b.build(ns, L), shape, Ba * Bb, both_int,
                    (a, b), f"({a} * {b})")
    if kind == "div":
        # Denominator kept away from 0.
        return Tree(lambda ns, L: a.build(ns, L) / (abs(b.build(ns, L)) + 0.5), shape,
                    2 * Ba, False, (a, b), f"({a} / (|{b}| + 0.5))")
    if kind in ("maximum", "minimum"):
        return Tree(lambda ns, L: getattr(ns, kind)(a.build(ns, L), b.build(ns, L)), shape,
                    max(Ba, Bb), both_int, (a, b), f"{kind}({a}, {b})")
    # pow2: a tensor exponent in (-1, 1) on a positive base.
    return Tree(lambda ns, L: (abs(a.build(ns, L)) + 0.5) ** ns.tanh(b.build(ns, L)), shape,
                max(Ba + 0.5, 2.0), False, (a, b), f"(|{a}| + 0.5) ** tanh({b})")


def _with_scalar(r, a: Tree) -> Tree:
    kind = r.choice(["radd", "add", "rsub", "sub", "mul", "rmul", "div", "rdiv"])
    s = _scalar(r, nonzero=kind == "div")
    B = a.bound
    is_int = a.is_int and isinstance(s, int)
    if kind in ("mul", "rmul") and B * abs(s) > 1e6:
        kind = "add"
    fns = {
        "radd": (lambda x: s + x, B + abs(s), is_int),
        "add": (lambda x: x + s, B + abs(s), is_int),
        "rsub": (lambda x: s - x, B + abs(s), is_int),
        "sub": (lambda x: x - s, B + abs(s), is_int),
        "mul": (lambda x: x * s, B * max(abs(s), 1), is_int),
        "rmul": (lambda x: s * x, B * max(abs(s), 1), is_int),
        "div": (lambda x: x / s, 2 * B, False),
        "rdiv": (lambda x: s / (abs(x) + 0.5), 2 * abs(s) + 1, False),
    }
    f, bound, res_int = fns[kind]
    return Tree(lambda ns, L: f(a.build(ns, L)), a.shape, bound, res_int, (a,),
                f"{kind}({a}, {s!r})")


def _view(r, shape, sub) -> Tree:
    """A view of an expression whose result has (static) shape ``shape``.

    The child is drawn for the pre-view shape and, when its own static shape is
    smaller, broadcast to it first -- itself a view of an expression.
    """
    ndim = len(shape)
    kinds = ["reshape", "squeeze", "broadcast", "expand"]
    if ndim >= 2:
        kinds += ["permute", "T", "transpose"]
    if any(n == 1 for n in shape):
        kinds.append("unsqueeze")
    kind = r.choice(kinds)

    def child(before) -> Tree:
        a = sub(before)
        if a.shape == tuple(before):
            return a
        return Tree(lambda ns, L: ns.broadcast_to(a.build(ns, L), before), before, a.bound,
                    a.is_int, (a,), f"{a}.broadcast_to{tuple(before)}")

    def node(a: Tree, fn, what: str) -> Tree:
        return Tree(lambda ns, L: fn(ns, a.build(ns, L)), shape, a.bound, a.is_int, (a,),
                    f"{a}.{what}")

    if kind in ("permute", "T", "transpose"):
        if kind == "T":
            perm = tuple(reversed(range(ndim)))
        elif kind == "transpose":
            i, j = r.integer(0, ndim - 1), r.integer(0, ndim - 1)
            perm = list(range(ndim))
            perm[i], perm[j] = perm[j], perm[i]
            perm = tuple(perm)
        else:
            perm = tuple(r.permutation(ndim))
        inv = np.argsort(perm)
        a = child(tuple(shape[inv[d]] for d in range(ndim)))

        def permuted(ns, x):
            if kind == "T":
                return x.T
            if kind == "transpose":
                return x.transpose(i, j) if ns is MT else np.swapaxes(x, i, j)
            return x.permute(*perm) if ns is MT else x.transpose(perm)
        return node(a, permuted, f"{kind}{perm}")
    if kind == "reshape":
        a = child((numel(shape),))
        return node(a, lambda ns, x: x.reshape(shape), f"reshape{shape}")
    if kind == "unsqueeze":
        axis = r.choice([d for d, n in enumerate(shape) if n == 1])
        a = child(shape[:axis] + shape[axis + 1:])
        return node(a, lambda ns, x: ns.expand_dims(x, axis), f"unsqueeze({axis})")
    if kind == "squeeze":
        axis = r.integer(0, ndim)
        a = child(shape[:axis] + (1,) + shape[axis:])
        return node(a, lambda ns, x: ns.squeeze(x, axis), f"squeeze({axis})")
    # broadcast / expand: a smaller child stretched to ``shape``.
    a = child(r.bshape(shape))
    if kind == "broadcast":
        return node(a, lambda ns, x: ns.broadcast_to(x, shape), f"broadcast_to{shape}")
    lead = len(shape) - len(a.shape)
    spec = tuple(-1 if d >= lead and a.shape[d - lead] == n and r.boolean() else n
                 for d, n in enumerate(shape))
    return node(a, lambda ns, x: x.expand(*spec) if ns is MT else np.broadcast_to(x, shape),
                f"expand{spec}")


def case_on(case, device):
    """An ``expr_cases`` case with its expression rebuilt over copies of its leaves on
    ``device`` (the case itself on cpu), so one drawn tree runs on every device."""
    if as_device(device).type == "cpu":
        return case
    _, ref, tree, inputs = case
    moved = TreeInputs(device)
    for arr in inputs.arrays:
        moved.add(arr)
    return tree.build(MT, moved.tensors), ref, tree, moved


@st.composite
def expr_cases(draw, max_depth: int = 5, shape=None, dtypes=NUMERIC, views: bool = True,
               max_side: int = 3, device="cpu"):
    """(expression, NumPy value, tree, inputs) for a random tree over random leaves,
    the expression's leaves on ``device``."""
    if shape is None:
        # Mostly non-empty: a size-0 dim anywhere makes the whole tree empty.
        side = st.sampled_from(list(range(1, max_side + 1)) * 3 + [0])
        shape = tuple(draw(st.lists(side, max_size=4)))
    r = Rand(draw(st.integers(0, 2**32 - 1)))
    inputs = TreeInputs(device)
    tree = gen_tree(r, inputs, shape, r.integer(1, max_depth), dtypes, views)
    e, ref = inputs.build(tree)
    return e, ref, tree, inputs

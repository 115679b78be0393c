"""The op registry: this project's ``F<op>``, and the one place its op surface is declared.

Every elementwise op -- built-in or user-defined -- is one ``OpDef`` with:

* ``numpy``: ``f(*arrays, out=None)``, used by the NumPy block evaluator;
* ``py``: a per-element Python expression template (``{0}``, ``{1}`` are the
  operands), inlined into numba kernels; ``None`` means "call the NumPy
  implementation on scalars";
* ``cuda``: a per-element CUDA C expression template (``{T}`` is the compute type);
* ``result``: how the output dtype follows from the operands' dtypes;
* ``derivative``: ``d(g, out, *args) -> tuple`` of gradient expressions, one per
  operand (``None`` where there is no gradient), written with the same ops, so
  backward passes fuse exactly like forward ones.

A built-in row (``define_builtin``) is also the op's whole public surface: the Exp
method and operator (tensor/expr.py ``_install_exp_surface``), ``T.<name>``
(expr.py ``FUNCTIONS``), ``mt.<name>`` (node/ops.py ``FUNCTIONS``) and the Node method
and operator (node/node.py ``install_methods``) are generated from it, so adding
a built-in is one row. Each reduction is likewise one ``ReduceDef`` in ``REDUCTIONS``.

User ops go through ``register_op``, which validates the name and the CUDA
snippet before either can reach generated source; they are called by name
(``apply_op``, ``mt.op``) and get no methods.
"""

from __future__ import annotations

import keyword
import re
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import caches, dtypes


@dataclass(frozen=True)
class OpDef:
    name: str
    arity: int
    numpy: Callable
    cuda: str
    py: str | None = None
    result: str = "promote"  # promote | float | bool | where
    derivative: Callable | None = None
    builtin: bool = True
    #: The operand names of its ``T.*`` and ``mt.*`` functions (empty: by arity, below).
    params: tuple[str, ...] = ()
    #: The Python operator it is: ``"add"`` gives ``__add__`` (and ``__radd__`` when
    #: ``reflected``); None: none.
    operator: str | None = None
    reflected: bool = False
    #: ``check(*operands)``, run when the op is built (pow: NumPy's integer-power rule);
    #: it refuses cases of integer operands only (an op on floats computed at once skips it).
    check: Callable | None = None
    #: ``partials[i](g, out, *operands)``: operand ``i``'s gradient alone, for rules whose
    #: gradients each cost a pass (``derivative`` still gives them all): backward computes
    #: only those an input needs, as PyTorch's ``needs_input_grad`` (``gradients``).
    partials: tuple[Callable, ...] | None = None
    #: ns per float32 element of (one compiled loop, NumPy's block pass), measured by
    #: ``benchmarks/bench_update.py --ops``: they decide from how many elements a Plan
    #: runs faster on the NumPy evaluator (``cpu_numba.numpy_from``). None: arithmetic's
    #: (``ARITHMETIC_COST_NS``); a row whose kernel calls a function states its own
    #: (tests/test_op_surface.py holds every such row to it).
    cost_ns: tuple[float, float] | None = None
    #: Whether NumPy's form runs far behind one compiled loop on thousands of elements,
    #: so that an op computed at once uses the loop there (``Backend.flat_loop``).
    numpy_slow: bool = False

    @property
    def operands(self) -> tuple[str, ...]:
        return self.params or _OPERAND_NAMES[self.arity]

    @property
    def method_params(self) -> tuple[str, ...]:
        """Its method's parameters: ``x.maximum(other)``, ``x.clip(lo, hi)``."""
        return ("self", "other") if self.arity == 2 else ("self", *self.operands[1:])

    def gradients(self, g, out, operands, needs) -> tuple:
        """The operands' gradients where ``needs`` says (None elsewhere); all of them
        where the row has no ``partials``. ``x * 2.0`` needs no gradient for 2.0, and
        ``w * x`` none for the data ``x``: a pass each, saved."""
        if self.partials is None or False not in needs:
            return self.derivative(g, out, *operands)
        if len(needs) == 2:  # the everyday case, written out: every op of backward asks
            a, b = self.partials
            return (a(g, out, *operands) if needs[0] else None,
                    b(g, out, *operands) if needs[1] else None)
        return tuple([p(g, out, *operands) if need else None
                      for p, need in zip(self.partials, needs)])

    def result_dtype(self, operands: list) -> np.dtype:
        """``operands``: dtypes, or Python values for weak scalars."""
        if self.result == "bool":
            return dtypes.bool_
        if self.result == "where":
            return dtypes.result_type(*operands[1:])
        promoted = dtypes.result_type(*operands)
        if promoted == dtypes.bool_ and self.name in ("sub", "neg"):
            # NumPy refuses these too; every backend should, not only the NumPy one.
            raise TypeError(f"{self.name}: cannot {'subtract' if self.name == 'sub' else 'negate'}"
                            " bool operands; use != (xor) or ~ (not), or .astype() first")
        return dtypes.float_result(promoted) if self.result == "float" else promoted

    def compute_dtype(self, operands: list) -> np.dtype:
        """The dtype the operands are converted to before the op runs per element."""
        if self.result == "bool":  # comparisons compare in the promoted input dtype
            return dtypes.result_type(*operands)
        return self.result_dtype(operands)


_OPERAND_NAMES = {1: ("x",), 2: ("a", "b"), 3: ("x", "y", "z")}


def named_function(fn: Callable, name: str, params: tuple[str, ...], doc: str,
                   owner: str | None = None) -> Callable:
    """``fn``, made for a row, as the function (or ``owner``'s method) ``name``: its first
    parameters renamed ``params`` (``fn(a, b, c)`` becomes ``where(cond, a, b)``), so its
    signature, ``help()`` and keyword calls read as if it were written out."""
    code = fn.__code__
    fn.__code__ = code.replace(co_varnames=params + code.co_varnames[len(params):])
    fn.__name__ = name
    fn.__qualname__ = f"{owner}.{name}" if owner else name
    fn.__doc__ = doc
    return fn


OPS: dict[str, OpDef] = {}
#: ``OpDef.cost_ns`` of plain arithmetic, which both evaluators vectorize.
ARITHMETIC_COST_NS = (0.05, 0.3)


def define_builtin(name: str, arity: int, numpy_fn: Callable, cuda: str, py: str | None = None,
                   **fields) -> OpDef:
    """Add a built-in row (``fields``: the rest of ``OpDef``'s). Read when the package is
    imported: every surface of the op is generated from the row (module docstring)."""
    if name in OPS:
        raise ValueError(f"an op named {name!r} is already registered")
    OPS[name] = OpDef(name, arity, numpy_fn, cuda, py, **fields)
    return OPS[name]


def _where(c, a, b, out=None):
    if out is None:
        return np.where(c, a, b)
    np.copyto(out, b, casting="unsafe")
    np.copyto(out, a, casting="unsafe", where=np.broadcast_to(np.asarray(c, bool), out.shape))
    return out


def _relu(x, out=None):
    if type(x) is np.ndarray and x.ndim:
        # NumPy's maximum runs a scalar loop against a scalar 0 and its SIMD loop against
        # an array of zeros, faster even with the zeros made (docs/eager.md, "Rows NumPy
        # runs slowly"); the same IEEE maximum either way (nan stays nan, -0.0 gives 0.0)
        return np.maximum(x, np.zeros(x.shape, x.dtype), out=out)
    return np.maximum(x, 0, out=out)


def _sigmoid(x, out=None):
    """``1 / (1 + e)`` where ``x >= 0``, else ``e / (1 + e)``, with ``e = exp(-|x|)``, which
    never overflows: the kernels' two forms. The numerator is ``max(e, x >= 0)``, as ``e``
    is at most 1; NaN stays NaN. A third less time than selecting it with ``np.where``
    (docs/eager.md, "Rows NumPy runs slowly")."""
    if type(x) is not np.ndarray or not x.ndim or x.dtype.kind != "f":
        e = np.exp(-np.abs(x))
        return np.divide(np.where(np.asarray(x) >= 0, 1, e), 1 + e, out=out, casting="unsafe")
    e = np.abs(x)
    np.negative(e, out=e)
    np.exp(e, out=e)
    num = np.greater_equal(x, 0).astype(x.dtype)
    np.maximum(num, e, out=num)
    e += 1
    return np.divide(num, e, out=out, casting="unsafe")


def _clip(x, lo, hi, out=None):
    return np.minimum(np.maximum(x, lo), hi, out=out)


def _pow(a, b, out=None):
    """``np.power`` with pow's results throughout:

    * a float raised to the Python number 2 or 3 is multiplied out, as PyTorch does:
      NumPy's float32 pow is a slow loop next to one or two multiplies (docs/eager.md,
      "Rows NumPy runs slowly");
    * for a scalar exponent of 0.5 NumPy takes a square root instead, which gives nan
      at -inf and -0.0 at -0.0, where pow (the compiled kernels', and NumPy's with an
      array exponent) gives inf and 0.0: those two are put right."""
    if type(b) in (int, float) and b in (2, 3) and getattr(a, "dtype", None) is not None \
            and a.dtype.kind == "f":
        square = np.multiply(a, a, out=out if b == 2 else None)  # out may be a's memory
        return square if b == 2 else np.multiply(square, a, out=out)
    if not _is_scalar_half(b):
        return np.power(a, b, out=out)
    root = np.power(a, b)
    return np.add(np.where(np.equal(a, -np.inf), np.inf, root), 0.0, out=out)  # -0.0 + 0.0: 0.0


def _is_scalar_half(b) -> bool:
    """Whether ``b`` is an exponent NumPy's power treats as a square root: 0.5 as a
    number (a NumPy scalar too) or a one-element float array (broadcast, it is read with
    stride 0)."""
    if isinstance(b, (float, np.floating)):
        return b == 0.5
    return type(b) is np.ndarray and b.size == 1 and b.dtype.kind == "f" and b.flat[0] == 0.5


# ---- derivatives: each next to the op it belongs to (see module docstring) ----
# They build gradients with expr.py's functions (``where``, ``log``...), which are
# made from these rows: so expr.py hands them over once it is built
# (``use_expressions``) and this module imports nothing above ``dtypes``.
# A built-in rule also runs on NumPy arrays (tensors) and Python numbers: the Node
# level computes ops below its fusion threshold at once (tensor/eager.py), backward too.

_EXPRESSIONS: list = []


def use_expressions(forms) -> None:
    """Called by expr.py once it is built: ``forms`` holds ``Exp``, ``Scalar`` and
    ``T.<name>`` for each row, what the derivatives build gradients with."""
    _EXPRESSIONS[:] = [forms]


def _expr():
    return _EXPRESSIONS[0]


class _RowForms:
    """Each row's NumPy form by name (``ROW_FORMS.where(c, a, b)``)."""

    def __getattr__(self, name: str) -> Callable:
        return OPS[name].numpy


ROW_FORMS = _RowForms()


def _e(g):
    """Where a derivative finds ``where``, ``log``, ``sign``...: for an expression
    gradient ``g``, expr's functions, building the backward pass's trees; for an
    array, each row's own NumPy form; for a value type that names its own
    (``rule_forms``: a Node, in a backward that records), those."""
    if type(g) is np.ndarray:  # computed at once: the everyday case, first
        return ROW_FORMS
    e = _expr()
    if isinstance(g, e.Exp):
        return e
    return getattr(type(g), "rule_forms", ROW_FORMS)


def _number(x):
    """The value of a Python-number operand (a weak Scalar in an expression, the
    number itself beside arrays); None for a tensor."""
    if type(x) is _expr().Scalar:
        return x.value
    return x if type(x) in (int, float, bool) else None


def check_power(base, exponent) -> None:
    """NumPy's rule, applied when the op is built: an integer or bool base to a negative
    integer power (a number known now) is a ValueError; an integer cannot hold 1/2."""
    value = exponent.value if type(exponent) is _expr().Scalar else exponent
    if isinstance(value, (int, np.integer)) and value < 0 and base.dtype.kind in "biu":
        raise ValueError(f"pow: Integers to negative integer powers are not allowed (NumPy's "
                         f"rule): a {base.dtype.name} base to the power {value}; make the "
                         f"base float first, e.g. x.astype('float32') ** {value}")


def _d_add(g, out, a, b):
    return g, g


# sub, mul and div give each operand's gradient alone too (``partials``): each costs a
# pass, and ``x * 2.0`` needs one. Their ``derivative`` calls both partials directly:
# backward calls it for the everyday op whose operands both need a gradient, where
# going through ``gradients``' loop over the partials showed in a small chain's backward
# (docs/eager.md, "How an op is computed at once").

def _d_passes(g, out, a, b):
    return g


def _d_sub_b(g, out, a, b):
    return -g


def _d_sub(g, out, a, b):
    return g, _d_sub_b(g, out, a, b)


def _d_mul_a(g, out, a, b):
    return g * b


def _d_mul_b(g, out, a, b):
    return g * a


def _d_mul(g, out, a, b):
    return _d_mul_a(g, out, a, b), _d_mul_b(g, out, a, b)


def _d_div_a(g, out, a, b):
    return g / b


def _d_div_b(g, out, a, b):
    return -g * out / b


def _d_div(g, out, a, b):
    return _d_div_a(g, out, a, b), _d_div_b(g, out, a, b)


def _d_pow(g, out, a, b):
    # PyTorch's rules (a Python number operand gets no gradient):
    e = _e(g)
    ga = None if _number(a) is not None else _d_pow_base(e, g, a, b)
    gb = None if _number(b) is not None else _d_pow_exponent(e, g, out, a, b)
    return ga, gb


def _d_pow_base(e, g, a, b):
    """``b * a ** (b - 1)``, and 0 where ``b == 0`` (``x ** 0`` is flat, even at 0)."""
    n = _number(b)
    if n is not None:
        if n == 2:  # a ** 1 is a, without pow's cost
            return g * 2 * a
        return g * 0.0 if n == 0 else g * n * e.pow(a, n - 1)  # NumPy's ** takes sqrt for 0.5
    return e.where(b == 0, 0, g * b * e.pow(a, b - 1))


def _d_pow_exponent(e, g, out, a, b):
    """``a ** b * log(a)`` (nan for a < 0), and 0 where ``a == 0`` and ``b >= 0``."""
    n = _number(a)
    if n is not None:  # log computed here: a weak number keeps g's dtype
        with np.errstate(all="ignore"):
            log_a = float(np.log(n))
        return g * e.where(b >= 0, 0, out * log_a) if n == 0 else g * out * log_a
    return g * e.where((a == 0) & (b >= 0), 0, out * e.log(a))


def _d_neg(g, out, a):
    return (-g,)


def _d_abs(g, out, a):
    e = _e(g)
    return (g * e.where(a == a, e.sign(a), 0),)  # PyTorch's sgn: 0 at nan


def _d_exp(g, out, a):
    return (g * out,)


def _d_log(g, out, a):
    return (g / a,)


def _d_sqrt(g, out, a):
    return (g * 0.5 / out,)


def _d_tanh(g, out, a):
    return (g * (1 - out * out),)


def _d_sigmoid(g, out, a):
    return (g * out * (1 - out),)


def _d_relu(g, out, a):
    if type(g) is np.ndarray and np.isfinite(g).all():  # on arrays, computed at once:
        # g times the mask is faster than where (docs/eager.md, "Rows NumPy runs slowly"),
        # and as exact where g is finite (an infinite g times 0 would be nan); a 0 comes
        # out signed as g, -0.0 == 0.0
        return (np.multiply(g, np.logical_not(np.less_equal(a, 0))),)
    return (_e(g).where(a <= 0, 0, g),)  # as PyTorch: nan passes the gradient on


def _d_maximum(g, out, a, b):
    # PyTorch's rule: half each at a tie, none to the smaller; a nan operand compares
    # false both ways, so both sides get the whole gradient
    e = _e(g)
    half = e.where(a == b, g * 0.5, g)
    return e.where(a < b, 0, half), e.where(b < a, 0, half)


def _d_minimum(g, out, a, b):
    e = _e(g)
    half = e.where(a == b, g * 0.5, g)
    return e.where(a > b, 0, half), e.where(b > a, 0, half)


def _d_where(g, out, c, a, b):
    e = _e(g)
    return None, e.where(c, g, 0), e.where(c, 0, g)


def _d_clip(g, out, x, lo, hi):
    # As torch.clamp: x gets g only where lo <= x <= hi holds, so a NaN x or a NaN
    # bound gets 0; a bound gets g where the value is that bound (hi when lo > hi).
    e = _e(g)
    inside = (x >= lo) & (x <= hi)
    return (e.where(inside, g, 0), e.where((x < lo) & (lo < hi), g, 0),
            e.where((x > hi) | (hi < lo), g, 0))


def _no_grad(g, out, *args):
    return tuple(None for _ in args)


_NAN_MAX = "(({0} > {1} || {0} != {0}) ? {0} : {1})"
_NAN_MIN = "(({0} < {1} || {0} != {0}) ? {0} : {1})"
_PY_NAN_MAX = "({0} if ({0} > {1} or {0} != {0}) else {1})"
_PY_NAN_MIN = "({0} if ({0} < {1} or {0} != {0}) else {1})"

define_builtin("add", 2, np.add, "({0} + {1})", "({0} + {1})", derivative=_d_add,
               operator="add", reflected=True)
define_builtin("sub", 2, np.subtract, "({0} - {1})", "({0} - {1})", derivative=_d_sub,
               partials=(_d_passes, _d_sub_b),
               operator="sub", reflected=True)
define_builtin("mul", 2, np.multiply, "({0} * {1})", "({0} * {1})", derivative=_d_mul,
               partials=(_d_mul_a, _d_mul_b),
               operator="mul", reflected=True)
define_builtin("div", 2, np.true_divide, "({0} / {1})", "({0} / {1})", result="float",
               derivative=_d_div, partials=(_d_div_a, _d_div_b), operator="truediv",
               reflected=True)
#: The savers of an assignment, and the binary row each in-place one applies: ``dst += e``
#: writes ``add(dst, e)``. Every evaluator spells a saver through its row -- the NumPy
#: ufunc, the Python and CUDA templates, the Python operator -- so this is the one table.
SAVER_ROWS = {"+=": "add", "-=": "sub", "*=": "mul", "/=": "div"}
SAVERS = ("=", *SAVER_ROWS)

define_builtin("pow", 2, _pow, "pow({0}, {1})", "({0} ** {1})", derivative=_d_pow,
               operator="pow", reflected=True, check=check_power, cost_ns=(8.8, 1.0))
define_builtin("maximum", 2, np.maximum, _NAN_MAX, _PY_NAN_MAX, derivative=_d_maximum)
define_builtin("minimum", 2, np.minimum, _NAN_MIN, _PY_NAN_MIN, derivative=_d_minimum)
define_builtin("neg", 1, np.negative, "(-{0})", "(-{0})", derivative=_d_neg, operator="neg")
define_builtin("abs", 1, np.abs, "({0} < ({T})0 ? -{0} : {0})", "abs({0})", derivative=_d_abs,
               operator="abs")
# NaN propagates through sign and relu, as in NumPy (``x != x`` only for NaN).
define_builtin("sign", 1, np.sign,
               "({0} != {0} ? {0} : ({T})(({0} > ({T})0) - ({0} < ({T})0)))",
               "({0} if {0} != {0} else ({0} > 0) - ({0} < 0))", derivative=_no_grad,
               numpy_slow=True)
define_builtin("exp", 1, np.exp, "exp({0})", "math.exp({0})", result="float",
               derivative=_d_exp, cost_ns=(3.9, 0.75))
define_builtin("log", 1, np.log, "log({0})", "_log({0})", result="float", derivative=_d_log,
               cost_ns=(4.2, 0.75))
define_builtin("sqrt", 1, np.sqrt, "sqrt({0})", "_sqrt({0})", result="float",
               derivative=_d_sqrt, cost_ns=ARITHMETIC_COST_NS, numpy_slow=True)
define_builtin("tanh", 1, np.tanh, "tanh({0})", "math.tanh({0})", result="float",
               derivative=_d_tanh, cost_ns=(17.0, 0.5))
define_builtin(
    "sigmoid", 1, _sigmoid,
    "({0} >= ({T})0 ? ({T})1 / (({T})1 + exp(-{0})) : exp({0}) / (({T})1 + exp({0})))",
    "(1.0 / (1.0 + math.exp(-{0})) if {0} >= 0 else math.exp({0}) / (1.0 + math.exp({0})))",
    result="float", derivative=_d_sigmoid, cost_ns=(8.8, 5.4))
define_builtin("relu", 1, _relu, "(!({0} <= ({T})0) ? {0} : ({T})0)",
               "({0} if not ({0} <= 0) else 0)", derivative=_d_relu, numpy_slow=True)
for _name, _ufunc, _sym in [("eq", np.equal, "=="), ("ne", np.not_equal, "!="),
                            ("lt", np.less, "<"), ("le", np.less_equal, "<="),
                            ("gt", np.greater, ">"), ("ge", np.greater_equal, ">=")]:
    define_builtin(_name, 2, _ufunc, f"({{0}} {_sym} {{1}})", f"({{0}} {_sym} {{1}})",
                   result="bool", derivative=_no_grad, operator=_name)
define_builtin("logical_and", 2, np.logical_and, "({0} && {1})", "({0} and {1})",
               result="bool", derivative=_no_grad, operator="and")
define_builtin("logical_or", 2, np.logical_or, "({0} || {1})", "({0} or {1})", result="bool",
               derivative=_no_grad, operator="or")
define_builtin("logical_not", 1, np.logical_not, "(!{0})", "(not {0})", result="bool",
               derivative=_no_grad, operator="invert")
define_builtin("where", 3, _where, "({0} ? {1} : {2})", "({1} if {0} else {2})",
               result="where", derivative=_d_where, params=("cond", "a", "b"),
               cost_ns=(0.1, 6.7), numpy_slow=True)
define_builtin("clip", 3, _clip,
               "(" + _NAN_MIN.format(_NAN_MAX.format("{0}", "{1}"), "{2}") + ")",
               _PY_NAN_MIN.format(_PY_NAN_MAX.format("{0}", "{1}"), "{2}"), derivative=_d_clip,
               params=("x", "lo", "hi"))


def _erf(x, out=None):
    # NumPy has no erf; math.erf (the C library's, as the numba and CUDA kernels
    # use) made into a ufunc by numba, compiled on first use.
    ufunc = _ERF.get("ufunc")
    if ufunc is None:
        import math

        import numba
        ufunc = _ERF["ufunc"] = numba.vectorize(
            ["float32(float32)", "float64(float64)"])(lambda v: math.erf(v))
    return ufunc(x) if out is None else ufunc(x, out=out)


_ERF: dict = {}


def _d_erf(g, out, a):
    return (g * (2.0 / np.sqrt(np.pi)) * _e(g).exp(-(a * a)),)


define_builtin("erf", 1, _erf, "erf({0})", "math.erf({0})", result="float",
               derivative=_d_erf, cost_ns=(14.8, 14.7))


def _d_sin(g, out, a):
    return (g * _e(g).cos(a),)


def _d_cos(g, out, a):
    return (-g * _e(g).sin(a),)


def _d_tan(g, out, a):
    return (g * (1 + out * out),)


define_builtin("sin", 1, np.sin, "sin({0})", "math.sin({0})", result="float",
               derivative=_d_sin, cost_ns=(7.1, 0.85))
define_builtin("cos", 1, np.cos, "cos({0})", "math.cos({0})", result="float",
               derivative=_d_cos, cost_ns=(7.1, 0.85))
define_builtin("tan", 1, np.tan, "tan({0})", "math.tan({0})", result="float",
               derivative=_d_tan, cost_ns=(14.5, 0.7))


def _d_log1p(g, out, a):
    return (g / (1 + a),)


def _d_expm1(g, out, a):
    return (g * (out + 1),)


def _rsqrt(x, out=None):
    return np.divide(1, np.sqrt(x), out=out)


def _d_rsqrt(g, out, a):
    return (g * -0.5 * out * out * out,)


define_builtin("log1p", 1, np.log1p, "log1p({0})", "np.log1p({0})", result="float",
               derivative=_d_log1p, cost_ns=(13.0, 1.0))
define_builtin("expm1", 1, np.expm1, "expm1({0})", "np.expm1({0})", result="float",
               derivative=_d_expm1, cost_ns=(13.5, 0.6))
define_builtin("rsqrt", 1, _rsqrt, "rsqrt({0})", "({T}(1) / _sqrt({0}))", result="float",
               derivative=_d_rsqrt, cost_ns=ARITHMETIC_COST_NS)


def _round(x, out=None):
    """Halves to even (NumPy's and PyTorch's round); integers as they are."""
    return np.round(x, out=out)


def _d_flat(g, out, a):
    """Rounding is flat almost everywhere: a zero gradient of ``g``'s dtype and shape, as
    PyTorch's (``g * 0`` would be nan where ``g`` is infinite)."""
    return (_e(g).where(True, 0.0, g),)


# floor, ceil, trunc and round keep an integer as it is (NumPy 2, PyTorch). CUDA has no
# device floor(int), and rint of an int64 would go through a double: where the compute
# type {T} is an integer (0.5 converts to 0) the operand is the result; the float branch
# multiplies by 1.0f, which is exact and keeps -0.0, so that it type-checks for ints too.
_INTEGER = "({T})0.5 == ({T})0"
for _name, _numpy, _c in [("floor", np.floor, "floor"), ("ceil", np.ceil, "ceil"),
                          ("trunc", np.trunc, "trunc"), ("round", _round, "rint")]:
    define_builtin(_name, 1, _numpy, f"({_INTEGER} ? {{0}} : ({{T}}){_c}({{0}} * 1.0f))",
                   f"({{0}} if {{T}}(0.5) == 0 else {{T}}(np.{_c}({{0}})))",
                   derivative=_d_flat, cost_ns=ARITHMETIC_COST_NS)  # vectorized as it is


# ---- reductions ------------------------------------------------------------------

@dataclass(frozen=True)
class ReduceDef:
    """A reduction: all that tells ``sum``, ``mean``, ``max``, ``min`` and ``argmax`` apart.

    Its Exp and Node methods are ``name`` (``x.max()``), its ``T.*`` and ``mt.*``
    functions ``function`` (PyTorch's ``amax``); a ``Reduce`` node's ``op`` is ``name``.
    """

    name: str
    function: str
    #: NumPy's own, ``f(values, axis=, keepdims=)``: what every backend must agree with.
    numpy: Callable
    #: The row of ``OPS`` that folds a value into an accumulator, and partial results
    #: together; None: no compiled kernel (NumPy computes it).
    combine: str | None
    #: Where an accumulator starts: the ``"zero"``, ``"one"``, ``"lowest"`` or ``"highest"``
    #: value of its dtype (``identity_value``).
    identity: str | None
    #: The result dtype: ``"same"``, ``"float"``, ``"sum"`` (bools and ints give int64),
    #: ``"index"`` (int64) or ``"bool"``.
    result: str
    #: The accumulator dtype: ``"same"``, ``"wide"`` (float64 for floats, else int64),
    #: ``"float64"`` or ``"bool"`` (each value folds in as its truth).
    accumulate: str
    #: The result is the accumulator divided by the number of elements reduced.
    divide: bool = False
    #: Takes one axis or None (an index into the flattened values).
    one_axis: bool = False
    #: May reduce a size-0 axis (NumPy refuses where there is no identity).
    empty_ok: bool = True
    #: ``d(g, x, out, axes, count)``: the gradient for ``x``, given ``g`` and ``out``
    #: broadcast back to ``x``'s shape and ``count`` elements per result; None: none.
    derivative: Callable | None = None
    #: The derivative reads ``x`` and ``out`` (the Node level keeps them, ``out``
    #: computed); without it they are None and nothing is kept.
    saves: bool = False

    def result_dtype(self, dtype: np.dtype) -> np.dtype:
        if self.result == "index":
            return dtypes.int64
        if self.result == "bool":
            return dtypes.bool_
        if self.result == "float":
            return dtypes.float_result(dtype)
        if self.result == "sum" and dtype.kind in "bi":
            return dtypes.int64
        return dtype

    def accumulator_dtype(self, dtype: np.dtype) -> np.dtype:
        """Sums accumulate in 64 bits (float32 sums in float64, for accuracy); float16
        in float32 at least (``dtypes.arithmetic_dtype``)."""
        if self.accumulate == "float64" or (self.accumulate == "wide" and dtype.kind == "f"):
            return dtypes.float64
        if self.accumulate == "bool":
            return dtypes.bool_
        return dtypes.int64 if self.accumulate == "wide" else dtypes.arithmetic_dtype(dtype)

    def identity_value(self, dtype: np.dtype):
        """The accumulator's first value for ``dtype``: 0, 1, or its lowest or highest value
        (infinities for floats, False and True for bools)."""
        if self.identity in ("zero", "one"):
            return dtype.type(self.identity == "one")
        high = self.identity == "highest"
        if dtype == dtypes.bool_:
            return np.bool_(high)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return dtype.type(info.max if high else info.min)
        return dtype.type(np.inf if high else -np.inf)


def _d_sum(g, x, out, axes, count):
    return g


def _d_mean(g, x, out, axes, count):
    return g * (1.0 / max(count, 1))


def _d_extremum(g, x, out, axes, count):
    """max and min: the gradient is shared evenly between the elements equal to ``out``;
    where ``out`` is NaN, between the NaNs that made it (as PyTorch's ``max()``), not
    lost."""
    hit = _e(g).where(out != out, x != x, x == out)
    ties = hit.astype(x.dtype).sum(axes, True).broadcast_to(x.shape)
    return _e(g).where(hit, g / ties, 0)


def _d_prod(g, x, out, axes, count):
    """``g`` times the product of the *other* entries of each slice, without a division
    by zero, and written so that its own derivative is right too (double backward).

    ``p`` is the product of the nonzero entries and ``n`` the number of zeros. An entry
    that is not zero gets ``p / x`` times the zeros' product: 1 with no zero; with one
    zero that zero's value, read as ``zsum`` (the sum of the zeros: 0, but a gradient of
    1 to that zero); with more, 0 (and so is every derivative). A zero entry gets ``p``
    times the product of the other zeros: 1 with it alone, the other one's value with
    two (``zsum - x``), else 0."""
    e = _e(g)
    zero = x == 0
    n = zero.astype(x.dtype).sum(axes, True).broadcast_to(x.shape)
    nonzero = e.where(zero, 1, x)
    p = nonzero.prod(axes, True).broadcast_to(x.shape)
    zsum = e.where(zero, x, 0).sum(axes, True).broadcast_to(x.shape)
    at_zero = p * e.where(n == 1, 1, e.where(n == 2, zsum - x, 0))
    elsewhere = p / nonzero * e.where(n == 0, 1, e.where(n == 1, zsum, 0))
    return g * e.where(zero, at_zero, elsewhere)


REDUCTIONS: dict[str, ReduceDef] = {r.name: r for r in [
    ReduceDef("sum", "sum", np.sum, "add", "zero", "sum", "wide", derivative=_d_sum),
    ReduceDef("mean", "mean", np.mean, "add", "zero", "float", "float64", divide=True,
              derivative=_d_mean),
    ReduceDef("max", "amax", np.amax, "maximum", "lowest", "same", "same", empty_ok=False,
              derivative=_d_extremum, saves=True),
    ReduceDef("min", "amin", np.amin, "minimum", "highest", "same", "same", empty_ok=False,
              derivative=_d_extremum, saves=True),
    ReduceDef("prod", "prod", np.prod, "mul", "one", "sum", "wide", derivative=_d_prod,
              saves=True),
    ReduceDef("any", "any", np.any, "logical_or", "lowest", "bool", "bool"),
    ReduceDef("all", "all", np.all, "logical_and", "highest", "bool", "bool"),
    ReduceDef("argmax", "argmax", np.argmax, None, None, "index", "same", one_axis=True,
              empty_ok=False),
]}

#: Reductions named as the Python builtins the modules made from these rows still call
#: (``any(...)`` over a generator): their ``T.*`` and ``mt.*`` functions are exported,
#: but not made globals of those modules (``module_globals``).
_BUILTIN_NAMES = frozenset({"any", "all"})


def module_globals(functions: dict) -> dict:
    """``functions`` without those that would hide a builtin the module calls."""
    return {name: fn for name, fn in functions.items() if name not in _BUILTIN_NAMES}


# ---- user-defined ops ---------------------------------------------------------

_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
_CUDA_TOKEN_RE = re.compile(
    r"\s+|\{[0-2T]\}|\d+\.?\d*(?:[eE][+-]?\d+)?f?|\.\d+(?:[eE][+-]?\d+)?f?"
    r"|[A-Za-z_][A-Za-z0-9_]*|==|!=|<=|>=|&&|\|\||[-+*/%<>!?:(),]"
)
CUDA_FUNCTIONS = frozenset(
    "exp expf log logf log1p log1pf expm1 expm1f sqrt sqrtf rsqrt rsqrtf tanh tanhf sin sinf "
    "cos cosf tan tanf fabs fabsf fmax fmaxf fmin fminf pow powf erf erff erfc erfcf floor "
    "floorf ceil ceilf round roundf rint rintf trunc truncf abs min max isnan isinf copysign "
    "copysignf".split()
)


def validate_cuda_expr(snippet: str, arity: int) -> str:
    """Accept only operands, numbers, operators and whitelisted math functions.

    Anything else -- statements, braces, preprocessor lines, comments (``//``,
    ``/*``), increments, commas outside a function's argument list, strings,
    unknown identifiers, or operands beyond the arity -- is refused, so nothing
    a user passes can change the shape of the generated kernel.
    """
    if not isinstance(snippet, str) or not snippet.strip():
        raise ValueError(f"cuda expression: expected one C expression, got {snippet!r}")
    for bad in ("//", "/*", "*/", "++", "--"):
        if bad in snippet:
            raise ValueError(f"cuda expression: {bad!r} is not allowed in {snippet!r} "
                             "(no comments or increments)")
    pos = 0
    parens: list[bool] = []  # for each open '(': does it hold a function's arguments?
    previous = ""
    for m in _CUDA_TOKEN_RE.finditer(snippet):
        if m.start() != pos:
            break
        tok = m.group()
        pos = m.end()
        if tok.isspace():
            continue
        _check_cuda_token(tok, snippet, arity, parens, previous)
        previous = tok
    if pos != len(snippet):
        raise ValueError(f"cuda expression: unexpected text at position {pos} in {snippet!r}: "
                         f"{snippet[pos:pos + 10]!r}")
    if parens:
        raise ValueError(f"cuda expression: unbalanced '(' in {snippet!r}")
    return snippet


def _check_cuda_token(tok: str, snippet: str, arity: int, parens: list, previous: str) -> None:
    if tok[0].isalpha() or tok[0] == "_":
        if tok not in CUDA_FUNCTIONS:
            raise ValueError(f"cuda expression: identifier {tok!r} is not allowed; "
                             f"use {{0}}..{{{arity - 1}}} for operands and one of "
                             f"{sorted(CUDA_FUNCTIONS)}")
    elif tok.startswith("{") and tok != "{T}" and int(tok[1]) >= arity:
        raise ValueError(f"cuda expression: operand {tok} but the op takes {arity}")
    elif tok == "(":
        parens.append(previous in CUDA_FUNCTIONS)
    elif tok == ")":
        if not parens:
            raise ValueError(f"cuda expression: unbalanced ')' in {snippet!r}")
        parens.pop()
    elif tok == "," and not (parens and parens[-1]):
        raise ValueError(f"cuda expression: ',' outside a function's arguments in {snippet!r} "
                         "(the comma operator is not allowed)")


#: A user op's assumed cost (``OpDef.cost_ns``): a numpy_fn is typically a ufunc or two.
USER_OP_COST_NS = (4.0, 0.75)


def register_op(name: str, numpy_fn: Callable, cuda: str, *, arity: int = 1,
                derivative: Callable | None = None, result: str = "promote",
                py: str | None = None) -> OpDef:
    """Register a user-defined elementwise op, usable like a built-in and fused with them.

    Args:
        name: lower-case identifier, not already registered.
        numpy_fn: ``f(*arrays, out=None)`` computing the op elementwise with NumPy.
            For the compiled CPU evaluator it must also work on scalars in numba's
            nopython mode (plain arithmetic and ``np.`` ufuncs do).
        cuda: one CUDA C expression over ``{0}``, ``{1}``, ... (``{T}`` is the type).
        arity: number of operands (1 to 3).
        derivative: ``d(g, out, *args)`` returning one gradient expression per
            operand (or None), for the Node level.
        result: ``promote``, ``float`` or ``bool``.
        py: optional per-element Python expression template (as the built-ins have).

    Returns:
        The ``OpDef``; call it with ``apply_op(name, *operands)`` or ``mt.op(name)``.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(f"op name must be a lower-case identifier matching "
                         f"{_NAME_RE.pattern!r} in full, got {name!r}")
    if name in OPS:
        raise ValueError(f"an op named {name!r} is already registered")
    if arity not in (1, 2, 3):
        raise ValueError(f"arity must be 1, 2 or 3, got {arity}")
    if result not in ("promote", "float", "bool"):
        raise ValueError(f"result must be 'promote', 'float' or 'bool', got {result!r}")
    if not callable(numpy_fn):
        raise TypeError(f"numpy_fn must be callable, got {type(numpy_fn).__name__}")
    validate_cuda_expr(cuda, arity)
    if py is not None:
        raise ValueError("py templates are for built-in ops; user ops are compiled from numpy_fn")
    op = OpDef(name, arity, _frozen(numpy_fn), cuda, None, result, derivative, builtin=False,
               cost_ns=USER_OP_COST_NS)
    OPS[name] = op
    return op


def user_result(op: OpDef, result, shape: tuple[int, ...]) -> np.ndarray:
    """A user op's ``numpy_fn`` result as an array of ``shape``, the broadcast shape of
    its operands: one that broadcasts to it (one element, a number) is broadcast -- a
    read-only view, as NumPy's ``out=`` would fill -- anything else is a ValueError
    naming the op and both shapes. Every path that calls a ``numpy_fn`` checks here."""
    result = np.asarray(result)
    if result.shape == shape:
        return result
    try:
        fits = np.broadcast_shapes(result.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"user op {op.name!r}: numpy_fn returned shape {result.shape}, "
                         f"expected {shape} (the broadcast shape of its operands)")
    return np.broadcast_to(result, shape)


def _frozen(fn: Callable) -> Callable:
    """``fn`` with the module globals and closure values it has now.

    numba compiles a global's or a closed-over variable's value into the kernel;
    NumPy would read it again on every call. A copy of the function over a
    snapshot of both makes every backend compute with the values of
    registration time (a mutable object, such as an array, is still shared).
    """
    if not isinstance(fn, types.FunctionType):
        return fn
    cells = fn.__closure__
    if cells is not None:
        cells = tuple(types.CellType(c.cell_contents) if _cell_filled(c) else c for c in cells)
    copy = types.FunctionType(fn.__code__, dict(fn.__globals__), fn.__name__,
                              fn.__defaults__, cells)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    return copy


def _cell_filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # not assigned yet
        return False
    return True


_ON_UNREGISTER: list[Callable[[str], None]] = []


def on_unregister(hook: Callable[[str], None]) -> None:
    """Call ``hook(name)`` when the user op ``name`` is unregistered (plan.py drops the
    plans that call it, and the kernels hung on them)."""
    _ON_UNREGISTER.append(hook)


def unregister_op(name: str) -> None:
    """Remove a user-defined op (built-ins cannot be removed). What holds its function
    is forgotten: the plans calling it (``on_unregister``), and every kept launch and
    prepared call (``caches.invalidate``)."""
    op = OPS.get(name)
    if op is None or op.builtin:
        raise ValueError(f"{name!r} is not a registered user op")
    del OPS[name]
    for hook in _ON_UNREGISTER:
        hook(name)
    caches.invalidate(f"op {name!r} unregistered")

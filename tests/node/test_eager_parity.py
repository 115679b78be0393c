"""Ops computed at once below the fusion threshold give what the fused path gives.

Below ``mt.get_fusion_threshold()`` elements a CPU op runs at once with NumPy
(tensor/eager.py); from it on, it stays lazy and fuses. Each test here runs one
program at sizes straddling a threshold (a small one, set for the test, so the
sizes stay quick) and compares values, gradients and gradient dtypes between
the two paths, and with finite differences or PyTorch; it also checks which path
ran: no kernel at all below the threshold, fused kernels from it on. Every row and
reduction on special values, on each evaluator, is tests/test_conformance.py's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.tensor.eager import spread as spread_back
from minitorch_exp.tensor.ops import OPS, REDUCTIONS
from minitorch_exp.tensor.tensor import from_numpy

from ._helpers import seeds, values

T = 48  # the threshold these tests straddle
NEAR = st.integers(T - 6, T + 6)  # sizes on both sides of it
DTYPES = st.sampled_from(["float32", "float64"])
TOL = {"float32": dict(rtol=2e-5, atol=1e-6), "float64": dict(rtol=1e-11, atol=1e-13)}

#: Every differentiable built-in row, and the values its operands take.
ROWS = sorted(name for name, op in OPS.items()
              if op.builtin and op.result != "bool" and name != "sign")
DOMAINS = {"log": "positive", "log1p": "positive", "sqrt": "positive", "rsqrt": "positive",
           "pow": "positive"}


def operands(name: str, n: int, rng) -> tuple[list, list]:
    """``(arrays, numbers)`` for the row ``name`` on ``n`` elements: the tensor operands
    and, after them, its Python-number operands."""
    op, domain = OPS[name], DOMAINS.get(name, "real")
    if name == "where":
        return [rng.random(n) < 0.5, values(rng, n), values(rng, n)], []
    if name == "clip":
        return [values(rng, n)], [-0.8, 0.9]
    return [values(rng, n, domain) for _ in range(op.arity)], []


def run(name: str, arrays, numbers, dtype: str, threshold: int, upstream, rng_number=None):
    """The row applied under ``threshold``: its values, its inputs' gradients and their
    dtypes, and the kernels counted from building it to the gradients in ``.grad``."""
    with mt.fusion(threshold=threshold):
        nodes = [mt.tensor(a) if a.dtype == bool else
                 mt.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
        args = nodes + list(numbers)
        if rng_number is not None:  # the second operand a Python number instead
            args = [nodes[0], rng_number]
        with mt.count_kernels() as k:
            out = mt.op(name, *args)
            out.backward(mt.tensor(upstream, dtype=out.dtype))
            result = out.numpy().copy()
        grads = [n.grad for n in nodes if n.requires_grad]
        return (result, [g.numpy().copy() for g in grads], [g.dtype for g in grads], k.total)


def assert_same(at_once, fused, dtype):
    np.testing.assert_allclose(at_once[0], fused[0], **TOL[dtype])
    for a, f in zip(at_once[1], fused[1]):
        np.testing.assert_allclose(a, f, **TOL[dtype])
    assert at_once[2] == fused[2] == [np.dtype(dtype)] * len(at_once[2])


@pytest.mark.parametrize("name", ROWS)
@settings(max_examples=6, deadline=None)
@given(n=NEAR, dtype=DTYPES, seed=seeds)
def test_every_row_gives_the_same_values_and_gradients_on_both_sides(name, n, dtype, seed):
    rng = np.random.default_rng(seed)
    arrays, numbers = operands(name, n, rng)
    upstream = rng.uniform(0.5, 1.5, n)
    at_once = run(name, arrays, numbers, dtype, n + 1, upstream)
    fused = run(name, arrays, numbers, dtype, 0, upstream)
    straddling = run(name, arrays, numbers, dtype, T, upstream)
    assert at_once[3] == 0, "below the threshold nothing runs as a kernel"
    assert fused[3] >= 1
    assert straddling[3] == (0 if n < T else fused[3])
    assert_same(at_once, fused, dtype)
    assert_same(straddling, fused, dtype)


@pytest.mark.parametrize("name", [n for n in ROWS if OPS[n].arity == 2])
@pytest.mark.parametrize("number", [2, 0.5, -1.5])
def test_a_python_number_operand_on_both_sides(name, number):
    rng = np.random.default_rng(7)
    (x, _), _ = operands(name, T, rng)
    x = np.abs(x) + 0.5 if name == "pow" else x
    upstream = rng.uniform(0.5, 1.5, T)
    for dtype in ("float32", "float64"):
        at_once = run(name, [x], [], dtype, T + 1, upstream, rng_number=number)
        fused = run(name, [x], [], dtype, 0, upstream, rng_number=number)
        assert at_once[3] == 0 and fused[3] >= 1
        assert_same(at_once, fused, dtype)


SPECIAL_VALUES = [1.5, 0.5, -0.0, 0.0, 3e-8, -2.0, 6e4, 1e300, -1e300, np.inf, -np.inf,
                  np.nan, 1e-45]


def assert_same_bits_or_ulps(got, want, dtype: str, ulps: int) -> None:
    """Equal up to ``ulps`` units in the last place, nan where nan, zeros of one sign."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_allclose(got, want, rtol=ulps * np.finfo(dtype).eps, atol=0)
    zeros = (got == 0) & (want == 0)
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


SPECIAL = st.sampled_from(SPECIAL_VALUES)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from([n for n in ROWS if OPS[n].arity == 2]), dtype=DTYPES,
       x=SPECIAL, y=SPECIAL, form=st.sampled_from(["tensors", "number right", "number left"]))
def test_a_binary_op_on_0d_operands_on_both_sides(name, dtype, x, y, form):
    """Scalar parameters (``lr * a.grad``, ``a * b``): each binary row on 0-d tensors and
    Python numbers gives, at once, the engine's value (arithmetic bit for bit) and its
    gradients, special values too."""
    results = []
    for threshold in (0, 1 << 20):
        with mt.fusion(threshold=threshold), np.errstate(all="ignore"):
            a = mt.tensor(np.asarray(x, dtype), requires_grad=True)
            b = mt.tensor(np.asarray(y, dtype), requires_grad=True)
            out = mt.op(name, *{"tensors": (a, b), "number right": (a, y),
                                "number left": (x, b)}[form])
            out.backward()
            grads = [t.grad.numpy().copy() for t in (a, b) if t.grad is not None]
            results.append((out.numpy().copy(), grads))
    (fused, fused_grads), (at_once, at_once_grads) = results
    assert at_once.dtype == fused.dtype
    # one IEEE operation is exact; pow is NumPy's libm against the kernels' (a few ulps)
    assert_same_bits_or_ulps(at_once, fused, dtype, 0 if name in ("add", "sub", "mul",
                                                                  "div") else 4)
    assert len(at_once_grads) == len(fused_grads)
    for g1, g2 in zip(at_once_grads, fused_grads):
        np.testing.assert_allclose(g1, g2, rtol=TOL[dtype]["rtol"])


# ---- reductions and broadcasting ------------------------------------------------------------

def reduce_run(fn, x, dtype, threshold, upstream_shape_seed):
    with mt.fusion(threshold=threshold):
        node = mt.tensor(x, dtype=dtype, requires_grad=True)
        with mt.count_kernels() as k:
            out = fn(node)
            rng = np.random.default_rng(upstream_shape_seed)
            out.backward(mt.tensor(rng.uniform(0.5, 1.5, out.shape), dtype=out.dtype))
            result = out.numpy().copy()
        return result, [node.grad.numpy().copy()], [node.grad.dtype], k.total


REDUCERS = {
    **{f"{r}(axis={a})": (lambda x, r=r, a=a: getattr(mt, REDUCTIONS[r].function)(x, a))
       for r in ("sum", "mean", "max", "min") for a in (None, 0, 1)},
    "sum(1, keepdims)": lambda x: x.sum(1, keepdims=True),
    "sum of a sum": lambda x: x.sum(0).sum(),  # the inner backward gets a broadcast view
    "x * its mean (0-d)": lambda x: x * x.mean(),  # a gradient summed to 0-d
    "x + row (broadcast)": lambda x: x + x.sum(0) * 0.5,
    "x * column (broadcast)": lambda x: x * x.mean(1, keepdims=True),
    "log_softmax": lambda x: mt.log_softmax(x, 1),
    "softmax": lambda x: mt.softmax(x, 1),
    "logsumexp": lambda x: mt.logsumexp(x, 1),
}


@pytest.mark.parametrize("what", sorted(REDUCERS))
@settings(max_examples=5, deadline=None)
@given(rows=st.integers(T // 4 - 2, T // 4 + 2), dtype=DTYPES, seed=seeds)
def test_reductions_and_broadcasts_on_both_sides(what, rows, dtype, seed):
    x = values(np.random.default_rng(seed), (rows, 4))
    fn = REDUCERS[what]
    at_once = reduce_run(fn, x, dtype, x.size + 1, seed)
    fused = reduce_run(fn, x, dtype, 0, seed)
    # at once, no kernel runs: max's and min's count of ties too (a reduction inside
    # their rule's expression, which the engine evaluates by the same policy)
    assert at_once[3] == 0 and fused[3] >= 1
    assert_same(at_once, fused, dtype)


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=4), data=st.data())
def test_a_reduction_s_gradient_is_spread_back_into_a_new_array(shape, data):
    """``eager.spread`` (the at-once backward of a reduction) against np.broadcast_to,
    for gradients with the reduced axes kept or dropped, contiguous or not: a new
    C-contiguous array of its own (ops on it run at NumPy's contiguous speed)."""
    shape = tuple(shape)
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, max(len(shape) - 1, 0)))
                                  if shape else st.just(set()))))
    keepdims = data.draw(st.booleans())
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    g = np.arange(1, math.prod(kept) + 1, dtype=np.float32).reshape(kept)
    if data.draw(st.booleans()):  # a gradient that is a strided view itself
        g = np.broadcast_to(g, kept) if g.ndim == 0 else np.asfortranarray(g)[..., ::-1]
    given_g = g if keepdims else g.reshape([n for i, n in enumerate(kept) if i not in axes])
    before = given_g.copy()
    spread = spread_back(from_numpy(given_g), shape, axes).array
    np.testing.assert_array_equal(spread, np.broadcast_to(g, shape))
    assert spread.shape == shape and spread.dtype == g.dtype
    assert spread.flags.c_contiguous and spread.flags.owndata
    assert not np.shares_memory(spread, given_g)
    np.testing.assert_array_equal(given_g, before)  # the caller's array is untouched


def test_a_reduction_of_a_large_input_stays_one_fused_pass():
    """The threshold reads a reduction's input, not its one-element result."""
    x = mt.tensor(np.ones(4 * T, np.float32))
    with mt.fusion(threshold=T), mt.count_kernels() as k:
        total = ((x * 2 + 1) * 3).sum()
        assert total.item() == 9 * 4 * T
    assert k["reduce"] == 1 and k.total == 1


# ---- above the threshold: fusion as before ---------------------------------------------------

def test_above_the_threshold_a_chain_is_one_kernel_below_it_none():
    for n, kernels in ((T - 1, 0), (T, 1), (10 * T, 1)):
        x = mt.tensor(np.linspace(-1, 1, n, dtype=np.float32), requires_grad=True)
        with mt.fusion(threshold=T), mt.count_kernels() as k:
            y = ((x * 2 + 1).tanh() * 3 - x).exp()
            assert y.is_lazy == (n >= T)
            y.numpy()
        assert k.total == kernels, n


# ---- a training step: the eager MLP, against the fused one and PyTorch ------------------------

def mlp_run(threshold: int, steps: int = 3):
    gen = np.random.default_rng(0)
    x = mt.tensor(gen.standard_normal((8, 6)).astype(np.float32))
    y = mt.tensor(gen.integers(0, 3, 8))
    with mt.fusion(threshold=threshold):
        model = nn.Sequential(nn.Linear(6, 12, generator=np.random.default_rng(1)), nn.ReLU(),
                              nn.Linear(12, 3, generator=np.random.default_rng(2)))
        opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.numpy().copy() for p in model.parameters()]


def test_an_mlp_trains_alike_computed_at_once_and_fused():
    at_once, fused = mlp_run(1 << 20), mlp_run(0)
    np.testing.assert_allclose(at_once[0], fused[0], rtol=1e-5)
    for a, f in zip(at_once[1], fused[1]):
        np.testing.assert_allclose(a, f, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_targets_at_once_and_fused_agree(smoothing):
    """Below the threshold the (smoothed) one-hot rows are made with NumPy, above it by
    a fused compare: the same rows bit for bit, and the same loss and gradient."""
    gen = np.random.default_rng(5)
    z, t = gen.standard_normal((7, 5)).astype(np.float32), gen.integers(0, 5, 7)
    found = []
    for threshold in (1 << 20, 0):
        with mt.fusion(threshold=threshold):
            q = nn.functional._one_hot(mt.tensor(t), 5, np.dtype(np.float32), mt.device("cpu"),
                                       smoothing)
            x = mt.tensor(z, requires_grad=True)
            loss = nn.functional.cross_entropy(x, mt.tensor(t), label_smoothing=smoothing)
            loss.backward()
            found.append((mt.Node(q).numpy(), loss.numpy(), x.grad.numpy()))
    (q_now, loss_now, grad_now), (q_fused, loss_fused, grad_fused) = found
    np.testing.assert_array_equal(q_now, q_fused)
    np.testing.assert_allclose(loss_now, loss_fused, rtol=1e-6)
    np.testing.assert_allclose(grad_now, grad_fused, rtol=1e-5, atol=1e-7)


def test_polynomial_fit_computed_at_once_matches_pytorch():
    """The tutorial's step: broadcast 0-d parameters, powers, a sum, SGD under no_grad."""
    torch = pytest.importorskip("torch")
    xs = np.linspace(-np.pi, np.pi, 200, dtype=np.float32)
    start = np.random.default_rng(0).standard_normal(4).astype(np.float32)

    def fit(lib):
        x, y = lib.tensor(xs), lib.tensor(np.sin(xs))
        params = [lib.tensor(np.float32(v), requires_grad=True) for v in start]
        for _ in range(3):
            a, b, c, d = params
            loss = ((a + b * x + c * x ** 2 + d * x ** 3 - y) ** 2).sum()
            loss.backward()
            with lib.no_grad():
                for p in params:
                    p -= 1e-5 * p.grad
                    p.grad = None
        return [float(p.item()) for p in params]

    with mt.fusion(threshold=1 << 20):
        ours = fit(mt)
    np.testing.assert_allclose(ours, fit(torch), rtol=1e-4, atol=1e-6)


# ---- writes and saved values --------------------------------------------------------------

def test_an_in_place_update_at_once_equals_the_engine_s():
    for threshold in (0, 1 << 20):
        with mt.fusion(threshold=threshold):
            w = mt.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
            g = mt.tensor(np.full((2, 3), 0.5, np.float32))
            with mt.no_grad():
                w -= 0.1 * g
                w *= 2
                w += mt.tensor(np.float32(1))  # a 0-d value, broadcast
                w /= 4
            np.testing.assert_allclose(w.numpy(), ((np.arange(6).reshape(2, 3) - 0.05) * 2
                                                   + 1) / 4, rtol=1e-6)


@settings(max_examples=80, deadline=None)
@given(saver=st.sampled_from(["+=", "-=", "*=", "/="]),
       dtype=DTYPES,
       start=st.sampled_from([1.5, -0.0, 3e-8, 6e4, 1e300, np.inf, np.nan]),
       value=st.one_of(st.sampled_from([0, 2, -1e-6, 0.1, 1e300, np.inf, np.nan]),
                       st.tuples(DTYPES, st.sampled_from([0.0, 1e-6, -2.5, 7e4, 1e300,
                                                          np.nan]))),
       viewed=st.booleans())
def test_a_0d_in_place_update_at_once_equals_the_engine_s(saver, dtype, start, value,
                                                          viewed):
    """A scalar parameter's update (``a -= lr * a.grad``) at once, bit for bit as the
    engine's, for both float dtypes, Python numbers and 0-d tensors of either float
    dtype, overflow, infinities, nan, division by zero; also into a 0-d view of a vector."""
    results = []
    for threshold in (0, 1 << 20):
        with mt.fusion(threshold=threshold), mt.no_grad(), np.errstate(all="ignore"):
            base = mt.tensor(np.full(3, start, dtype=dtype))
            dst = base[1] if viewed else mt.tensor(np.asarray(start, dtype=dtype))
            v = value if not isinstance(value, tuple) else \
                mt.tensor(np.asarray(value[1], dtype=value[0]))
            if saver == "+=":
                dst += v
            elif saver == "-=":
                dst -= v
            elif saver == "*=":
                dst *= v
            else:
                dst /= v
            results.append((dst.numpy().copy(), base.numpy().copy()))
    (fused, fused_base), (at_once, at_once_base) = results
    assert at_once.dtype == fused.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(at_once.view(f"u{at_once.itemsize}"),
                                  fused.view(f"u{fused.itemsize}"))
    np.testing.assert_array_equal(at_once_base, fused_base)


def test_an_integer_in_place_update_refused_as_by_the_engine():
    counts = mt.tensor(np.arange(4))
    with pytest.raises(TypeError, match=r"true division into an int64 tensor"):
        counts /= 2


def test_a_saved_tensor_written_in_place_is_reported_at_once_too():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    w = mt.tensor([0.5, 1.5], requires_grad=True)
    loss = (x * w).sum()
    assert not loss.is_lazy
    with mt.no_grad():
        w += 1
    with pytest.raises(RuntimeError, match=r"mul.*modified in place"):
        loss.backward()


def test_gradients_accumulate_at_once_across_backward_calls():
    x = mt.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for _ in range(3):
        (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 3 * 2 * np.array([1.0, -2.0, 3.0]))
    assert x.grad.dtype == mt.float32


def test_one_gradient_for_two_leaves_is_not_shared_memory():
    a, b = mt.tensor([1.0, 2.0], requires_grad=True), mt.tensor([3.0, 4.0], requires_grad=True)
    (a + b).sum().backward()
    with mt.no_grad():
        a.grad += 1
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0])


def test_a_linear_layer_computed_at_once_gives_a_contiguous_result():
    """As PyTorch's products are: ``.view`` works on it."""
    layer = nn.Linear(8, 4, generator=np.random.default_rng(0))
    x = mt.tensor(np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32))
    y = layer(x)
    assert not y.is_lazy and y.view(-1).shape == (12,)
    expected = x.numpy() @ layer.weight.numpy().T + layer.bias.numpy()
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_relu_s_gradient_at_once_is_where_s_also_at_infinities_and_nan(dtype):
    """Computed at once, relu's gradient is g times a mask (not ``where``): the same
    values for finite g, 0 where an infinite g meets a flat input (not inf * 0 = nan),
    and g passed on at a nan input (PyTorch's rule)."""
    x = np.array([-2.0, 0.0, 3.0, np.nan, -1.0, 4.0, -0.0, 2.0], dtype=dtype)
    for g in (np.arange(1.0, 9.0), np.array([np.inf, -np.inf, np.inf, 1, -5, np.nan, 2, -3])):
        node = mt.tensor(x, requires_grad=True)
        node.relu().backward(mt.tensor(g.astype(dtype)))
        want = np.where(x <= 0, 0, g).astype(dtype)
        np.testing.assert_array_equal(node.grad.numpy(), want)
        assert node.grad.dtype == np.dtype(dtype)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("transposed_input", [False, True])
def test_linear_at_once_with_and_without_bias_and_a_transposed_input(bias, transposed_input):
    """``eager.linear``: the transposed product copied to C order in the bias's pass,
    or the plain product where the input is not C-ordered."""
    rng = np.random.default_rng(5)
    layer = nn.Linear(8, 4, bias=bias, generator=rng)
    data = rng.standard_normal((8, 3)).astype(np.float32)
    x = mt.tensor(data).T if transposed_input else mt.tensor(np.ascontiguousarray(data.T))
    y = layer(x)
    expected = data.T @ layer.weight.numpy().T + (layer.bias.numpy() if bias else 0)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert y.numpy().flags.c_contiguous


def linear_through(threshold: int, x, w, b, upstream, dtype: str, x_grad: bool):
    """A linear layer's output and gradients (x's, if it requires one, w's, b's) under
    the fusion threshold ``threshold``."""
    from minitorch_exp.node import ops

    nodes = [mt.tensor(x, dtype=dtype, requires_grad=x_grad),
             mt.tensor(w, dtype=dtype, requires_grad=True)]
    if b is not None:
        nodes.append(mt.tensor(b, dtype=dtype, requires_grad=True))
    with mt.fusion(threshold=threshold):
        out = ops.linear(*nodes)
        out.backward(mt.tensor(upstream, dtype=dtype))
    return out, [out.numpy().copy()] + [n.grad.numpy().copy() for n in nodes if n.requires_grad]


@settings(max_examples=60, deadline=None)
@given(lead=st.sampled_from([(1,), (5,), (3, 2)]), n_in=st.integers(1, 6),
       n_out=st.integers(1, 6), bias=st.booleans(), x_grad=st.booleans(), dtype=DTYPES,
       seed=st.integers(0, 2**32 - 1))
def test_a_linear_layer_at_once_gives_the_fused_values_and_graph(
        lead, n_in, n_out, bias, x_grad, dtype, seed):
    """A linear layer computed at once and fused: the same values and gradients, and
    the same node (a ``Linear`` whose backward refuses an input written in place after
    the forward)."""
    rng = np.random.default_rng(seed)
    x, w = values(rng, lead + (n_in,)), values(rng, (n_out, n_in))
    b, g = (values(rng, n_out) if bias else None), values(rng, lead + (n_out,))
    now, now_values = linear_through(T, x, w, b, g, dtype, x_grad)
    fused, fused_values = linear_through(0, x, w, b, g, dtype, x_grad)
    rtol = 1e-12 if dtype == "float64" else 1e-5
    for got, want in zip(now_values, fused_values, strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    assert now.grad_fn.name == fused.grad_fn.name == "Linear"
    assert now.requires_grad and not now.is_lazy
    layer_input = mt.tensor(x, dtype=dtype, requires_grad=True)
    out = mt.nn.functional.linear(layer_input, mt.tensor(w, dtype=dtype, requires_grad=True))
    with mt.no_grad():
        layer_input += 1
    with pytest.raises(RuntimeError, match="modified in place"):
        out.sum().backward()

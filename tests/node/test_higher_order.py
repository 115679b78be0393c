"""Gradients of gradients (issue 43): ``grad(create_graph=True)``,
``backward(create_graph=True)``, ``autograd.functional`` and ``gradgradcheck``.

With ``create_graph`` each Function's backward runs on Nodes (node/higher_order.py):
a registry row's rule is the one that fuses in a first backward, run on Nodes. The
second derivatives are checked against central differences of the first ones in
float64 (``gradgradcheck``), and against PyTorch where it is installed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.autograd import functional as AF
from minitorch_exp.tensor.ops import OPS

from ._helpers import assert_penalties_match_torch

#: Every differentiable built-in row (sign's derivative is 0 wherever it is defined)
ROWS = sorted(name for name, op in OPS.items()
              if op.builtin and op.result != "bool" and name != "sign")
#: Rows whose derivative is not differentiable at the values drawn: steps and kinks
KINKED = {"abs", "relu", "floor", "ceil", "trunc", "round", "maximum", "minimum", "clip",
          "where"}


def leaf(values) -> mt.Node:
    return mt.tensor(np.asarray(values, np.float64), requires_grad=True)


def operands(name: str, rng) -> list:
    x = rng.uniform(0.3, 1.4, 5) * np.where(rng.random(5) < 0.5, -1, 1)
    positive = np.abs(x) + 0.2
    if name == "where":
        return [mt.tensor(x > 0), leaf(x), leaf(-x * 0.5)]
    if name == "clip":
        return [leaf(x), -0.8, 0.9]
    if name == "pow":
        return [leaf(positive), leaf(x)]
    first = positive if name in ("log", "log1p", "sqrt", "rsqrt") else x
    return [leaf(first)] + [leaf(rng.uniform(0.3, 1.4, 5)) for _ in range(OPS[name].arity - 1)]


def test_the_issue_s_example_gives_second_derivatives():
    x = leaf([1.0, 2.0, 3.0])
    g, = mt.autograd.grad((x ** 3).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2)
    assert g.requires_grad and g.grad_fn is not None
    gg, = mt.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 6 * x.numpy())


@pytest.mark.parametrize("name", ROWS)
def test_every_registry_row_passes_gradgradcheck(name):
    args = operands(name, np.random.default_rng(0))
    assert mt.autograd.gradgradcheck(lambda *xs: mt.op(name, *xs), args)


@pytest.mark.parametrize("what", ["sum", "mean", "amax", "amin", "matmul", "linear",
                                  "views", "softmax", "log_softmax", "logsumexp",
                                  "cross_entropy", "mse_loss", "slices", "cat", "stack",
                                  "layer_norm", "batch_norm", "gelu", "masked_fill"])
def test_reductions_products_views_and_losses_pass_gradgradcheck(what):
    rng = np.random.default_rng(1)
    x = leaf(rng.standard_normal((3, 4)))
    w = leaf(rng.standard_normal((5, 4)))
    b = leaf(rng.standard_normal(5))
    target = mt.tensor(np.array([1, 0, 4]))
    fns = {
        "sum": lambda x: (x * x).sum(1), "mean": lambda x: (x.tanh() * x).mean(0),
        "amax": lambda x: (x * x).amax(1), "amin": lambda x: (x * x).amin(0),
        "matmul": lambda x: (x @ x.T).tanh(),
        "linear": lambda x: nn.functional.linear(x.tanh(), w, b).sigmoid(),
        "views": lambda x: (x.reshape(4, 3).permute(1, 0) * x.T.reshape(4, 3).T).exp(),
        "softmax": lambda x: mt.softmax(x, -1), "log_softmax": lambda x: mt.log_softmax(x, 1),
        "logsumexp": lambda x: mt.logsumexp(x, 1),
        "cross_entropy": lambda x: nn.functional.cross_entropy(
            nn.functional.linear(x, w, b), target),
        "mse_loss": lambda x: nn.functional.mse_loss(x.tanh(), x * 0.5),
        "slices": lambda x: x[1:, ::2] * x[:2, 1::2],
        "cat": lambda x: mt.cat([x, x.exp()], 1).tanh(),
        "stack": lambda x: mt.stack([x, x * x], 0).sin(),
        "layer_norm": lambda x: nn.LayerNorm(4).double()(x).tanh(),
        "batch_norm": lambda x: nn.BatchNorm1d(4).double()(x) ** 2,
        "gelu": lambda x: nn.functional.gelu(x),
        "masked_fill": lambda x: x.masked_fill(x > 0, 0.0) * x,
    }
    assert mt.autograd.gradgradcheck(fns[what], [x])


def test_jacobian_and_hessian_match_finite_differences():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 3))
    f = lambda x: (mt.tensor(a) @ x).tanh()  # noqa: E731
    x = rng.standard_normal(3)
    jac = AF.jacobian(f, mt.tensor(x)).numpy()
    eps, want = 1e-6, np.zeros((3, 3))
    for j in range(3):
        d = np.zeros(3)
        d[j] = eps
        want[:, j] = (np.tanh(a @ (x + d)) - np.tanh(a @ (x - d))) / (2 * eps)
    np.testing.assert_allclose(jac, want, rtol=1e-6, atol=1e-8)
    s = lambda x: (x.sin() * x).sum()  # noqa: E731  d2/dx2 = 2cos x - x sin x
    hess = AF.hessian(s, mt.tensor(x)).numpy()
    np.testing.assert_allclose(hess, np.diag(2 * np.cos(x) - x * np.sin(x)), atol=1e-12)


def test_products_with_vectors_agree():
    rng = np.random.default_rng(3)
    x, v = mt.tensor(rng.standard_normal(4)), mt.tensor(rng.standard_normal(4))
    f = lambda x: (x.exp() * x.sin()).sum()  # noqa: E731
    hess = AF.hessian(f, x).numpy()
    _, hv = AF.hvp(f, x, v)
    _, vh = AF.vhp(f, x, v)
    np.testing.assert_allclose(hv.numpy(), hess @ v.numpy(), rtol=1e-10)
    np.testing.assert_allclose(vh.numpy(), v.numpy() @ hess, rtol=1e-10)
    g = lambda x: x.tanh() * 3  # noqa: E731
    jac = AF.jacobian(g, x).numpy()
    _, jv = AF.jvp(g, x, v)
    _, vj = AF.vjp(g, x, v)
    np.testing.assert_allclose(jv.numpy(), jac @ v.numpy(), rtol=1e-10)
    np.testing.assert_allclose(vj.numpy(), v.numpy() @ jac, rtol=1e-10)


def test_a_function_without_a_rule_is_named_when_differentiated_twice():
    class Twice(mt.Function):  # its backward is not written for Nodes
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return (g * 2,)

    x = leaf(np.arange(6.0).reshape(2, 3))
    y = Twice.apply(x).sum()
    with pytest.raises(RuntimeError, match="create_graph: Twice.backward is not"):
        mt.autograd.grad(y, x, create_graph=True)


def test_without_create_graph_the_gradient_is_outside_the_graph():
    x = leaf([1.0, 2.0])
    g, = mt.autograd.grad((x * x).sum(), x)
    assert not g.requires_grad and g.grad_fn is None


def test_backward_with_create_graph_accumulates_graph_gradients():
    x = leaf([0.5, -1.0])
    (x.sin() * x).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    first = x.grad
    x.grad = None
    first.sum().backward()
    want = 2 * np.cos(x.numpy()) - x.numpy() * np.sin(x.numpy())
    np.testing.assert_allclose(x.grad.numpy(), want)


# ---- the three scripts of the issue, against PyTorch -----------------------------------

def torch_or_skip():
    return pytest.importorskip("torch")


def test_a_gradient_penalty_step_matches_pytorch():
    """A WGAN-GP critic's penalty, ``(|d critic / d x| - 1)^2``, differentiated into the
    critic's weights."""
    torch = torch_or_skip()
    rng = np.random.default_rng(4)
    w1, b1 = rng.standard_normal((8, 3)) * 0.5, rng.standard_normal(8) * 0.1
    w2, b2 = rng.standard_normal((1, 8)) * 0.5, rng.standard_normal(1) * 0.1
    x = rng.standard_normal((5, 3))

    def run(lib, F):
        params = [lib.tensor(p, requires_grad=True) for p in (w1, b1, w2, b2)]
        inp = lib.tensor(x, requires_grad=True)
        out = F.linear(F.linear(inp, params[0], params[1]).tanh(), params[2], params[3])
        g, = lib.autograd.grad(out.sum(), inp, create_graph=True)
        penalty = ((g.pow(2).sum(1).sqrt() - 1) ** 2).mean()
        penalty.backward()
        # the output bias does not move the penalty: no gradient, in both libraries
        return [penalty.item()] + [None if p.grad is None else p.grad.numpy() for p in params]

    ours, theirs = run(mt, nn.functional), run(torch, torch.nn.functional)
    assert ours[-1] is None and theirs[-1] is None
    for a, b in zip(ours[:-1], theirs[:-1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_a_physics_informed_second_derivative_matches_pytorch():
    """u(x) = MLP(x); the residual of ``u'' = f`` needs d2u/dx2, then its gradient in
    the weights."""
    torch = torch_or_skip()
    rng = np.random.default_rng(5)
    w1, b1 = rng.standard_normal((6, 1)), rng.standard_normal(6)
    w2 = rng.standard_normal((1, 6))
    xs = np.linspace(-1, 1, 7).reshape(7, 1)

    def run(lib, F):
        params = [lib.tensor(p, requires_grad=True) for p in (w1, b1, w2)]
        x = lib.tensor(xs, requires_grad=True)
        u = F.linear(F.linear(x, params[0], params[1]).tanh(), params[2])
        du, = lib.autograd.grad(u.sum(), x, create_graph=True)
        d2u, = lib.autograd.grad(du.sum(), x, create_graph=True)
        loss = ((d2u + lib.tensor(np.pi ** 2 * np.sin(np.pi * xs))) ** 2).mean()
        loss.backward()
        return [loss.item(), d2u.detach().numpy()] + [p.grad.numpy() for p in params]

    for a, b in zip(run(mt, nn.functional), run(torch, torch.nn.functional)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_a_two_step_maml_inner_loop_matches_pytorch():
    """Two inner SGD steps on a sine task with ``create_graph``, then the outer loss's
    gradient in the initial weights, through both steps."""
    torch = torch_or_skip()
    rng = np.random.default_rng(6)
    w1, b1 = rng.standard_normal((10, 1)) * 0.5, np.zeros(10)
    w2, b2 = rng.standard_normal((1, 10)) * 0.5, np.zeros(1)
    xs = rng.uniform(-3, 3, (8, 1))
    ys = np.sin(xs + 0.5)

    def run(lib, F):
        params = [lib.tensor(p, requires_grad=True) for p in (w1, b1, w2, b2)]
        x, y = lib.tensor(xs), lib.tensor(ys)

        def loss(p):
            return ((F.linear(F.linear(x, p[0], p[1]).relu(), p[2], p[3]) - y) ** 2).mean()

        fast = params
        for _ in range(2):
            grads = lib.autograd.grad(loss(fast), fast, create_graph=True)
            fast = [p - 0.05 * g for p, g in zip(fast, grads)]
        outer = loss(fast)
        outer.backward()
        return [outer.item()] + [p.grad.numpy() for p in params]

    for a, b in zip(run(mt, nn.functional), run(torch, torch.nn.functional)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_an_input_modified_in_place_is_refused_as_in_a_first_backward():
    x = leaf([0.5, 1.5])
    y = x * 1.0
    z = (y.exp()).sum()
    with mt.no_grad():
        y += 1.0
    with pytest.raises(RuntimeError, match="modified in place"):
        mt.autograd.grad(z, x, create_graph=True)


def test_a_freed_graph_is_named():
    x = leaf([0.5, 1.5])
    z = (x.exp() * x).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="freed"):
        mt.autograd.grad(z, x, create_graph=True)


class Cube(mt.autograd.Function):
    """Saves its input: double backward records through it, as PyTorch's does."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 3 * x ** 2 * g


class Exp(mt.autograd.Function):
    """Saves its output: the output's own graph carries the second derivative."""

    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        out, = ctx.saved_tensors
        return g * out


@pytest.mark.parametrize("fn", [Cube, Exp], ids=["saves its input", "saves its output"])
def test_a_pytorch_style_function_of_tensor_ops_differentiates_twice(fn):
    x = leaf([0.5, -1.0, 2.0])
    assert mt.autograd.gradgradcheck(lambda t: fn.apply(t * 1.0).sin(), [x])
    torch = pytest.importorskip("torch")

    def second(lib, cls):
        t = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        g, = lib.autograd.grad(cls.apply(t).sum(), t, create_graph=True)
        return lib.autograd.grad(g.sum(), t)[0].detach().numpy()

    class TorchTwin(torch.autograd.Function):
        forward, backward = staticmethod(fn._user_forward), staticmethod(fn._user_backward)

    np.testing.assert_allclose(second(mt, fn), second(torch, TorchTwin), rtol=1e-12)


# ---- convolutions and pooling: their gradients are themselves differentiable ops ----------

F = nn.functional


def _conv_cases():
    rng = np.random.default_rng(7)
    x = leaf(rng.standard_normal((2, 4, 6, 5)))
    w = leaf(rng.standard_normal((6, 2, 3, 2)))  # groups=2
    b = leaf(rng.standard_normal(6))
    wt = leaf(rng.standard_normal((4, 3, 2, 3)))  # transposed: (C_in, C_out/groups, kH, kW)
    w1 = leaf(rng.standard_normal((3, 4, 3)))
    x1 = leaf(rng.standard_normal((2, 4, 7)))
    b3 = leaf(rng.standard_normal(3))
    return {
        "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1,
                                            dilation=(1, 2), groups=2).tanh(), [x, w, b]),
        "conv2d same": (lambda x, w: F.conv2d(x, w, padding="same", groups=2) ** 2, [x, w]),
        "conv1d": (lambda x, w: F.conv1d(x, w, stride=2, padding=1).sin(), [x1, w1]),
        "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(
            x, w, b, stride=2, padding=1, output_padding=1).tanh(), [x, wt, b3]),
        "avg_pool2d": (lambda x: F.avg_pool2d(x * x, 3, stride=2, padding=1,
                                              count_include_pad=False).sin(), [x]),
        "max_pool2d": (lambda x: F.max_pool2d(x.sin() * x, (2, 3), stride=(1, 2),
                                              padding=1) ** 2, [x]),
    }


@pytest.mark.parametrize("what", list(_conv_cases()))
def test_convolutions_and_pooling_pass_gradgradcheck(what):
    fn, args = _conv_cases()[what]
    assert mt.autograd.gradgradcheck(fn, args)


def test_a_gradient_penalty_through_a_conv_net_matches_pytorch():
    """A WGAN-GP critic's penalty through conv, max pool and avg pool: the parameters'
    gradients of ``(|d critic / d x| - 1)^2`` against PyTorch's double backward."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    values = {"x": rng.standard_normal((2, 3, 8, 8)), "w1": rng.standard_normal((4, 3, 3, 3)),
              "b1": rng.standard_normal(4), "w2": rng.standard_normal((2, 4, 2, 2))}

    def penalty(lib, t):
        f = lib.nn.functional
        h = f.conv2d(t["x"], t["w1"], t["b1"], padding=1).tanh()
        h = f.max_pool2d(h, 2)
        h = f.conv_transpose2d(h, t["w2"].transpose(0, 1), stride=2)
        score = f.avg_pool2d(h.sin(), 2).sum()
        g, = lib.autograd.grad(score, t["x"], create_graph=True)
        return ((g.reshape(2, -1) ** 2).sum(1).sqrt() - 1).pow(2).mean()

    ours = {k: mt.tensor(v, requires_grad=True) for k, v in values.items()}
    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in values.items()}
    penalty(mt, ours).backward()
    penalty(torch, theirs).backward()
    for k in values:
        np.testing.assert_allclose(ours[k].grad.numpy(), theirs[k].grad.numpy(),
                                   rtol=1e-9, atol=1e-10)


def _indexing_cases():
    rng = np.random.default_rng(11)
    v = leaf(rng.standard_normal((4, 5)))
    src = leaf(rng.standard_normal((2, 5)))
    x = leaf(rng.standard_normal((2, 3, 6, 5)))
    index = mt.tensor(np.array([[0, 2, 1, 3, 0], [3, 1, 0, 0, 2]]))  # no repeat per column
    rows = mt.tensor(np.array([2, 0, 2]))
    return {
        "gather": (lambda v: mt.gather(v * v, 0, index).sin(), [v]),
        "scatter_add": (lambda v, s: mt.scatter_add(v * v, 0, index, s.exp()).sin(), [v, src]),
        "scatter": (lambda v, s: mt.scatter(v * v, 0, index, s.exp()).sin(), [v, src]),
        "index_select": (lambda v: mt.index_select(v * v, 0, rows).sin(), [v]),
        "index_add": (lambda v, s: mt.index_add(v * v, 0, rows[:2], s.exp()).sin(), [v, src]),
        "advanced index": (lambda v: (v * v)[rows, 1:].sin(), [v]),
        "embedding": (lambda v: F.embedding(mt.tensor(np.array([[0, 3], [3, 1]])), v).sin(),
                      [v]),
        "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x.sin() * x, (4, 3)) ** 2,
                                [x]),
    }


@pytest.mark.parametrize("what", list(_indexing_cases()))
def test_gathers_and_scatters_pass_gradgradcheck(what):
    fn, args = _indexing_cases()[what]
    assert mt.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("what", ["cumsum", "cumprod", "norm 2", "norm 3", "norm inf",
                                  "norm 1"])
def test_scans_and_norms_pass_gradgradcheck(what):
    x = leaf(np.random.default_rng(5).standard_normal((3, 4)))
    fns = {"cumsum": lambda x: mt.cumsum(x * x, 1).sin(),
           "cumprod": lambda x: mt.cumprod(x * 1.3, 1).sin(),
           "norm 2": lambda x: mt.linalg.vector_norm(x, 2, dim=1).sin(),
           "norm 3": lambda x: mt.linalg.vector_norm(x, 3, dim=0) ** 2,
           "norm inf": lambda x: mt.linalg.vector_norm(x * x, math.inf, dim=1).sin(),
           "norm 1": lambda x: mt.linalg.vector_norm(x, 1).exp()}
    assert mt.autograd.gradgradcheck(fns[what], [x])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 4), k=st.integers(1, 5), m=st.integers(1, 4),
       bias_shape=st.sampled_from(["row", "column", "scalar"]), seed=st.integers(0, 2**31))
def test_hessian_vector_products_match_pytorch_on_drawn_shapes(n, k, m, bias_shape, seed):
    """``grad(grad(f) . v)`` through a product, a broadcast bias, transcendental rows,
    a reduction and a softmax, for shapes hypothesis draws, against PyTorch."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    shapes = {"row": (m,), "column": (n, 1), "scalar": ()}
    values = [rng.standard_normal((n, k)), rng.standard_normal((k, m)),
              rng.standard_normal(shapes[bias_shape])]
    v = [rng.standard_normal(a.shape) for a in values]

    def hvp(lib, tensor):
        xs = [tensor(a, requires_grad=True) for a in values]
        x, w, b = xs
        h = (x @ w + b).tanh() * (x.sum(1, keepdim=True) * 0.5).sigmoid()
        y = (lib.softmax(h, 1) * h).sum() + (h ** 2).mean()
        gs = lib.autograd.grad(y, xs, create_graph=True)
        dot = sum((g * tensor(u)).sum() for g, u in zip(gs, v))
        return [t.numpy() for t in lib.autograd.grad(dot, xs)]

    ours = hvp(mt, mt.tensor)
    theirs = hvp(torch, lambda a, **kw: torch.tensor(a, **kw))
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


@settings(max_examples=25, deadline=None)
@given(groups=st.integers(1, 2), c=st.integers(1, 2), o=st.integers(1, 2),
       size=st.tuples(st.integers(4, 7), st.integers(4, 7)),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)), stride=st.integers(1, 2),
       padding=st.integers(0, 1), dilation=st.integers(1, 2), pool=st.booleans(),
       seed=st.integers(0, 2**31))
def test_conv_gradient_penalties_match_pytorch_on_drawn_shapes(groups, c, o, size, kernel,
                                                               stride, padding, dilation,
                                                               pool, seed):
    """The weight's and bias's gradients of ``|d score / d x|^2`` through a convolution
    (and a max or average pool), for shapes and windows hypothesis draws, against
    PyTorch's double backward."""
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((2, c * groups, *size)),
              rng.standard_normal((o * groups, c, *kernel)), rng.standard_normal(o * groups)]

    def penalty(lib, tensor):
        x, w, b = xs = [tensor(a, requires_grad=True) for a in values]
        f = lib.nn.functional
        h = f.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation,
                     groups=groups).tanh()
        if min(h.shape[-2:]) >= 2:
            h = f.max_pool2d(h, 2, 1) if pool else f.avg_pool2d(h, 2, 1)
        g, = lib.autograd.grad((h.sin() * h).sum(), x, create_graph=True)
        (g ** 2).sum().backward()
        return [t.grad.numpy() for t in xs[1:]]

    assert_penalties_match_torch(penalty)


def _layer_cases():
    rng = np.random.default_rng(13)
    x = leaf(rng.standard_normal((2, 4, 5, 5)))
    v = leaf(rng.standard_normal((3, 5)))
    y = mt.tensor(rng.standard_normal((3, 5)))
    p = mt.tensor(rng.uniform(0.1, 0.9, (3, 5)))
    labels, signs = mt.tensor(np.array([1, 0, 4])), mt.tensor(np.array([1, -1, 1]))
    return {
        "group_norm": (lambda x: F.group_norm(x, 2).tanh(), [x]),
        "instance_norm": (lambda x: F.instance_norm(x).tanh(), [x]),
        "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x * x, (3, 2)).sin(), [x]),
        "interpolate": (lambda x: F.interpolate(x * x, scale_factor=2, mode="bilinear").sin(),
                        [x]),
        "pixel_shuffle": (lambda x: F.pixel_shuffle(x * x, 2).sin(), [x]),
        "bce": (lambda v: F.binary_cross_entropy(v.sigmoid(), p), [v]),
        "bce_with_logits": (lambda v: F.binary_cross_entropy_with_logits(v, p), [v]),
        "kl_div": (lambda v: F.kl_div(F.log_softmax(v, 1), p, reduction="batchmean"), [v]),
        "huber": (lambda v: F.huber_loss(v * v, p), [v]),
        "smooth_l1": (lambda v: F.smooth_l1_loss(v * v, p), [v]),
        "nll": (lambda v: F.nll_loss(F.log_softmax(v, 1), labels), [v]),
        "cosine_embedding": (lambda v: F.cosine_embedding_loss(v, y, signs), [v]),
        "triplet_margin": (lambda v: F.triplet_margin_loss(v, y, y * 0.5), [v]),
        "activations": (lambda v: F.silu(v) + F.elu(v) + F.selu(v) + F.softplus(v)
                        + F.mish(v) + F.logsigmoid(v), [v]),
        "attention": (lambda v: F.scaled_dot_product_attention(
            *(v.reshape(1, 3, 5) for _ in range(3)), is_causal=True), [v]),
    }


@pytest.mark.parametrize("what", list(_layer_cases()))
def test_normalizations_losses_and_activations_pass_gradgradcheck(what):
    fn, args = _layer_cases()[what]
    assert mt.autograd.gradgradcheck(fn, args)


def test_a_backward_written_with_the_shared_surface_is_the_only_rule():
    """Views, casts, clones and matrix products differentiate twice by their own
    backward, run on the gradient Node with their saved tensors seen as the input
    Nodes: no second body (no ``RULES`` entry, no ``graph_backward``)."""
    from minitorch_exp.node import higher_order, ops

    one_body = [c for c in (ops.Reshape, ops.Permute, ops.AsType, ops.Clone, ops.Expand,
                            ops.MatMul) if c.backward_on_nodes]
    assert len(one_body) == 6
    for cls in one_body:
        assert cls not in higher_order.RULES and not hasattr(cls, "graph_backward")
    x = leaf(np.random.default_rng(4).standard_normal((2, 3)))
    fn = lambda x: (x.clone().permute(1, 0).reshape(2, 3).astype(np.float64) * x).sin()  # noqa: E731
    assert mt.autograd.gradgradcheck(fn, [x])


def test_a_one_body_backward_reading_an_intermediate_is_refused_by_name():
    """A ``backward_on_nodes`` Function whose backward reads a tensor made inside its
    forward (neither an input nor the output) cannot record that tensor's dependence on
    the inputs: ``create_graph`` names it instead of treating it as a constant."""
    class Cube(mt.Function):
        backward_on_nodes = True

        @staticmethod
        def forward(ctx, x):
            square = x * x
            ctx.save_for_backward(square)
            return square * x

        @staticmethod
        def backward(ctx, g):
            (square,) = ctx.saved_tensors
            return (g * square * 3,)

    x = leaf([1.0, 2.0])
    y = Cube.apply(x).sum()
    np.testing.assert_allclose(mt.autograd.grad(y, x, retain_graph=True)[0].numpy(), [3, 12])
    with pytest.raises(RuntimeError, match="Cube.backward reads a saved tensor that is "
                                           "neither an input nor the output"):
        mt.autograd.grad(y, x, create_graph=True)
